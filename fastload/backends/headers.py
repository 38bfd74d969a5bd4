"""The checks made on every file before any decoder sees it, whatever the backend
(:func:`check_header`: the format from the content, ``max_pixels``, a JPEG's end-of-image
marker), and every format but a plain JPEG decoded to 8-bit RGB by Pillow
(:func:`decode_with_pillow`)."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import numpy as np

from fastload.pixels.image import ImageInfo, is_truncated_jpeg, probe

__all__ = ["DEFAULT_MAX_PIXELS", "check_header", "decode_with_pillow", "read_header"]

# Pillow's own decompression-bomb threshold (about 89.5 megapixels, 0.25 GiB of RGB).
DEFAULT_MAX_PIXELS = 89_478_485


def read_header(data: bytes, *, max_pixels: int, exif_orientation: bool) -> tuple[ImageInfo, bool]:
    """The header :meth:`~fastload.backends.base.Backend.decode` goes by: :func:`check_header`'s,
    its orientation dropped without ``exif_orientation``, and whether the JPEG path decodes the
    file (a grey or colour JPEG whose size the header gives:
    :func:`~fastload.backends.plans.plan_jpeg` can plan it).

    Raises:
        ValueError: As :func:`check_header`.
    """
    info = check_header(data, max_pixels=max_pixels)
    if not exif_orientation:
        info = replace(info, orientation=1)
    return info, info.format == "jpeg" and info.components in (1, 3) and bool(info.pixels)


def check_header(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageInfo:
    """The checks made on every file before any decoder sees it, whatever the backend.

    Args:
        data: The file's bytes.
        max_pixels: Refuse images whose header claims more pixels than this.

    Returns:
        What the header says.

    Raises:
        ValueError: The file is empty, not in a format fastload reads, too large, or a JPEG
            without its end-of-image marker (truncated); the message says which.
    """
    if not data:
        raise ValueError("empty file")
    info = probe(data)
    if info.pixels is not None and info.pixels > max_pixels:
        raise ValueError(_too_large(info.width, info.height, max_pixels))
    if info.format == "unknown":
        head = data[:8].hex(" ")
        raise ValueError(f"not an image format fastload reads (starts with {head})")
    if info.format == "jpeg" and is_truncated_jpeg(data):
        raise ValueError("truncated JPEG: no end-of-image marker")
    return info


def _too_large(width: int | None, height: int | None, max_pixels: int) -> str:
    return (
        f"image of {width} x {height} = {(width or 0) * (height or 0):,} pixels is over "
        f"max_pixels={max_pixels:,}; raise max_pixels if the file is trusted"
    )


def decode_with_pillow(
    data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, exif_orientation: bool = True
) -> np.ndarray:
    """Decode any format Pillow reads to display-oriented 8-bit RGB (H x W x 3 uint8).

    Grey, palette, alpha (dropped, as ``Image.convert("RGB")`` does), CMYK and YCCK become RGB;
    16-bit images are scaled to 8 bits (65535 -> 255), not saturated. With
    ``exif_orientation=False`` the stored pixels are kept, unrotated.
    """
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as image:
        if image.width * image.height > max_pixels:
            raise ValueError(_too_large(image.width, image.height, max_pixels))
        image.load()  # raises on truncated data
        if exif_orientation:
            image = ImageOps.exif_transpose(image)
        return _to_rgb(image)


def _to_rgb(image: Any) -> np.ndarray:
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        wide = np.asarray(image).astype(np.uint32).clip(0, 65535)
        grey = ((wide * 255 + 32767) // 65535).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode == "F":
        grey = np.asarray(image).clip(0, 255).round().astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image)
