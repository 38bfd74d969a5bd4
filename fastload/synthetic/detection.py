"""Detection and segmentation sets of made-up pictures: a COCO-like one (:func:`make_coco`) and
one in VOC 2012's layout (:func:`make_voc`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from fastload.synthetic.photos import picture

__all__ = ["make_coco", "make_voc"]


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
        Image.fromarray(picture(rng, width, height)).save(folder / name, quality=90)
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
