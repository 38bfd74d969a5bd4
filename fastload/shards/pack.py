"""``fastload.pack``: a class-folder dataset, an image-text table or a COCO dataset, written as
tar shards, an index per shard and a manifest.

Each sample becomes ``KEY.jpg`` (the file's bytes unchanged; a PNG stays ``.png``, and so on,
named by its content), ``KEY.cls`` (the label as ASCII digits) and, by default, ``KEY.json``
(the original path, size in bytes and pixels). A table's row gives ``KEY.txt`` (the caption)
instead of ``KEY.cls``, its other columns joining ``KEY.json``; a COCO image gives no
``KEY.cls`` and always a ``KEY.json`` holding its ``image_id`` and ``annotations``. Keys are
the samples' positions in the packed order, zero-padded. Samples are shuffled across shards by
default (seeded), so that neighbours are not one class.

Writing is atomic and resumable. Each shard is written under a hidden temporary name and
renamed once whole (its index first), then recorded in a log in the output folder; the manifest
is written last. A run that is stopped leaves complete shards and a log; running it again with
the same settings continues after the last complete shard, and with other settings says which
ones differ. The samples of a shard are deterministic, also with ``max_side`` (the re-encoding
is), so a continued run writes what the uninterrupted one would have.

Files are read by threads (copying is I/O); re-encoding runs in processes. One writer appends
to one shard at a time, in order.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastload.backends.base import DEFAULT_MAX_PIXELS, decode_with_pillow, read_file
from fastload.backends.region import add_restarts, require_built
from fastload.checks import check_choice, check_int, differences
from fastload.image import probe, sniff
from fastload.raw_pixels import encode_ppm
from fastload.shards.format import manifest as manifests
from fastload.shards.format import tables
from fastload.shards.format.index import Part, write_index
from fastload.shards.format.tar import BLOCK, END, header, padding
from fastload.shards.raw_choice import densest
from fastload.shards.storage import upload
from fastload.shards.storage.remote import is_remote
from fastload.system import cpu_cores
from fastload.version import __version__

__all__ = ["DEFAULT_SHARD_SIZE", "pack"]

DEFAULT_SHARD_SIZE = 256 * 2**20
PIXELS = ("encoded", "raw", "seekable")  # how an image member holds its pixels (``pixels=``)
_PLAN = ".fastload-pack.json"  # the settings of a pack in progress
_LOG = ".fastload-pack.log"  # one JSON line per complete shard
# a member's extension, by its content's format
_EXTENSIONS = {
    "jpeg": "jpg",
    "ppm": "ppm",
    "png": "png",
    "gif": "gif",
    "bmp": "bmp",
    "tiff": "tiff",
    "webp": "webp",
}


@dataclass(frozen=True)
class _Source:
    paths: list[str]
    # an int label each, a tables.Row (a caption and other columns), or a COCO image's
    # {"image_id": ..., "annotations": [...]}
    labels: list[Any]
    classes: list[str]
    root: str
    categories: list[dict[str, Any]] = field(default_factory=list)
    detection: bool = False  # a COCO dataset: its images must keep their bytes


@dataclass(frozen=True)
class _Item:
    """One sample as it goes into the tar: its members' headers, data and padding in one
    buffer (made in the reading thread or process), and each member's extension, data offset
    in the buffer and size."""

    key: str
    data: bytes
    members: tuple[tuple[str, int, int], ...]


def _item(key: str, members: list[tuple[str, bytes]]) -> _Item:
    pieces, where, at = [], [], 0
    for ext, data in members:
        head = header(f"{key}.{ext}", len(data))
        pieces += [head, data, b"\0" * padding(len(data))]
        where.append((ext, at + len(head), len(data)))
        at += len(head) + len(data) + padding(len(data))
    return _Item(key, b"".join(pieces), tuple(where))


def _coco(source: Any) -> Any:
    """``source`` as fastload's ``detection.CocoDetection`` when it is a COCO dataset (fastload's
    or torchvision's), else ``None``."""
    if isinstance(source, (str, os.PathLike)) or tables.is_table(source):
        return None
    from fastload.detection.coco import as_coco

    return as_coco(source)


