"""Which images a pack stores as raw pixels when only a share of them is (``raw_share``).

Storing an image raw saves its decoding and costs about three bytes a pixel less its encoded
size. The time saved per byte added grows with the bytes per pixel of the encoded file:
entropy decoding costs by the compressed byte, and a file that compresses poorly adds fewer
bytes when stored raw. Measured with ``benchmarks/decoding/raw_choice.py`` on 49 real photos at
``max_side=320`` (RandomResizedCrop 224 fused with decoding, one core): decoding took about
141 us + 4.5 ns a pixel + 6.3 ns a compressed byte, reading raw pixels 120 us + 4.0 ns a
pixel; the quarter of the images whose source files hold the most bytes per pixel saved 1.26 us
of decoding per KiB added, a random quarter 0.99 (0.76-1.25 over 200 draws), the quarter
ranked by each image's measured saving 1.44 (a half: 1.13, 1.00 and 1.26). So the share stored
raw is the images whose files hold the most bytes per pixel.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["bytes_per_pixel", "densest"]


def bytes_per_pixel(path: str) -> float:
    """The file's size over its pixel count, from its header; ``-inf`` for a file whose
    header cannot be read (it is never chosen: the readers report it)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            width, height = image.size
        return os.path.getsize(path) / max(width * height, 1)
    except (OSError, ValueError, SyntaxError):  # what Pillow raises for what it cannot open
        return float("-inf")


def densest(paths: Sequence[str], share: float, *, workers: int) -> np.ndarray:
    """Which of ``paths`` are the ``round(share * len(paths))`` files with the most bytes
    per pixel (ties go to the earlier path).

    Args:
        paths: The image files.
        share: The share to choose, in [0, 1].
        workers: Threads that read the headers.

    Returns:
        A bool array, one per path.
    """
    with ThreadPoolExecutor(workers, thread_name_prefix="fastload-pack-probe") as pool:
        density = np.fromiter(pool.map(bytes_per_pixel, paths), float, len(paths))
    chosen = np.zeros(len(paths), dtype=bool)
    count = round(share * len(paths))
    if count:
        order = np.lexsort((np.arange(len(paths)), -density))  # densest first, then by place
        chosen[order[:count]] = True
    return chosen
