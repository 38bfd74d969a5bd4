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

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fastload.backends.region import require_built
from fastload.checks import check_choice, check_int, differences
from fastload.shards.format import manifest as manifests
from fastload.shards.format.tar import BLOCK
from fastload.shards.format.writer import ShardWriter
from fastload.shards.pack_members import copy_item, items, reencode_item
from fastload.shards.pack_sources import PackSource, read_source
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


def _settings(source: PackSource, **options: Any) -> dict[str, Any]:
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
    found = read_source(source, (image_key, caption_key, separator), max_side, pixels)
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

        writer = ShardWriter(out, shard_size, len(done), finished)
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
    found: PackSource,
    order: np.ndarray,
    writer: ShardWriter,
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
        prepare = functools.partial(copy_item, root=found.root, metadata=metadata)
    else:
        pool = ProcessPoolExecutor(workers)
        prepare = functools.partial(
            reencode_item,
            root=found.root,
            metadata=metadata,
            max_side=max_side,
            quality=quality,
            pixels=pixels,
        )
    began, written = time.monotonic(), 0
    try:
        made = items(found, order, start, prepare, pool, 2 * workers, raw)
        for position, item in enumerate(made, start=start):
            writer.add(item, position)
            written += len(item.data)
            rate = written / 2**20 / max(time.monotonic() - began, 1e-9)
            bar(position + 1, len(order), f"{rate:,.0f} MB/s")
        writer.close()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
