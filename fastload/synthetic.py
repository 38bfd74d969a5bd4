"""Stand-ins for real data, for benchmarks and demos that must not download anything.

:func:`make_image_folder` makes ImageNet-like JPEG folders; :func:`make_coco` a COCO-like
detection set of such pictures with boxes and polygons; :func:`make_voc` a segmentation set in
VOC's layout of the same pictures and polygons. The images are not photos, but they
are shaped like ImageNet's: shorter side 300-500 px, aspect 0.75-1.33, JPEG quality 85-96, about
one in ten progressive, smooth shapes with camera-like grain so that files weigh 60-120 KB and
decode at the speed real photos do.

:func:`default_data` is the set every command and benchmark uses when given no folder: made
once with :func:`make_image_folder` and kept in fastload's cache folder.

:class:`SlowStorage` makes any dataset wait like network storage before each sample.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fastload.system import cache_dir

__all__ = [
    "DEFAULT_IMAGES",
    "SlowStorage",
    "default_data",
    "default_root",
    "make_coco",
    "make_image_folder",
    "make_voc",
]


class SlowStorage:
    """A dataset whose every sample first waits, as on network storage: a log-normal latency
    of mean ``ms`` and shape ``sigma``, seeded by the sample's index, so every run and every
    loader waits the same for the same sample.

    Args:
        dataset: What to read after the wait (any map-style dataset).
        ms: The mean wait, in milliseconds.
        sigma: How uneven the waits are (the log-normal's sigma; 1 gives a long tail: about one
            sample in twenty waits three times the mean).
    """

    def __init__(self, dataset: Any, *, ms: float, sigma: float = 0.5) -> None:
        if not ms > 0:
            raise ValueError(f"ms={ms!r} must be a positive number of milliseconds")
        if not sigma >= 0:
            raise ValueError(f"sigma={sigma!r} must be >= 0 (0: every sample waits ms)")
        self.dataset, self.ms, self.sigma = dataset, ms, sigma
        self.mu = math.log(ms / 1000.0) - sigma**2 / 2  # the mean of exp(N(mu, sigma)) is ms

    def __len__(self) -> int:
        return len(self.dataset)

    def wait(self, index: int) -> float:
        """The seconds sample ``index`` waits."""
        return random.Random(int(index)).lognormvariate(self.mu, self.sigma)

    def __getitem__(self, index: int) -> Any:
        time.sleep(self.wait(index))
        return self.dataset[index]

    def __repr__(self) -> str:  # what autotune's cache key sees
        return f"SlowStorage({self.dataset!r}, ms={self.ms}, sigma={self.sigma})"


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


def make_coco(
    root: str | os.PathLike[str], *, images: int = 200, seed: int = 0
) -> tuple[Path, Path]:
    """Write a COCO-like detection set: JPEGs shaped like COCO's (the longer side 640 px, the
    shorter 360-640) in ``root/images``, and ``root/annotations.json`` giving each 1-8 objects
    (a box, a category of 1-80 and a polygon inside the box). The pictures are
    :func:`make_image_folder`'s; the objects are drawn at random, not seen in them.

    Args:
        root: The folder to fill (created if missing).
        images: How many images.
        seed: The same seed makes the same files.

    Returns:
        The image folder and the annotation file.
    """
    import json

    from PIL import Image

    if images < 1:
        raise ValueError(f"images={images!r} must be at least 1")
    folder = Path(root) / "images"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for i in range(images):
        short = int(rng.integers(360, 641))
        width, height = (640, short) if rng.random() < 0.7 else (short, 640)
        name = f"{i:012d}.jpg"
        Image.fromarray(_image(rng, width, height)).save(folder / name, quality=90)
        entries.append({"id": i + 1, "file_name": name, "width": width, "height": height})
        for _ in range(int(rng.integers(1, 9))):
            w, h = rng.uniform(16, width / 2), rng.uniform(16, height / 2)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            polygon = [x, y, x + w, y + h * 0.2, x + w * 0.8, y + h, x + w * 0.1, y + h * 0.7]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": int(rng.integers(1, 81)),
                    "bbox": [round(float(v), 2) for v in (x, y, w, h)],
                    "area": round(float(w * h), 2),
                    "iscrowd": 0,
                    "segmentation": [[round(float(v), 2) for v in polygon]],
                }
            )
    categories = [{"id": c, "name": f"category_{c}"} for c in range(1, 81)]
    path = Path(root) / "annotations.json"
    coco = {"images": entries, "annotations": annotations, "categories": categories}
    path.write_text(json.dumps(coco))
    return folder, path


def make_voc(root: str | os.PathLike[str], *, images: int = 200, seed: int = 0) -> Path:
    """Write a segmentation set in VOC 2012's layout (what torchvision's ``VOCSegmentation``
    reads): :func:`make_coco`'s pictures as ``JPEGImages``, and a palette PNG each in
    ``SegmentationClass`` with every object's polygon filled with a class of 1-20 and outlined
    with 255 (VOC's "void"); all of them listed in ``ImageSets/Segmentation/train.txt``.

    Args:
        root: The folder to fill (created if missing); ``VOCdevkit/VOC2012`` is made in it.
        images: How many images.
        seed: The same seed makes the same files.

    Returns:
        ``root`` (what ``VOCSegmentation(root, year="2012")`` takes).
    """
    import json

    from PIL import Image, ImageDraw

    folder, annotations = make_coco(Path(root) / "coco", images=images, seed=seed)
    coco = json.loads(annotations.read_text())
    base = Path(root) / "VOCdevkit" / "VOC2012"
    for name in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (base / name).mkdir(parents=True, exist_ok=True)
    objects: dict[int, list[Any]] = {}
    for annotation in coco["annotations"]:
        objects.setdefault(annotation["image_id"], []).append(annotation)
    names = []
    for image in coco["images"]:
        name = Path(image["file_name"]).stem
        (folder / image["file_name"]).replace(base / "JPEGImages" / f"{name}.jpg")
        mask = Image.new("P", (image["width"], image["height"]), 0)
        # a palette of distinct colours: Pillow merges equal ones on saving, and so indices
        mask.putpalette([v for c in range(256) for v in (c, 255 - c, (7 * c) % 256)])
        draw = ImageDraw.Draw(mask)
        for annotation in objects.get(image["id"], []):
            polygon = annotation["segmentation"][0]
            corners = list(zip(polygon[::2], polygon[1::2], strict=True))
            draw.polygon(corners, fill=1 + annotation["category_id"] % 20, outline=255)
        mask.save(base / "SegmentationClass" / f"{name}.png")
        names.append(name)
    (base / "ImageSets" / "Segmentation" / "train.txt").write_text("\n".join(names) + "\n")
    shutil.rmtree(Path(root) / "coco")
    return Path(root)


DEFAULT_IMAGES = 600  # in the default set


def default_root() -> Path:
    """Where the default set is made (in the cache folder)."""
    return cache_dir() / "imagenet-like-v1"


def default_data(progress: Callable[[int, int], None] | None = None) -> Path:
    """The embedded default set: ImageNet-like JPEGs made once and kept in the cache folder."""
    root = default_root()
    done = root / ".complete"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        for i in range(0, DEFAULT_IMAGES, 50):  # in steps, so the progress bar moves
            make_image_folder(root, images=50, classes=10, seed=i, start=i)
            if progress is not None:
                progress(min(i + 50, DEFAULT_IMAGES), DEFAULT_IMAGES)
        done.write_text(f"{DEFAULT_IMAGES} images\n")
    return root