def _source(
    source: Any, keys: tuple[str, str, str | None], max_side: int | None, pixels: str = "encoded"
) -> _Source:
    """The samples of ``source`` (see :func:`_found`), checked.

    Raises:
        ValueError: It holds no images, or it is a COCO dataset and ``max_side`` is set.
    """
    found = _found(source, keys)
    if not found.paths:
        raise ValueError(f"no images in {source!r}")
    if found.detection and pixels == "raw":
        raise ValueError(
            "pixels='raw' would store the images of a COCO dataset upright (their EXIF "
            "orientation applied), away from where its boxes and masks are: pack it with "
            "pixels='encoded'"
        )
    if found.detection and max_side is not None:
        raise ValueError(
            f"max_side={max_side!r} would re-encode the images of a COCO dataset and leave its "
            "boxes and masks where they were: pack it with max_side=None"
        )
    return found


def _found(source: Any, keys: tuple[str, str, str | None]) -> _Source:
    """The samples of a class folder, an image-text table (``keys``: its image and caption
    columns and separator), a fastload ``ImageList`` / ``ImageFolder``, a torchvision
    ``ImageFolder``, or a COCO dataset (fastload's or torchvision's ``CocoDetection``)."""
    coco = _coco(source)
    if coco is not None:
        ids = coco.ids
        paths = [coco.path(i) for i in range(len(coco))]
        labels = [
            {"image_id": ids[i], "annotations": coco.annotations(i)} for i in range(len(coco))
        ]
        return _Source(paths, labels, [], coco.root, coco.categories, detection=True)
    if tables.is_table(source):
        image_key, caption_key, separator = keys
        table = tables.read_table(
            source, image_key=image_key, caption_key=caption_key, separator=separator
        )
        root = os.path.dirname(os.path.abspath(os.fspath(source)))
        return _Source(table.paths, list(table.rows), [], root)
    if isinstance(source, (str, os.PathLike)):
        from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

        root = os.fspath(source)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root!r} is not a folder")
        classes, class_to_idx = find_classes(root)
        found = make_dataset(root, class_to_idx, IMG_EXTENSIONS)
        return _Source([p for p, _ in found], [c for _, c in found], classes, root)
    if hasattr(source, "read_sample") and hasattr(source, "labels"):  # fastload's own
        paths = [source.path(i) for i in range(len(source))]
        return _Source(paths, source.labels.tolist(), list(source.classes), source.root)
    samples = getattr(source, "samples", None)
    if samples is not None and hasattr(source, "classes"):  # torchvision's DatasetFolder
        root = getattr(source, "root", "")
        return _Source([p for p, _ in samples], [c for _, c in samples], source.classes, root)
    raise TypeError(
        "pack takes a class folder's path, an image-text table, a fastload.ImageFolder / "
        "ImageList, a torchvision ImageFolder, or a CocoDetection (fastload's or torchvision's), "
        f"got {type(source).__name__}"
    )


# ---------------------------------------------------------------- one sample's members


def _relative(path: str, root: str) -> str:
    """``path`` relative to ``root`` (a prefix cut where it is one: relpath costs 15 us)."""
    prefix = os.path.join(root, "")
    if root and path.startswith(prefix):
        return path[len(prefix) :]
    return os.path.relpath(path, root) if root else path


def _metadata(path: str, root: str, data: bytes, stored: bytes | None) -> dict[str, Any]:
    info = probe(data)
    meta: dict[str, Any] = {
        "path": _relative(path, root),
        "size": len(data),
        "width": info.width,
        "height": info.height,
    }
    if stored is not None:  # re-encoded: the stored image's size too
        small = probe(stored)
        meta |= {"stored_size": len(stored), "stored_width": small.width}
        meta["stored_height"] = small.height
    return meta


