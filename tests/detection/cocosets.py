"""COCO-format sets made on the spot: real JPEG files with boxes, polygons and crowd RLEs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from images import jpeg_bytes, photo
from PIL import Image


def coco_set(
    root: Path,
    *,
    images: int = 6,
    sizes: tuple[tuple[int, int], ...] = ((320, 240), (200, 300), (410, 290)),
    empty: tuple[int, ...] = (),
    extra_images: list[dict[str, Any]] | None = None,
    extra_annotations: list[dict[str, Any]] | None = None,
) -> tuple[Path, Path]:
    """A folder of JPEGs and its annotation file: each image has 1-4 objects (polygons, and a
    crowd RLE on every third image) but the indices in ``empty``, which have none. Image ids
    are not in file order, to catch an order that is not torchvision's (ids sorted).

    Returns:
        The image folder and the annotation file.
    """
    from pycocotools import mask as coco_mask

    folder = root / "images"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    entries, annotations = [], []
    for i in range(images):
        width, height = sizes[i % len(sizes)]
        name = f"{i:04d}.jpg"
        (folder / name).write_bytes(jpeg_bytes(photo(width, height, seed=i)))
        image_id = 1000 - 7 * i  # descending: sorted ids are not file order
        entries.append({"id": image_id, "file_name": name, "width": width, "height": height})
        if i in empty:
            continue
        for k in range(1 + i % 4):
            x, y = float(rng.uniform(0, width * 0.6)), float(rng.uniform(0, height * 0.6))
            w, h = float(rng.uniform(8, width * 0.4)), float(rng.uniform(8, height * 0.4))
            polygon = [x, y, x + w, y, x + w * 0.7, y + h, x, y + h * 0.8]
            annotation = {
                "id": len(annotations) + 1,
                "image_id": image_id,
                "category_id": int(rng.integers(1, 6)),
                "bbox": [x, y, w, h],
                "area": w * h,
                "iscrowd": 0,
                "segmentation": [polygon],
            }
            if k == 1 and i % 3 == 0:  # a crowd: an uncompressed RLE, as COCO stores crowds
                blob = np.zeros((height, width), dtype=np.uint8, order="F")
                blob[int(y) : int(y + h), int(x) : int(x + w)] = 1
                rle = coco_mask.encode(blob)
                counts = _uncompressed(blob)
                annotation.update(iscrowd=1, segmentation={"size": rle["size"], "counts": counts})
            annotations.append(annotation)
    entries += extra_images or []
    annotations += extra_annotations or []
    categories = [{"id": c, "name": f"class{c}"} for c in range(1, 6)]
    path = root / "annotations.json"
    path.write_text(
        json.dumps({"images": entries, "annotations": annotations, "categories": categories})
    )
    return folder, path


def _uncompressed(mask: np.ndarray) -> list[int]:
    """A mask's run lengths in column-major order, starting with zeros: COCO's uncompressed
    RLE."""
    flat = mask.flatten(order="F")
    counts, current, run = [], 0, 0
    for value in flat:
        if value == current:
            run += 1
        else:
            counts.append(run)
            current, run = value, 1
    counts.append(run)
    return [int(c) for c in counts]


def grey_and_cmyk(folder: Path) -> list[dict[str, Any]]:
    """Two more images: a grayscale JPEG and a CMYK JPEG (their entries for ``images``)."""
    Image.fromarray(photo(180, 140, seed=40)[:, :, 0], "L").save(folder / "grey.jpg", quality=90)
    Image.fromarray(photo(160, 200, seed=41)).convert("CMYK").save(folder / "cmyk.jpg", quality=90)
    return [
        {"id": 5000, "file_name": "grey.jpg", "width": 180, "height": 140},
        {"id": 5001, "file_name": "cmyk.jpg", "width": 160, "height": 200},
    ]
