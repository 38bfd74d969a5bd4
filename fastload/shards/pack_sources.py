"""What ``fastload.pack`` packs: a class folder, an image-text table, a fastload or torchvision
image folder, or a COCO dataset, read as one :class:`PackSource` (paths, labels, classes).

A COCO dataset is whatever hands pack its images: an object with ``coco_images()`` (fastload's
``detection.CocoDetection``), or torchvision's ``CocoDetection`` (v2-wrapped or not), read
here from its annotations (:mod:`fastload.shards.format.coco`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from fastload.shards.format import tables
from fastload.shards.format.coco import CocoImages, read_coco, torchvision_coco

__all__ = ["PackSource", "read_source"]


@dataclass(frozen=True)
class PackSource:
    paths: list[str]
    # an int label each, a tables.Row (a caption and other columns), or a COCO image's
    # {"image_id": ..., "annotations": [...]}
    labels: list[Any]
    classes: list[str]
    root: str
    categories: list[dict[str, Any]] = field(default_factory=list)
    detection: bool = False  # a COCO dataset: its images must keep their bytes


def _coco(source: Any) -> CocoImages | None:
    """The images of ``source`` when it is a COCO dataset (one that hands them over with
    ``coco_images()``, or torchvision's), else ``None``."""
    if isinstance(source, (str, os.PathLike)) or tables.is_table(source):
        return None
    own = getattr(source, "coco_images", None)
    if callable(own):
        images: CocoImages = own()
        return images
    found = torchvision_coco(source)
    return None if found is None else read_coco(*found)


def read_source(
    source: Any, keys: tuple[str, str, str | None], max_side: int | None, pixels: str = "encoded"
) -> PackSource:
    """The samples of ``source`` (see :func:`_found`), checked.

    Raises:
        ValueError: It holds no images, or it is a COCO dataset and ``max_side`` is set.
    """
    found = _found(source, keys)
    if not found.paths:
        raise ValueError(f"no images in {source!r}")
    if found.detection and pixels == "raw":
        raise ValueError(
            "pixels='raw' would store the images of a COCO dataset upright (their EXIF "
            "orientation applied), away from where its boxes and masks are: pack it with "
            "pixels='encoded'"
        )
    if found.detection and max_side is not None:
        raise ValueError(
            f"max_side={max_side!r} would re-encode the images of a COCO dataset and leave its "
            "boxes and masks where they were: pack it with max_side=None"
        )
    return found


def _found(source: Any, keys: tuple[str, str, str | None]) -> PackSource:
    """The samples of a class folder, an image-text table (``keys``: its image and caption
    columns and separator), a fastload ``ImageList`` / ``ImageFolder``, a torchvision
    ``ImageFolder``, or a COCO dataset (fastload's or torchvision's ``CocoDetection``)."""
    coco = _coco(source)
    if coco is not None:
        labels = [
            {"image_id": image_id, "annotations": found}
            for image_id, found in zip(coco.ids, coco.annotations, strict=True)
        ]
        paths = [coco.path(i) for i in range(len(coco.ids))]
        return PackSource(paths, labels, [], coco.root, coco.categories, detection=True)
    if tables.is_table(source):
        image_key, caption_key, separator = keys
        table = tables.read_table(
            source, image_key=image_key, caption_key=caption_key, separator=separator
        )
        root = os.path.dirname(os.path.abspath(os.fspath(source)))
        return PackSource(table.paths, list(table.rows), [], root)
    if isinstance(source, (str, os.PathLike)):
        from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

        root = os.fspath(source)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root!r} is not a folder")
        classes, class_to_idx = find_classes(root)
        found = make_dataset(root, class_to_idx, IMG_EXTENSIONS)
        return PackSource([p for p, _ in found], [c for _, c in found], classes, root)
    if hasattr(source, "read_sample") and hasattr(source, "labels"):  # fastload's own
        paths = [source.path(i) for i in range(len(source))]
        return PackSource(paths, source.labels.tolist(), list(source.classes), source.root)
    samples = getattr(source, "samples", None)
    if samples is not None and hasattr(source, "classes"):  # torchvision's DatasetFolder
        root = getattr(source, "root", "")
        return PackSource([p for p, _ in samples], [c for _, c in samples], source.classes, root)
    raise TypeError(
        "pack takes a class folder's path, an image-text table, a fastload.ImageFolder / "
        "ImageList, a torchvision ImageFolder, or a CocoDetection (fastload's or torchvision's), "
        f"got {type(source).__name__}"
    )
