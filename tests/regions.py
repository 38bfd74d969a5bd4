"""Regions of JPEGs for the region decoder's tests: windows to decode, and the check that a
decoded region is the whole decode's crop."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

LIMIT = 10**9  # max_pixels, out of the way


def cv_jpeg(rgb: np.ndarray, *params: int) -> bytes:
    """``rgb`` encoded by OpenCV (its encoder options: sampling factors, restart intervals)."""
    ok, out = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [*params])
    assert ok
    return out.tobytes()


Window = tuple[int, int, int, int]


def windows(
    width: int, height: int, count: int, seed: int, first: Sequence[Window]
) -> list[Window]:
    """``first``, then seeded random windows (x0, y0, x1, y1) of the image, ``count`` in all."""
    rng = np.random.default_rng(seed)
    found = list(first)
    while len(found) < count:
        x0, x1 = sorted(rng.integers(0, width + 1, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height + 1, 2).tolist())
        if x1 > x0 and y1 > y0:
            found.append((x0, y0, x1, y1))
    return found


def assert_crops_match(decoder, whole, data: bytes, reduce: int, chosen: Sequence[Window]) -> None:
    """Each window decoded as a region holds the whole decode's pixels there, and the region
    reports the whole image's size and where it lies in it."""
    reference = whole.decode_jpeg(data, reduce)
    height, width = reference.shape[:2]
    for x0, y0, x1, y1 in chosen:
        got = decoder.decode_jpeg_region(data, reduce, (x0, y0, x1, y1), max_pixels=LIMIT)
        assert got.size == (width, height) and got.origin is not None
        left, top = got.origin
        rows, cols = got.pixels.shape[:2]
        assert left <= x0 and top <= y0 and left + cols >= x1 and top + rows >= y1
        inside = got.pixels[y0 - top : y1 - top, x0 - left : x1 - left]
        np.testing.assert_array_equal(inside, reference[y0:y1, x0:x1])
