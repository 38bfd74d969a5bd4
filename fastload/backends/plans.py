"""A JPEG's decode planned apart from the decode: the view the transforms make, where it lies
in the stored pixels (an EXIF orientation undone), the DCT scale, and what the resize does
(:func:`plan_jpeg`); and the reduction by area a decoder without DCT scaling makes instead."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastload.pixels.image import ImageInfo, orientation_ops
from fastload.pixels.resampling import View, kernel_region

__all__ = [
    "Box",
    "JpegPlan",
    "Plan",
    "Stored",
    "Window",
    "plan_jpeg",
    "reduce_by_area",
    "to_stored",
]

Plan = Callable[[View], View]
Window = tuple[int, int, int, int]
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Stored:
    """A planned view in the stored pixels of a file with an EXIF orientation.

    Attributes:
        box: (x0, y0, x1, y1): the region to resample, in stored pixel coordinates.
        width: The resampled width, before orienting.
        height: The resampled height, before orienting.
        transpose: Orient by transposing first (``fastload.pixels.image.orient``'s order) ...
        mirror_lr: ... then mirroring left-right (the view's own mirror folded in) ...
        mirror_tb: ... then top-bottom.
    """

    box: tuple[float, float, float, float]
    width: int
    height: int
    transpose: bool
    mirror_lr: bool
    mirror_tb: bool


def to_stored(view: View, orientation: int, shown_w: int, shown_h: int) -> Stored:
    """Where a view planned in display coordinates lies in the stored pixels.

    The region is found there, decoded and resampled there, and only the small result is
    oriented (``fastload.pixels.image.orient(out, s.transpose, s.mirror_lr, s.mirror_tb)``).

    Args:
        view: The planned view, in display coordinates.
        orientation: The file's EXIF orientation (1-8).
        shown_w: The displayed width.
        shown_h: The displayed height.
    """
    transpose, mirror_lr, mirror_tb = orientation_ops(orientation)
    x0, y0, x1, y1 = view.box
    if mirror_lr:
        x0, x1 = shown_w - x1, shown_w - x0
    if mirror_tb:
        y0, y1 = shown_h - y1, shown_h - y0
    if transpose:
        return Stored(
            (y0, x0, y1, x1), view.height, view.width, True, mirror_lr != view.mirror, mirror_tb
        )
    return Stored(
        (x0, y0, x1, y1), view.width, view.height, False, mirror_lr != view.mirror, mirror_tb
    )


@dataclass(frozen=True)
class JpegPlan:
    """How a planned view of a JPEG is decoded: at which DCT scale, and what is resized.

    Attributes:
        stored: The view in the stored pixels (:func:`to_stored`).
        reduce: The DCT scale, 1/``reduce`` (1, 2, 4 or 8).
        scaled: The whole image's (width, height) at that scale.
        scale: ``scaled`` over the full size, per axis.
        interpolation: The resize's interpolation.
        mirror: Whether the resize writes the view's left-right mirror (none is left for
            after, where no transpose comes first).
        region: The box of the scaled image that only needs resizing with the antialiased
            kernel (``fastload.pixels.resampling.kernel_region``): on whole pixels, or, at a reduced
            DCT scale, between them (a backend that decodes such a span itself filters it, the
            shared path warps it); ``None`` when the resize is more than that.
    """

    stored: Stored
    reduce: int
    scaled: tuple[int, int]
    scale: tuple[float, float]
    interpolation: str
    mirror: bool
    region: Box | None

    @property
    def oriented_after(self) -> bool:
        """Whether the resized pixels still need orienting (an EXIF orientation)."""
        stored = self.stored
        return stored.transpose or stored.mirror_tb or (stored.mirror_lr and not self.mirror)


def plan_jpeg(info: ImageInfo, plan: Plan | None, render: dict[str, Any]) -> JpegPlan:
    """Plan the decode of a JPEG whose header says ``info``: the view ``plan`` makes of the
    whole (displayed) image, where it lies in the stored pixels, the DCT scale (the largest
    of 1/8, 1/4, 1/2 the view still shrinks from) and what the resize does.

    Args:
        info: The header (with a width and a height).
        plan: Turns the whole image's view into the wanted one; ``None`` keeps the whole.
        render: Resampling options (``interpolation``, ``antialias``).
    """
    width, height = info.width, info.height
    assert width is not None and height is not None  # the caller checked the header
    shown_w, shown_h = info.shown_size or (width, height)
    view = View.full(shown_w, shown_h)
    if plan is not None:
        view = plan(view)
    stored = to_stored(view, info.orientation, shown_w, shown_h)
    box, out_w, out_h = stored.box, stored.width, stored.height
    shrink = min((box[2] - box[0]) / out_w, (box[3] - box[1]) / out_h)
    reduce = next(r for r in (8, 4, 2, 1) if shrink >= r or r == 1)
    scaled = (-(-width // reduce), -(-height // reduce))  # libjpeg rounds each side up
    interpolation = view.options(render).get("interpolation", "bilinear")
    scale = (scaled[0] / width, scaled[1] / height)
    region = kernel_region(
        box,
        scaled,
        out_w,
        out_h,
        interpolation=interpolation,
        antialias=render.get("antialias", True),
        scale=scale,
    )
    # a mirror before any transpose is the resize's to write
    mirror = stored.mirror_lr and not stored.transpose
    return JpegPlan(stored, reduce, scaled, scale, interpolation, mirror, region)


def reduce_by_area(array: np.ndarray, reduce: int) -> np.ndarray:
    """A whole decoded image brought to libjpeg's 1/``reduce`` size by averaging areas: what a
    decoder without DCT-domain scaling (DALI's, nvImageCodec's) gives in place of it."""
    if reduce <= 1:
        return array
    import cv2

    rows, cols = array.shape[:2]
    size = (math.ceil(cols / reduce), math.ceil(rows / reduce))
    return cv2.resize(array, size, interpolation=cv2.INTER_AREA)
