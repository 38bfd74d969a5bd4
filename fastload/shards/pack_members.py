"""One sample of a pack as the tar members it becomes: the image (its file's bytes, or as the
pack stores it: re-encoded at ``max_side``, raw pixels, or rewritten with restart markers), its
target member and its metadata, made in reading threads or re-encoding processes, a chunk of
samples a task (:func:`items`)."""

from __future__ import annotations

import io
import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import Any

import numpy as np

from fastload.backends.files import read_file
from fastload.backends.headers import DEFAULT_MAX_PIXELS, decode_with_pillow
from fastload.backends.region import add_restarts
from fastload.pixels.image import probe, sniff
from fastload.pixels.raw_pixels import encode_ppm
from fastload.shards.format import tables
from fastload.shards.format.writer import TarSample, tar_sample
from fastload.shards.pack_sources import PackSource

__all__ = ["copy_item", "items", "reencode_item"]

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
) -> TarSample:
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
    return tar_sample(key, members)


def copy_item(key: str, path: str, label: Any, root: str, metadata: bool) -> TarSample:
    data = read_file(path)
    meta = _metadata(path, root, data, None) if metadata else None
    return _members(key, data, None, label, meta)


def reencode_item(
    key: str,
    path: str,
    label: Any,
    root: str,
    metadata: bool,
    max_side: int | None,
    quality: int,
    pixels: str = "encoded",
) -> TarSample:
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
    prepare: Callable[..., TarSample], work: list[tuple[str, str, Any, str | None]]
) -> list[TarSample]:
    return [
        prepare(key, path, label) if pixels is None else prepare(key, path, label, pixels=pixels)
        for key, path, label, pixels in work
    ]


def items(
    source: PackSource,
    order: np.ndarray,
    start: int,
    prepare: Callable[..., TarSample],
    pool: Executor,
    window: int,
    raw: np.ndarray | None = None,
) -> Iterator[TarSample]:
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