def _members(
    key: str, data: bytes, stored: bytes | None, target: Any, meta: dict[str, Any] | None
) -> _Item:
    """``KEY.<image>`` and ``KEY.cls`` (an int target), ``KEY.txt`` (a table's row, whose
    other columns join ``KEY.json``), or ``KEY.json`` alone (a COCO image's id and
    annotations, with the metadata)."""
    image = data if stored is None else stored
    ext = _EXTENSIONS.get(sniff(image), "bin")
    if isinstance(target, dict):
        members = [(ext, image)]
        meta = {**(meta or {}), **target}
    elif isinstance(target, tables.Row):
        members = [(ext, image), ("txt", target.caption.encode())]
        if target.extra:
            meta = {**(meta or {}), **dict(target.extra)}
    else:
        members = [(ext, image), ("cls", str(target).encode())]
    if meta is not None:
        members.append(("json", json.dumps(meta, ensure_ascii=False, default=str).encode()))
    return _item(key, members)


def _copy(key: str, path: str, label: Any, root: str, metadata: bool) -> _Item:
    data = read_file(path)
    meta = _metadata(path, root, data, None) if metadata else None
    return _members(key, data, None, label, meta)


def _reencode(
    key: str,
    path: str,
    label: Any,
    root: str,
    metadata: bool,
    max_side: int | None,
    quality: int,
    pixels: str = "encoded",
) -> _Item:
    """The file as the pack stores it (:func:`_stored`)."""
    data = read_file(path)
    try:
        stored = _stored(data, max_side, quality, pixels)
    except Exception:  # an unreadable image is packed as it is: readers report it
        stored = None
    meta = _metadata(path, root, data, stored) if metadata else None
    return _members(key, data, stored, label, meta)


def _stored(data: bytes, max_side: int | None, quality: int, pixels: str) -> bytes | None:
    """What is stored in place of an image file's bytes, upright (its EXIF orientation
    applied): with ``pixels="raw"`` its RGB pixels as a binary PPM, shrunk to ``max_side``
    when larger; else, when it is larger than ``max_side``, a JPEG at ``quality`` shrunk to
    it; else ``None`` (the bytes as they are). With ``pixels="seekable"``, a JPEG among those
    is rewritten with restart markers (the same pixels; one libjpeg-turbo refuses is kept)."""
    from PIL import Image, ImageOps

    if pixels == "seekable":
        encoded = _stored(data, max_side, quality, "encoded")
        jpeg = data if encoded is None else encoded
        if sniff(jpeg) != "jpeg":
            return encoded
        try:
            return add_restarts(jpeg, max_pixels=DEFAULT_MAX_PIXELS)
        except ValueError:  # damaged, or a JPEG libjpeg does not read: readers report it
            return encoded
    if pixels == "raw":
        image = Image.fromarray(decode_with_pillow(data))  # fastload's own RGB of any mode
        if max_side is not None and max(image.size) > max_side:
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS, reducing_gap=3.0)
        return encode_ppm(np.asarray(image))
    with Image.open(io.BytesIO(data)) as opened:
        upright = ImageOps.exif_transpose(opened)
        if max_side is None or max(upright.size) <= max_side:
            return None
        if upright.mode not in ("RGB", "L"):
            upright = upright.convert("RGB")
        upright.thumbnail((max_side, max_side), Image.Resampling.LANCZOS, reducing_gap=3.0)
        out = io.BytesIO()
        upright.save(out, "JPEG", quality=quality)
        return out.getvalue()


_CHUNK = 16  # samples a task: a future per file cost as much as reading the file


def _prepare_chunk(
    prepare: Callable[..., _Item], work: list[tuple[str, str, Any, str | None]]
) -> list[_Item]:
    return [
        prepare(key, path, label) if pixels is None else prepare(key, path, label, pixels=pixels)
        for key, path, label, pixels in work
    ]


