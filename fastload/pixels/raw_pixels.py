"""Raw pixels as an image member: a binary PPM (``P6``), the format ``fastload.pack`` writes
with ``pixels="raw"``.

A PPM is a short text header (``P6``, the width, the height, the largest value) and then the
pixels, row by row, three bytes each. Every image reader reads it (Pillow, OpenCV,
webdataset's decoders), and fastload reads it with no decoding at all: the pixels are a view
of the member's bytes, and a planned crop resamples only the rows it keeps.
"""

from __future__ import annotations

import numpy as np

from fastload.pixels.image import ppm_header

__all__ = ["encode_ppm", "ppm_pixels"]


def encode_ppm(pixels: np.ndarray) -> bytes:
    """An H x W x 3 uint8 RGB array as a binary PPM.

    Raises:
        ValueError: Not an H x W x 3 uint8 array.
    """
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"raw pixels are H x W x 3 uint8, got {pixels.shape} {pixels.dtype}")
    height, width = pixels.shape[:2]
    return b"P6\n%d %d\n255\n" % (width, height) + np.ascontiguousarray(pixels).tobytes()


def ppm_pixels(data: bytes) -> np.ndarray | None:
    """The pixels of an 8-bit binary PPM, as a read-only H x W x 3 view of ``data``; ``None``
    for anything else (another format, a 16-bit PPM: decoders read those).

    Raises:
        ValueError: A PPM shorter than its header says (the bytes it lacks named).
    """
    header = ppm_header(data)
    if header is None or header[2] != 255:
        return None
    width, height, _, offset = header
    size = width * height * 3
    if len(data) - offset < size:
        raise ValueError(
            f"truncated PPM: its header says {width} x {height} RGB ({size:,} bytes of "
            f"pixels), {len(data) - offset:,} follow"
        )
    return np.frombuffer(data, np.uint8, count=size, offset=offset).reshape(height, width, 3)
