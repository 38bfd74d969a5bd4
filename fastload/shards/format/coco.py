"""A COCO annotation file read as its images: each image's id, file and annotations, in order,
and the categories (:func:`read_coco`). ``fastload.pack`` writes them as shards, and
``fastload.detection.CocoDetection`` reads its samples from them; torchvision's
``CocoDetection`` is read as the same three things (:func:`torchvision_coco`)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["CocoImages", "read_coco", "torchvision_coco"]


@dataclass(frozen=True)
class CocoImages:
    """The images of a COCO dataset, in its order.

    Attributes:
        root: The folder the files are relative to.
        ids: Each image's id.
        files: Each image's ``file_name``.
        annotations: Each image's annotations, as the annotation file gives them.
        categories: The file's categories.
    """

    root: str
    ids: list[int]
    files: list[str]
    annotations: list[list[dict[str, Any]]]
    categories: list[dict[str, Any]]

    def path(self, index: int) -> str:
        """The file of image ``index``."""
        return os.path.join(self.root, self.files[index])


def read_coco(
    root: str | os.PathLike[str],
    annotations: str | os.PathLike[str] | dict[str, Any],
    ids: Collection[int] | None = None,
) -> CocoImages:
    """The images of a COCO annotation file (a path, or its content already parsed, as
    pycocotools' ``COCO.dataset`` holds it), those of ``ids`` in that order, or every image
    sorted by id (torchvision's order: pycocotools' image ids, sorted).

    Raises:
        ValueError: An annotation names an image the file does not list, or an id is not an
            image's.
        FileNotFoundError: ``annotations`` is a path that does not exist.
    """
    if isinstance(annotations, dict):
        coco, source = annotations, "the annotations"
    else:
        source = os.fspath(annotations)
        with open(source, encoding="utf-8") as file:
            coco = json.load(file)
    images = {int(image["id"]): image for image in coco.get("images", [])}
    by_image: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for annotation in coco.get("annotations", []):
        image_id = int(annotation["image_id"])
        if image_id not in images:
            raise ValueError(
                f"{source}: annotation {annotation.get('id')!r} names image {image_id}, "
                "which its 'images' do not list"
            )
        by_image[image_id].append(annotation)
    order = sorted(images) if ids is None else [int(i) for i in ids]
    missing = [i for i in order if i not in images]
    if missing:
        raise ValueError(f"ids={missing[:5]!r}...: not images of {source}")
    return CocoImages(
        os.fspath(root),
        order,
        [str(images[i]["file_name"]) for i in order],
        [by_image.get(i, []) for i in order],
        list(coco.get("categories", [])),
    )


def torchvision_coco(dataset: Any) -> tuple[str, dict[str, Any], list[int]] | None:
    """``(root, annotations, ids)`` of torchvision's ``CocoDetection`` (v2-wrapped or not), what
    :func:`read_coco` takes; ``None`` for any other dataset."""
    from torchvision.datasets import CocoDetection

    from fastload.compat import tv_tensor_wrapped

    wrapped = tv_tensor_wrapped(dataset)
    inner = wrapped[0] if wrapped is not None else dataset
    if type(inner) is not CocoDetection:
        return None
    return inner.root, inner.coco.dataset, list(inner.ids)
