"""ImageNet-like JPEG folders (:func:`make_image_folder`), the pictures they hold
(:func:`picture`), and the default set every command and benchmark uses when given no folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastload.system import cache_dir

__all__ = ["DEFAULT_IMAGES", "default_data", "default_root", "make_image_folder", "picture"]


def picture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A made-up picture, height x width x 3 uint8: smooth shapes with camera-like grain, so
    that its JPEG weighs and decodes as a photo of that size does."""
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
        Image.fromarray(picture(rng, width, height)).save(
            folder / f"img_{i:05d}.jpg",
            quality=int(rng.integers(85, 97)),
            progressive=bool(rng.random() < 0.1),
        )
    return root


DEFAULT_IMAGES = 600  # in the default set


def default_root() -> Path:
    """Where the default set is made (in the cache folder)."""
    return cache_dir() / "imagenet-like-v1"


def default_data(progress: Callable[[int, int], None] | None = None) -> Path:
    """The embedded default set: ImageNet-like JPEGs made once and kept in the cache folder.

    The set is made whole in a folder of its own and then renamed into place, so that processes
    asking for it at the same time (two commands, tests in parallel) never read a half-made
    set: each makes one, the first rename wins and the others' copies are dropped.
    """
    root = default_root()
    if (root / ".complete").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    making = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        for i in range(0, DEFAULT_IMAGES, 50):  # in steps, so the progress bar moves
            make_image_folder(making, images=50, classes=10, seed=i, start=i)
            if progress is not None:
                progress(min(i + 50, DEFAULT_IMAGES), DEFAULT_IMAGES)
        (making / ".complete").write_text(f"{DEFAULT_IMAGES} images\n")
        if root.exists() and not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)  # left half-made by an earlier version
        try:
            os.rename(making, root)
        except OSError:  # made meanwhile by another process: the same set
            if not (root / ".complete").exists():
                raise
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return root
