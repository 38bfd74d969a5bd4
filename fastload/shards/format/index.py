"""A shard's samples: its members grouped by key, and the index file that saves the scan.

Members are grouped into samples by WebDataset's rule: a member ``dir/KEY.EXT`` belongs to the
sample ``dir/KEY`` (the name up to the first dot of its last part), and a sample's members are
consecutive. Names that rule ignores are junk here too (hidden files such as macOS's ``._x``
and ``.DS_Store``, ``__MACOSX/``, ``__meta__`` entries).

The index is DALI's webdataset index, the ``v1.2`` text format its ``wds2idx`` tool writes: a
line ``v1.2 <samples>``, then one line per sample of ``<ext> <offset> <size> <name>`` groups,
one per member, the offset being that of the member's data. DALI's ``readers.webdataset`` reads
it (``index_paths=``), and fastload reads DALI's. It is kept beside its shard
(``NAME.tar`` -> ``NAME.idx``), or in fastload's cache folder when the shard's folder cannot be
written, and made again from a scan when it is older than its shard or does not fit it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from fastload.shards.format.tar import Member, scan
from fastload.system import cache_dir

__all__ = [
    "INDEX_VERSION",
    "Part",
    "Samples",
    "ShardIndex",
    "cached_index_path",
    "fits",
    "group",
    "index_path",
    "load",
    "read_index",
    "split_name",
    "write_index",
]

INDEX_VERSION = "v1.2"
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta


@dataclass(frozen=True)
class Part:
    """One member of a sample.

    Attributes:
        ext: Its extension: the name after the key's dot, as written (``jpg``, ``seg.png``).
        offset: Where its data starts in the shard.
        size: Its data's length.
        name: Its whole name in the tar.
    """

    ext: str
    offset: int
    size: int
    name: str

    @property
    def end(self) -> int:
        return self.offset + self.size


Samples = list[tuple[str, tuple[Part, ...]]]  # (key, its members), in the shard's order


@dataclass
class ShardIndex:
    """A shard's samples, and what is wrong with it.

    Attributes:
        samples: ``(key, parts)`` in the shard's order.
        problems: ``(member name, why)`` for members that belong to no sample or to two (an
            extension-less name, a key split by another key, a repeated member); the samples
            they touch are left out of ``samples``.
        lost: Why the scan stopped before the end of the tar (what follows is lost), or
            ``None``.
        size: The shard's size in bytes.
        index: The index file the samples were read from (``None``: from a scan).
    """

    samples: Samples
    problems: list[tuple[str, str]] = field(default_factory=list)
    lost: str | None = None
    size: int = 0
    index: str | None = None


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name by WebDataset's rule, or ``None`` for junk (a
    hidden file, ``__MACOSX/``, a ``__meta__`` entry) and for a name without an extension."""
    if _META.match(name) or name.startswith("__MACOSX/"):
        return None
    match = _KEY.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2)


