"""Detection targets: made from COCO annotations as torchvision makes them, and moved with the
image by the same planned ops.

:func:`coco_target` gives what ``wrap_dataset_for_transforms_v2(CocoDetection(...))`` gives
for an image's annotations: ``image_id``, ``boxes`` (``BoundingBoxes`` in XYXY on the image's
canvas), ``masks`` (one ``Mask`` per object, rasterized by pycocotools), ``labels`` and any
native key asked for; an image with no annotation has ``image_id`` alone.

:func:`move_target` moves a target through the views the fused ops planned, op by op and in
their order (:func:`steps`: a resize, a flip, a crop that may reach past the image): the boxes
by torchvision's own functions for each step (its arithmetic and its clamping), the masks by
the rows and columns each output pixel reads, composed through the steps (torch's own nearest
pick for a resize) and gathered once, so that no mask is resized at full size, then flipped,
then cropped. An op that crops and resizes in one view is not among those translated for
detection yet, and is refused here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import torch

from fastload._optional import MissingDependencyError
from fastload.pixels.resampling import View

__all__ = [
    "DEFAULT_KEYS",
    "TARGET_KEYS",
    "Step",
    "coco_target",
    "move_boxes",
    "move_mask",
    "move_target",
    "pycocotools_mask",
    "rasterize",
    "steps",
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
        import torchvision.transforms.v2.functional as F

        # torchvision's own steps: the dtype the JSON's numbers give (int64 when all are ints)
        xywh = tv_tensors.BoundingBoxes(
            [a["bbox"] for a in annotations], format="XYWH", canvas_size=canvas
        )
        target["boxes"] = F.convert_bounding_box_format(xywh, new_format="XYXY")
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


def move_target(target: Any, moving: Sequence[Step], *, mask_fill: int = 0) -> Any:
    """The target after ``moving`` (what the planned ops did: :func:`steps`): its ``boxes``
    and ``masks`` moved, the rest as it was.

    Args:
        target: A detection target (see :func:`coco_target`), or one mask made from it (by
            ``fastload.detection.segmentation.TargetFirst``).
        moving: The steps, in order.
        mask_fill: What the masks show where a crop reaches past the image (padding).
    """
    if not isinstance(target, dict):
        return move_mask(target, moving, fill=mask_fill)
    moved = dict(target)
    if "boxes" in target:
        moved["boxes"] = move_boxes(target["boxes"], moving)
    if "masks" in target:
        moved["masks"] = move_mask(target["masks"], moving, fill=mask_fill)
    return moved


# ("resize", (h, w)), ("flip", ()), ("crop", (top, left, h, w)), and ("zero", (keep,)): the
# boxes outside the bool tensor keep set to 0, as RandomIoUCrop marks them
Step = tuple[str, tuple[Any, ...]]


def steps(views: Sequence[View], extra: Sequence[Sequence[Step]] = ()) -> list[Step]:
    """What each op did, read from the views it planned: a resize, a flip, or a crop (its
    offset in the output pixels of the view before it; negative or past the edge: padding),
    then ``extra[i]``, what op ``i`` does to the target besides (``"zero"``).

    Raises:
        ValueError: A view that crops and resizes in one.
    """
    out: list[Step] = []
    for i, (before, after) in enumerate(itertools.pairwise(views)):
        if after.box != before.box:
            out.append(("crop", _crop_of(before, after)))
        elif (after.width, after.height) != (before.width, before.height):
            out.append(("resize", (after.height, after.width)))
        if after.mirror != before.mirror:
            out.append(("flip", ()))
        if i < len(extra):
            out += extra[i]
    return out


def _crop_of(before: View, after: View) -> tuple[int, int, int, int]:
    (x0, y0, x1, y1), (a0, b0, a1, b1) = before.box, after.box
    sx, sy = (x1 - x0) / before.width, (y1 - y0) / before.height
    if not (
        math.isclose((a1 - a0) / after.width, sx) and math.isclose((b1 - b0) / after.height, sy)
    ):
        raise ValueError(
            f"an op that crops and resizes in one ({before} -> {after}) does not move "
            "detection targets yet"
        )
    left = round((x1 - a1) / sx) if before.mirror else round((a0 - x0) / sx)
    return round((b0 - y0) / sy), left, after.height, after.width


def move_boxes(boxes: Any, moving: Sequence[Step]) -> Any:
    """Boxes moved step by step by torchvision's own functions (its arithmetic, its clamping)."""
    import torchvision.transforms.v2.functional as F

    for kind, args in moving:
        if kind == "resize":
            boxes = F.resize(boxes, list(args))
        elif kind == "flip":
            boxes = F.horizontal_flip(boxes)
        elif kind == "crop":
            boxes = F.crop(boxes, *args)
        else:  # "zero": boxes an op marks degenerate, for SanitizeBoundingBoxes to remove
            boxes = boxes.clone()
            boxes[~args[0]] = 0
    return boxes