def _items(
    source: _Source,
    order: np.ndarray,
    start: int,
    prepare: Callable[..., _Item],
    pool: Executor,
    window: int,
    raw: np.ndarray | None = None,
) -> Iterator[_Item]:
    """The samples from position ``start`` of ``order``, prepared by ``pool`` in chunks with
    at most ``window`` chunks in flight; keys are positions in ``order``, zero-padded. ``raw``
    (one bool per source image) chooses each image's ``pixels``; ``None``: the pack's."""
    width = max(6, len(str(len(order) - 1)))
    pending: deque[Any] = deque()
    chunks = iter(range(start, len(order), _CHUNK))
    while True:
        while len(pending) < window:
            first = next(chunks, None)
            if first is None:
                break
            work = [
                (
                    f"{position:0{width}d}",
                    source.paths[k],
                    source.labels[k],
                    None if raw is None else ("raw" if raw[k] else "encoded"),
                )
                for position, k in enumerate(order[first : first + _CHUNK].tolist(), start=first)
            ]
            pending.append(pool.submit(_prepare_chunk, prepare, work))
        if not pending:
            return
        yield from pending.popleft().result()


# ---------------------------------------------------------------- writing shards


class _ShardWriter:
    """Appends samples to one shard at a time, rolling over at ``shard_size`` bytes."""

    def __init__(self, out: Path, shard_size: int, number: int, on_done: Callable) -> None:
        self.out, self.shard_size, self.number, self.on_done = out, shard_size, number, on_done
        self.file: Any = None
        self.parts: list[tuple[str, tuple[Part, ...]]] = []
        self.written = 0
        self.first = 0
        # the checksum runs beside the writes (both let go of the GIL): one thread, in order
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="fastload-pack-sha256")
        self.hashing: deque[Any] = deque()
        self.digest: Any = None

    def add(self, item: _Item, position: int) -> None:
        size = len(item.data)
        if self.file is not None and self.written + size + len(END) > self.shard_size:
            self.close()
        if self.file is None:
            self._open(position)
        parts = tuple(
            Part(ext, self.written + at, length, f"{item.key}.{ext}")
            for ext, at, length in item.members
        )
        self._write(item.data)
        self.parts.append((item.key, parts))

    def _open(self, position: int) -> None:
        self.file = open(self.out / f".{self._name('tar')}.partial", "wb")  # noqa: SIM115
        self.written, self.parts, self.first = 0, [], position
        self.digest = hashlib.sha256()

    def _name(self, ext: str) -> str:
        return f"shard-{self.number:06d}.{ext}"

    def _write(self, data: bytes) -> None:
        self.file.write(data)
        self.hashing.append(self.hasher.submit(self.digest.update, data))
        while len(self.hashing) > 64 or (self.hashing and self.hashing[0].done()):
            self.hashing.popleft().result()
        self.written += len(data)

    def close(self) -> None:
        """Finish the shard being written: end marker, index, rename, log."""
        if self.file is None:
            return
        self._write(END)
        self.file.close()
        self.file = None
        while self.hashing:
            self.hashing.popleft().result()
        write_index(self.out / self._name("idx"), self.parts)
        os.replace(self.out / f".{self._name('tar')}.partial", self.out / self._name("tar"))
        entry = manifests.ShardEntry(
            self._name("tar"),
            self._name("idx"),
            len(self.parts),
            self.written,
            self.digest.hexdigest(),
        )
        self.on_done(entry, self.first)
        self.number += 1

    def abandon(self) -> None:
        self.hasher.shutdown(wait=True, cancel_futures=True)
        if self.file is not None:
            self.file.close()
            self.file = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.out / f".{self._name('tar')}.partial")


# ---------------------------------------------------------------- starting, continuing