def _is_junk(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith(".") or bool(_META.match(name)) or name.startswith("__MACOSX/")


def group(members: list[Member]) -> tuple[Samples, list[tuple[str, str]]]:
    """Group a tar's members into samples (see the module's notes).

    Returns:
        The samples, and ``(member name, why)`` for each member that fits no sample or makes
        one ambiguous (its samples are left out).
    """
    samples: list[tuple[str, list[Part]]] = []
    problems: list[tuple[str, str]] = []
    seen: dict[str, int] = {}  # key -> position in samples
    spoiled: set[int] = set()
    for member in members:
        split = split_name(member.name)
        if split is None:
            if not _is_junk(member.name):
                problems.append(
                    (member.name, "its name has no extension, so it belongs to no sample")
                )
            continue
        key, ext = split
        part = Part(ext, member.offset, member.size, member.name)
        if samples and samples[-1][0] == key:
            last = len(samples) - 1
            if any(p.ext.lower() == ext.lower() for p in samples[-1][1]):
                problems.append((member.name, f"sample {key!r} has two {ext!r} members"))
                spoiled.add(last)
            samples[-1][1].append(part)
            continue
        if key in seen:
            problems.append(
                (member.name, f"key {key!r} appears twice, its members not side by side")
            )
            spoiled.add(seen[key])
            spoiled.add(len(samples))
        seen[key] = len(samples)
        samples.append((key, [part]))
    kept = [(key, tuple(parts)) for k, (key, parts) in enumerate(samples) if k not in spoiled]
    return kept, problems


def index_path(shard: str) -> str:
    """The index kept beside a shard: ``NAME.tar`` -> ``NAME.idx``."""
    stem = shard[:-4] if shard.endswith(".tar") else shard
    return f"{stem}.idx"


def cached_index_path(shard: str) -> Path:
    """The index of a shard whose folder cannot be written, in fastload's cache folder."""
    digest = hashlib.sha1(os.fsencode(os.path.abspath(shard))).hexdigest()[:24]
    return cache_dir() / "shard-index" / f"{digest}.idx"


def write_index(path: str | os.PathLike[str], samples: Samples) -> None:
    """Write DALI's v1.2 index, under a temporary name first: it appears whole or not at all.

    Raises:
        ValueError: A member name holds whitespace, which the format cannot hold.
        OSError: The folder cannot be written.
    """
    lines = [f"{INDEX_VERSION} {len(samples)}"]
    for _, parts in samples:
        if any(len(p.name.split()) != 1 for p in parts):
            raise ValueError("a member name holds whitespace, which a v1.2 index cannot hold")
        lines.append(" ".join(f"{p.ext} {p.offset} {p.size} {p.name}" for p in parts))
    path = os.fspath(path)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def read_index(path: str | os.PathLike[str]) -> Samples:
    """Read a v1.2 index (DALI's or fastload's).

    Raises:
        ValueError: It is not a v1.2 index, or a line is malformed.
    """
    with open(path, encoding="utf-8", errors="surrogateescape") as lines:
        head = lines.readline().split()
        if len(head) < 2 or head[0] != INDEX_VERSION:
            raise ValueError(f"{os.fspath(path)!r} is not a {INDEX_VERSION} webdataset index")
        count = int(head[1])
        samples = []
        for number, line in enumerate(lines, start=2):
            fields = line.split()
            if not fields:
                continue
            if len(fields) % 4:
                raise ValueError(
                    f"{os.fspath(path)!r} line {number}: not <ext> <offset> <size> <name>"
                )
            parts = tuple(
                Part(fields[k], int(fields[k + 1]), int(fields[k + 2]), fields[k + 3])
                for k in range(0, len(fields), 4)
            )
            split = split_name(parts[0].name)
            samples.append((split[0] if split else parts[0].name, parts))
    if len(samples) != count:
        raise ValueError(f"{os.fspath(path)!r} lists {len(samples)} samples, its header {count}")
    return samples


def _is_index(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(INDEX_VERSION) + 1) == f"{INDEX_VERSION} ".encode()
    except OSError:
        return False


def _usable_index(path: str | Path, shard: os.stat_result) -> ShardIndex | None:
    """The index at ``path`` if it is at least as new as the shard and fits it."""
    try:
        if os.stat(path).st_mtime_ns < shard.st_mtime_ns:
            return None
        samples = read_index(path)
    except (OSError, ValueError):
        return None
    if not fits(samples, shard.st_size):
        return None
    return ShardIndex(samples, size=shard.st_size, index=os.fspath(path))


def fits(samples: Samples, size: int) -> bool:
    """Whether an index read from a file can be trusted for a shard of ``size`` bytes: every
    member inside it, no key twice (a shard with repeated keys is scanned again instead: the
    scan names the members and leaves their samples out)."""
    if any(p.end > size for _, parts in samples for p in parts):
        return False
    return len({key for key, _ in samples}) == len(samples)


def load(shard: str, *, expected: int | None = None) -> ShardIndex:
    """A shard's samples: from its index when it has a usable one, else from a scan, whose
    index is then written (beside the shard, or in the cache folder) when the shard is whole.

    Args:
        shard: The tar file.
        expected: The size its manifest gives: a shard of another size is not whole, and its
            scan is not kept (its problem shows again on the next read, and a pack's index
            beside it is not overwritten).

    Raises:
        FileNotFoundError: The shard does not exist.
        TarError: It is compressed, or not a tar file.
        OSError: It cannot be read.
    """
    stat = os.stat(shard)
    for candidate in (index_path(shard), cached_index_path(shard)):
        found = _usable_index(candidate, stat)
        if found is not None:
            return found
    scanned = scan(shard)
    samples, problems = group(scanned.members)
    result = ShardIndex(samples, problems, scanned.problem, scanned.size)
    whole = scanned.problem is None and not problems
    whole = whole and (expected is None or scanned.size == expected)
    if whole and all(p.end <= scanned.size for _, parts in samples for p in parts) and samples:
        result.index = _save(shard, samples)
    return result


def _save(shard: str, samples: Samples) -> str | None:
    """Keep the scan's index beside the shard, else in the cache folder; if neither can be
    written (or the names hold whitespace), the shard is scanned again next time.

    Returns:
        Where it was written, if anywhere.
    """
    beside = index_path(shard)
    if not os.path.exists(beside) or _is_index(beside):  # never over a file of another kind
        try:
            write_index(beside, samples)
            return beside
        except ValueError:
            return None
        except OSError:
            pass
    cached = cached_index_path(shard)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_index(cached, samples)
    except OSError:
        return None
    return str(cached)
