"""Detection targets: made from COCO annotations as torchvision makes them, and moved with the
image by the same planned ops.

:func:`coco_target` gives what ``wrap_dataset_for_transforms_v2(CocoDetection(...))`` gives
for an image's annotations: ``image_id``, ``boxes`` (``BoundingBoxes`` in XYXY on the image's
canvas), ``masks`` (one ``Mask`` per object, rasterized by pycocotools), ``labels`` and any
native key asked for; an image with no annotation has ``image_id`` alone.

:func:`move_target` moves a target through the views the fused ops planned, op by op and in
their order, with torchvision's arithmetic for each: a resize multiplies the boxes by the
float32 ratios, a flip mirrors them on the canvas of the moment, and the masks take the rows
and columns torch's nearest resize picks, composed once and gathered once (no mask is resized
at full size and then flipped). A crop (a view whose region changes) is not among the ops
translated for detection yet, and is refused here.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import torch

from fastload._optional import MissingDependencyError
from fastload.resampling import View

__all__ = [
    "DEFAULT_KEYS",
    "TARGET_KEYS",
    "coco_target",
    "move_target",
    "pycocotools_mask",
    "rasterize",
]

# what torchvision's wrapper offers for CocoDetection, and what it gives when not told
TARGET_KEYS = frozenset(
    {
        "segmentation",
        "area",
        "iscrowd",
        "image_id",
        "bbox",
        "category_id",
        "boxes",
        "masks",
        "labels",
    }
)
DEFAULT_KEYS = frozenset({"image_id", "boxes", "labels"})


def coco_target(
    annotations: Sequence[dict[str, Any]],
    image_id: int,
    canvas: tuple[int, int],
    keys: Collection[str],
) -> dict[str, Any]:
    """An image's target as torchvision's v2 wrapper of ``CocoDetection`` makes it.

    Args:
        annotations: The image's COCO annotations (``loadAnns`` order).
        image_id: The image's id.
        canvas: The image's (height, width), as stored (no EXIF rotation, as torchvision).
        keys: The target keys asked for (see :data:`TARGET_KEYS`).

    Returns:
        The target dict.
    """
    from torchvision import tv_tensors

    if not annotations:
        return {"image_id": image_id}
    target: dict[str, Any] = {}
    if "image_id" in keys:
        target["image_id"] = image_id
    if "boxes" in keys:
        xywh = torch.tensor([a["bbox"] for a in annotations], dtype=torch.float32).reshape(-1, 4)
        xyxy = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], dim=1)
        target["boxes"] = tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=canvas)
    if "masks" in keys:
        masks = [rasterize(a["segmentation"], canvas) for a in annotations]
        target["masks"] = tv_tensors.Mask(torch.from_numpy(np.stack(masks)))
    if "labels" in keys:
        target["labels"] = torch.tensor([a["category_id"] for a in annotations])
    for key in sorted(set(keys) - {"image_id", "boxes", "masks", "labels"}):
        target[key] = [a[key] for a in annotations]
    return target


def rasterize(segmentation: Any, canvas: tuple[int, int]) -> np.ndarray:
    """One object's mask (H x W uint8) from its COCO segmentation: polygons, or an RLE
    (crowd annotations), as pycocotools draws them.

    Raises:
        ValueError: The segmentation is neither.
    """
    mask = pycocotools_mask()
    height, width = canvas
    if isinstance(segmentation, dict):
        rle = segmentation
        if not isinstance(segmentation["counts"], str):  # uncompressed counts
            rle = mask.frPyObjects(segmentation, height, width)
    elif isinstance(segmentation, list):
        rle = mask.merge(mask.frPyObjects(segmentation, height, width))
    else:
        raise ValueError(
            f"a COCO segmentation is polygons (a list) or an RLE (a dict), got "
            f"{type(segmentation).__name__}"
        )
    return mask.decode(rle)


def pycocotools_mask() -> Any:
    """pycocotools' mask module, or how to install it.

    Raises:
        fastload.MissingDependencyError: pycocotools is not installed.
    """
    try:
        from pycocotools import mask
    except ImportError as exc:
        raise MissingDependencyError(
            f"COCO masks are drawn by pycocotools ({exc}). Install it with: "
            "pip install 'fastload[detection]' (or pip install pycocotools)"
        ) from exc
    return mask


def move_target(target: dict[str, Any], views: Sequence[View]) -> dict[str, Any]:
    """The target after the ops that took the image through ``views`` (the canvas first, then
    the view after each op).

    Raises:
        ValueError: An op crops (its region changes): not a move this module makes yet.
    """
    from torchvision import tv_tensors

    moved = dict(target)
    boxes = target.get("boxes")
    masks = target.get("masks")
    rows = cols = None
    if masks is not None:
        rows, cols = torch.arange(masks.shape[-2]), torch.arange(masks.shape[-1])
    for before, after in itertools.pairwise(views):
        if after.box != before.box:
            raise ValueError(f"a crop ({before} -> {after}) does not move detection targets yet")
        if (after.width, after.height) != (before.width, before.height):
            if boxes is not None:
                boxes = _resized_boxes(boxes, (after.height, after.width))
            if rows is not None and cols is not None:
                rows, cols = (
                    rows[_nearest(len(rows), after.height)],
                    cols[_nearest(len(cols), after.width)],
                )
        if after.mirror != before.mirror:
            if boxes is not None:
                boxes = _flipped_boxes(boxes)
            if cols is not None:
                cols = cols.flip(0)
    if boxes is not None:
        moved["boxes"] = boxes
    if masks is not None and rows is not None and cols is not None:
        plain = masks.as_subclass(torch.Tensor)
        moved["masks"] = tv_tensors.Mask(plain.index_select(-2, rows).index_select(-1, cols))
    return moved


def _nearest(size: int, out: int) -> torch.Tensor:
    """The source index torch's nearest resize (torchvision's for masks) reads for each of
    ``out`` outputs from ``size`` inputs: torch computes it, so it is torch's, bit for bit."""
    if size == out:
        return torch.arange(size)
    source = torch.arange(size, dtype=torch.float32).view(1, 1, size)
    picked = torch.nn.functional.interpolate(source, size=out, mode="nearest")
    return picked.view(out).long()


def _resized_boxes(boxes: Any, size: tuple[int, int]) -> Any:
    """torchvision's resize of boxes to a canvas of ``size`` (height, width)."""
    import torchvision.transforms.v2.functional as F

    return F.resize(boxes, list(size))


def _flipped_boxes(boxes: Any) -> Any:
    """torchvision's horizontal flip of boxes, on their canvas."""
    import torchvision.transforms.v2.functional as F

    return F.horizontal_flip(boxes)