def move_mask(mask: Any, moving: Sequence[Step], *, fill: int = 0) -> Any:
    """A mask (``... x H x W``) moved: the rows and columns each output pixel reads composed
    through the steps (torch's nearest pick for a resize), then gathered once; ``fill`` where
    a crop reached past the image."""
    from torchvision import tv_tensors

    rows, cols = torch.arange(mask.shape[-2]), torch.arange(mask.shape[-1])
    for kind, args in moving:
        if kind == "resize":
            rows, cols = rows[_nearest(len(rows), args[0])], cols[_nearest(len(cols), args[1])]
        elif kind == "flip":
            cols = cols.flip(0)
        elif kind == "crop":
            top, left, height, width = args
            rows, cols = _window(rows, top, height), _window(cols, left, width)
    out = torch.from_numpy(_gather(mask.as_subclass(torch.Tensor).numpy(), rows, cols, fill))
    return tv_tensors.Mask(out) if isinstance(mask, tv_tensors.Mask) else out


def _gather(array: np.ndarray, rows: torch.Tensor, cols: torch.Tensor, fill: int) -> np.ndarray:
    """``array[..., rows][..., cols]`` with ``fill`` where an index is -1. Padding lies around
    the picked part (a crop reaching past the image): only that part is copied, into a canvas
    of the fill."""
    r, c = rows.numpy(), cols.numpy()
    r_in, c_in = np.flatnonzero(r >= 0), np.flatnonzero(c >= 0)
    out_shape = (*array.shape[:-2], len(r), len(c))
    if len(r_in) == 0 or len(c_in) == 0:
        return np.full(out_shape, fill, dtype=array.dtype)
    (r0, r1), (c0, c1) = (int(r_in[0]), int(r_in[-1]) + 1), (int(c_in[0]), int(c_in[-1]) + 1)
    if r1 - r0 != len(r_in) or c1 - c0 != len(c_in):  # padding inside the picked part
        out = np.take(np.take(array, np.maximum(r, 0), axis=-2), np.maximum(c, 0), axis=-1)
        out[..., r < 0, :] = fill
        out[..., :, c < 0] = fill
        return out
    picked = _take(_take(array, r[r0:r1], axis=-2), c[c0:c1], axis=-1)
    if (r0, r1, c0, c1) == (0, len(r), 0, len(c)):
        return np.ascontiguousarray(picked)
    out = np.full(out_shape, fill, dtype=array.dtype)
    out[..., r0:r1, c0:c1] = picked
    return out


def _take(array: np.ndarray, index: np.ndarray, *, axis: int) -> np.ndarray:
    """``array`` indexed by ``index`` (no -1) along ``axis``: a view where the index is a run up
    or down (a crop, a flip), else one gather."""
    if len(index) > 1:
        step = int(index[1]) - int(index[0])
        first, last = int(index[0]), int(index[-1])
        run = step in (1, -1) and last - first == step * (len(index) - 1)
        if run and bool((np.diff(index) == step).all()):
            ends = (
                slice(first, last + 1)
                if step == 1
                else slice(first, last - 1 if last else None, -1)
            )
            where = [slice(None)] * array.ndim
            where[axis] = ends
            return array[tuple(where)]
    return np.take(array, index, axis=axis)


def _window(index: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """``index[start : start + length]``, with -1 where that reaches outside ``index``."""
    wanted = torch.arange(start, start + length)
    inside = (wanted >= 0) & (wanted < len(index))
    out = torch.full((length,), -1, dtype=index.dtype)
    out[inside] = index[wanted[inside]]
    return out


def _nearest(size: int, out: int) -> torch.Tensor:
    """The source index torch's nearest resize (torchvision's for masks) reads for each of
    ``out`` outputs from ``size`` inputs: torch computes it, so it is torch's, bit for bit."""
    if size == out:
        return torch.arange(size)
    source = torch.arange(size, dtype=torch.float32).view(1, 1, size)
    picked = torch.nn.functional.interpolate(source, size=out, mode="nearest")
    return picked.view(out).long()