def _options(
    shuffle_seed: int | None,
    shard_size: int,
    max_side: int | None,
    quality: int,
    metadata: bool,
    pixels: str,
    raw_share: float,
) -> dict[str, Any]:
    """The pack's settings that its bytes depend on (an unfinished pack resumes only with the
    same ones)."""
    options: dict[str, Any] = {"shuffle_seed": shuffle_seed, "shard_size": shard_size}
    options["max_side"] = max_side
    options |= {"quality": quality if max_side is not None else None, "metadata": metadata}
    if pixels != "encoded":  # left out otherwise: an unfinished pack of before still resumes
        options["pixels"] = pixels
    if raw_share != 1:
        options["raw_share"] = raw_share
    return options


def _settings(source: _Source, **options: Any) -> dict[str, Any]:
    digest = hashlib.sha256()
    for path, label in zip(source.paths, source.labels, strict=True):
        digest.update(f"{path}\0{label}\n".encode("utf-8", "surrogateescape"))
    return {"samples": len(source.paths), "source": digest.hexdigest()[:32], **options}


def _begin(out: Path, settings: dict[str, Any]) -> list[tuple[manifests.ShardEntry, int]]:
    """Start a pack in ``out``, or find how far an earlier run with these settings got.

    Raises:
        FileExistsError: ``out`` holds a complete pack, or files that are not a pack.
        ValueError: ``out`` holds a pack in progress with other settings.
    """
    if (out / manifests.MANIFEST).exists():
        raise FileExistsError(
            f"{str(out)!r} already holds a complete pack ({manifests.MANIFEST}); choose "
            "another folder, or delete it to pack again"
        )
    plan = out / _PLAN
    if plan.exists():
        theirs = json.loads(plan.read_text())
        differ = differences(theirs, settings, there="there")
        if differ:
            raise ValueError(
                f"{str(out)!r} holds an unfinished pack with other settings ("
                + "; ".join(differ)
                + "): run with the same settings to continue it, or delete the folder"
            )
        done = _read_log(out)
    else:
        if out.exists() and any(out.iterdir()):
            raise FileExistsError(
                f"{str(out)!r} is not empty and holds no pack in progress: choose a new or "
                "empty folder"
            )
        out.mkdir(parents=True, exist_ok=True)
        temporary = out / f"{_PLAN}.tmp"
        temporary.write_text(json.dumps(settings))
        os.replace(temporary, plan)
        done = []
    for partial in out.glob(".shard-*.partial"):  # a shard a stopped run was writing
        partial.unlink()
    return done


def _read_log(out: Path) -> list[tuple[manifests.ShardEntry, int]]:
    """The shards an earlier run completed: logged, in order, and present at their size."""
    done: list[tuple[manifests.ShardEntry, int]] = []
    log = out / _LOG
    lines = log.read_text().splitlines() if log.exists() else []
    for line in lines:
        try:
            record = json.loads(line)
            entry, first = manifests.ShardEntry(**record["entry"]), int(record["first"])
        except (ValueError, TypeError, KeyError):
            break  # a line cut short by the stop
        expected = sum(e.samples for e, _ in done)
        shard, index = out / entry.name, out / entry.index
        whole = shard.exists() and shard.stat().st_size == entry.bytes and index.exists()
        if not whole or first != expected or entry.name != f"shard-{len(done):06d}.tar":
            break
        done.append((entry, first))
    log.write_text("".join(json.dumps({"entry": asdict(e), "first": f}) + "\n" for e, f in done))
    return done


def _check(
    shard_size: int,
    max_side: int | None,
    quality: int,
    workers: int | None,
    pixels: str,
    raw_share: float,
) -> None:
    check_choice("pixels", pixels, PIXELS)
    share = raw_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"raw_share={share!r} must be a number in (0, 1]")
    if pixels != "raw" and share != 1:
        raise ValueError(f"raw_share={share!r} applies to pixels='raw' (got pixels={pixels!r})")
    if pixels == "seekable":
        require_built()

    check_int("shard_size", shard_size, minimum=4 * BLOCK)
    check_int("quality", quality, minimum=1)
    if quality > 100:
        raise ValueError(f"quality={quality!r} must be an int from 1 to 100 (JPEG quality)")
    if max_side is not None:
        check_int("max_side", max_side, minimum=1)
    if workers is not None:
        check_int("workers", workers, minimum=1)


