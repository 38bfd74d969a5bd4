"""Make ImageNet-like JPEG folders, for benchmarks and demos that must not download anything.

The images are not photos, but they are shaped like ImageNet's: shorter side 300-500 px, aspect
0.75-1.33, JPEG quality 85-96, about one in ten progressive, smooth shapes with camera-like grain
so that files weigh 60-120 KB and decode at the speed real photos do.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["make_image_folder"]


def _image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    out = np.empty((height, width, 3), np.float32)
    base = rng.uniform(40, 200, 3)
    for c in range(3):
        out[:, :, c] = base[c] + 30 * np.sin(x * rng.uniform(0.005, 0.03) + rng.uniform(0, 6))
    for _ in range(rng.integers(4, 9)):  # a few soft blobs, like objects out of focus
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        radius = rng.uniform(0.1, 0.4) * min(width, height)
        weight = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * radius**2))
        out += weight[:, :, None] * rng.uniform(-90, 90, 3)
    out += rng.normal(0, 8, (height, width, 1))  # grain: the entropy real photos carry
    return np.clip(out, 0, 255).astype(np.uint8)


def make_image_folder(
    root: str | os.PathLike[str],
    *,
    images: int = 1000,
    classes: int = 10,
    seed: int = 0,
    start: int = 0,
) -> Path:
    """Write ``images`` JPEGs into ``root/class_XX/img_NNNNN.jpg``.

    Args:
        root: The folder to fill (created if missing).
        images: How many images.
        classes: How many class folders, filled in turn.
        seed: The same seed makes the same files.
        start: The number of the first image, to add to a folder in several calls.

    Returns:
        ``root`` as a Path.
    """
    from PIL import Image

    if images < 1 or classes < 1 or start < 0:
        raise ValueError(
            f"images={images!r} and classes={classes!r} must be at least 1, start={start!r} >= 0"
        )
    root = Path(root)
    rng = np.random.default_rng(seed)
    for i in range(start, start + images):
        short = int(rng.integers(300, 501))
        aspect = float(rng.uniform(0.75, 1.33))
        width, height = (
            (round(short * aspect), short) if aspect >= 1 else (short, round(short / aspect))
        )
        folder = root / f"class_{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_image(rng, width, height)).save(
            folder / f"img_{i:05d}.jpg",
            quality=int(rng.integers(85, 97)),
            progressive=bool(rng.random() < 0.1),
        )
    return root
