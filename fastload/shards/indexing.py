"""Each shard's index: the step after :mod:`fastload.shards.sources` has resolved what a user
named into shards and their sizes, and before :class:`fastload.ImageShards` builds its table.

A local shard is indexed where it lies (:func:`fastload.shards.format.index.load`: its index
file, or one scan); a remote one through the shard cache (its copy of the index, the manifest's
index, or a scan of the downloaded shard). Each shard's problems come back beside its index as
``(where, why)``, for the dataset to raise or record by its ``on_error``.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from fastload.shards.format import index as indexes
from fastload.shards.format.tar import TarError
from fastload.shards.sources import LOOKUPS, Source
from fastload.shards.storage.cache import ShardCache

__all__ = ["MISSING", "Indexed", "index_all", "index_one"]

MISSING = "no such shard"  # the problem of a shard that is not there

Problems = list[tuple[str, str]]
Indexed = tuple[Problems, indexes.ShardIndex | None]  # a shard's problems, its index (if any)


def index_all(found: Source, cache: ShardCache | None) -> list[Indexed]:
    """Every shard's index and problems, in order; remote shards several at a time."""
    numbers = range(len(found.shards))
    if cache is None:
        return [index_one(found, number, None) for number in numbers]
    with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="fastload-index") as pool:
        return list(pool.map(lambda number: index_one(found, number, cache), numbers))


def index_one(found: Source, number: int, cache: ShardCache | None) -> Indexed:
    """Shard ``number``'s index, and its problems as ``(where, why)``."""
    shard = found.shards[number]
    expected = found.expected[number] if found.expected is not None else None
    try:
        size = found.sizes[number] if found.sizes else None
        if cache is None:
            index = indexes.load(shard, expected=expected)
        elif size is None:
            raise FileNotFoundError(shard)
        else:
            where = found.indexes[number] if found.indexes else indexes.index_path(shard)
            index = cache.index(shard, size, where)
    except FileNotFoundError:
        return [(shard, MISSING)], None
    except (TarError, OSError) as exc:
        why = str(exc) if isinstance(exc, TarError) else f"{type(exc).__name__}: {exc}"
        return [(shard, why)], None
    problems = [(f"{shard}:{name}", why) for name, why in index.problems]
    if expected is not None and index.size > expected:
        problems.insert(0, (shard, f"it has {index.size} bytes, its manifest says {expected}"))
        return problems, None
    if expected is not None and index.size < expected:
        packed = found.manifest.shards[number].samples if found.manifest else None
        return _before_the_cut(shard, index, expected, packed, problems)
    if index.lost is not None:
        problems.insert(0, (shard, f"{index.lost}: the members after it are lost"))
    return problems, index


def _before_the_cut(
    shard: str,
    index: indexes.ShardIndex,
    expected: int,
    packed: int | None,
    problems: list[tuple[str, str]],
) -> tuple[list[tuple[str, str]], indexes.ShardIndex]:
    """A shard cut short (shorter than its manifest says): the samples that lie whole before
    the cut, and the loss as the first problem, with the byte where the shard ends."""
    size = index.size
    whole = [(key, parts) for key, parts in index.samples if max(p.end for p in parts) <= size]
    lost = f"{packed - len(whole)} of its {packed} samples" if packed is not None else "samples"
    why = (
        f"cut short: it ends at byte {size} of the {expected} its manifest gives; "
        f"{lost} are lost (the {len(whole)} before the cut are read)"
    )
    return [(shard, why), *problems], dataclasses.replace(index, samples=whole, lost=None)