def pack(
    source: Any,
    out: str | os.PathLike[str],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    shuffle_seed: int | None = 0,
    max_side: int | None = None,
    quality: int = 90,
    pixels: str = "encoded",
    raw_share: float = 1.0,
    workers: int | None = None,
    metadata: bool = True,
    progress: bool = True,
    storage_options: dict[str, Any] | None = None,
    image_key: str = "filepath",
    caption_key: str = "title",
    separator: str | None = None,
) -> manifests.Manifest:
    """Write a dataset as WebDataset tar shards, with an index per shard and a manifest.

    Read the result with :class:`fastload.ImageShards` (or webdataset, or DALI's
    ``readers.webdataset`` with the ``.idx`` files). See the module's notes for the layout and
    for what happens when a run is stopped and started again.

    Args:
        source: A folder in the ImageFolder layout, a ``fastload.ImageFolder`` /
            ``ImageList``, a torchvision ``ImageFolder``, or an image-text table (a ``.csv``,
            ``.tsv`` or ``.parquet`` file, see :mod:`fastload.shards.format.tables`), whose samples
            are ``KEY.jpg`` + ``KEY.txt`` (the caption) + ``KEY.json`` (the other columns); or a
            COCO dataset (``fastload.detection.CocoDetection``, or torchvision's
            ``CocoDetection``, v2-wrapped or not), whose samples are ``KEY.jpg`` + ``KEY.json``
            (the image's ``image_id`` and its ``annotations`` as the annotation file gives
            them, with the metadata), its categories in the manifest; read it with
            :class:`fastload.detection.CocoShards`.
        out: The folder to write (new, empty, or holding this pack's unfinished run); or the
            URL of a prefix on remote storage (``"s3://bucket/pack"``), where the pack is
            uploaded once written (see :mod:`fastload.shards.storage.upload`).
        shard_size: The most bytes a shard holds (one larger sample makes a shard of its own).
        shuffle_seed: Shuffle the samples across shards with this seed; ``None`` keeps the
            source's order.
        max_side: Re-encode images whose longest side is larger to this side, as JPEGs at
            ``quality`` (stored upright); ``None`` (the default) keeps every file's bytes.
            This changes pixels: see the README for what it costs and buys. Not for a COCO
            dataset (its boxes and masks would not move).
        quality: The JPEG quality of the re-encoding.
        pixels: ``"encoded"`` (the default): each image as its file's bytes, or their
            re-encoding at ``max_side``; ``"raw"``: its decoded RGB pixels (upright, shrunk
            to ``max_side`` when given and larger) as a binary PPM (``KEY.ppm``), which is
            read with no decoding at all, for several times the bytes (see the shards page
            for what it costs and buys). Not for a COCO dataset. ``"seekable"``: as
            ``"encoded"``, each JPEG then rewritten losslessly with restart markers (the same
            pixels, about the same bytes) that the ``region`` backend cuts a crop out at, so
            that it entropy-decodes only the crop's neighbourhood (see the shards page).
            Needs the region decoder's compiled part.
        raw_share: With ``pixels="raw"``, the share of the images stored raw: those whose
            files hold the most bytes per pixel (where raw saves the most decoding per byte
            added, measured: see :mod:`fastload.shards.raw_choice`), chosen from their headers
            before packing; the others are stored as with ``pixels="encoded"``.
        workers: Threads that read (processes that re-encode); default: the usable cores.
        metadata: Write ``KEY.json`` with the original path and size.
        progress: Draw a progress bar (images/s and MB/s) when standard error is a terminal.
        storage_options: For a remote ``out``: passed to ``fsspec.filesystem``.
        image_key: For a table: the column of image paths (OpenCLIP's ``--csv-img-key``).
        caption_key: For a table: the column of captions (OpenCLIP's ``--csv-caption-key``).
        separator: For a CSV table: the field separator (default: tab for ``.tsv``, else
            comma).

    Returns:
        The manifest written.

    Raises:
        FileExistsError: ``out`` holds a complete pack or other files.
        FileNotFoundError: ``source`` is a path that is not a folder.
        ValueError: A bad option, no images in ``source``, or ``out`` holds an unfinished pack
            with other settings.
        MissingDependencyError: ``pixels="seekable"`` without the region decoder.
    """
    from fastload._progress import Progress

    _check(shard_size, max_side, quality, workers, pixels, raw_share)
    found = _source(source, (image_key, caption_key, separator), max_side, pixels)
    destination = os.fspath(out)
    remote = None
    if is_remote(destination):
        remote = upload.check_destination(destination, storage_options)
        out = upload.staging_folder(destination)
    elif storage_options is not None:
        raise ValueError(f"storage_options apply to a remote destination; {destination!r} is local")
    out = Path(out)
    options = _options(shuffle_seed, shard_size, max_side, quality, metadata, pixels, raw_share)
    done = _begin(out, _settings(found, **options))
    order = np.arange(len(found.paths))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(found.paths))
    workers = workers or cpu_cores()
    raw = densest(found.paths, raw_share, workers=workers) if raw_share != 1 else None
    bar = Progress("packing", enabled=None if progress else False)
    entries = [entry for entry, _ in done]
    with open(out / _LOG, "a") as log:

        def finished(entry: manifests.ShardEntry, first: int) -> None:
            log.write(json.dumps({"entry": asdict(entry), "first": first}) + "\n")
            log.flush()
            entries.append(entry)

        writer = _ShardWriter(out, shard_size, len(done), finished)
        try:
            _write_all(
                found,
                order,
                writer,
                sum(entry.samples for entry in entries),
                workers=workers,
                max_side=max_side,
                quality=quality,
                pixels=pixels,
                raw=raw,
                metadata=metadata,
                bar=bar,
            )
        finally:
            writer.abandon()
            bar.close()
    result = manifests.Manifest(
        entries,
        found.classes,
        max_side,
        options["quality"],
        __version__,
        categories=found.categories,
        pixels=pixels,
        raw_share=raw_share if raw_share != 1 else None,
    )
    _publish(result, out, destination, remote, progress=progress)
    return result


def _publish(
    result: manifests.Manifest, out: Path, destination: str, remote: Any, *, progress: bool
) -> None:
    """Write the manifest, last: into ``out``, or with the upload of ``out`` to a remote
    ``destination``."""
    from fastload._progress import Progress

    if remote is not None:
        bar = Progress("uploading", enabled=None if progress else False)
        try:
            upload.upload(out, destination, remote, result, bar)
        finally:
            bar.close()
        return
    manifests.write(out / manifests.MANIFEST, result)
    for name in (_PLAN, _LOG):
        (out / name).unlink()


def _write_all(
    found: _Source,
    order: np.ndarray,
    writer: _ShardWriter,
    start: int,
    *,
    workers: int,
    max_side: int | None,
    quality: int,
    pixels: str,
    raw: np.ndarray | None,
    metadata: bool,
    bar: Callable[..., None],
) -> None:
    pool: Executor
    if max_side is None and pixels == "encoded":
        pool = ThreadPoolExecutor(workers, thread_name_prefix="fastload-pack")
        prepare = functools.partial(_copy, root=found.root, metadata=metadata)
    else:
        pool = ProcessPoolExecutor(workers)
        prepare = functools.partial(
            _reencode,
            root=found.root,
            metadata=metadata,
            max_side=max_side,
            quality=quality,
            pixels=pixels,
        )
    began, written = time.monotonic(), 0
    try:
        items = _items(found, order, start, prepare, pool, 2 * workers, raw)
        for position, item in enumerate(items, start=start):
            writer.add(item, position)
            written += len(item.data)
            rate = written / 2**20 / max(time.monotonic() - began, 1e-9)
            bar(position + 1, len(order), f"{rate:,.0f} MB/s")
        writer.close()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
