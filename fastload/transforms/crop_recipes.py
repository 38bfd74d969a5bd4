"""The random crop a decoder may draw and plan itself: :class:`CropRecipe`.

ImageNet's training recipe, ``RandomResizedCrop`` then (or not) ``RandomHorizontalFlip``, is
most of what fastload's datasets plan. Planned in Python, a sample's draws and plan were most
of the time a worker thread held the GIL (27 us an image in all, measured with py-spy on 2
threads; 5-10 since); the region decoder makes the same draws and the same plan in C, in the
call that decodes the batch (``fastload/backends/cropplans.h``), with the GIL let go. This
module says when a dataset's transform is that recipe, in the terms that call takes
(:func:`crop_recipe`); anything else, and any sample the decoder leaves (another format, an
EXIF orientation to apply, a truncated header), is planned in Python as before: the same
pixels and draws either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastload.sampling.torch_draws import fused_uniform
from fastload.transforms import RandomHorizontalFlip, RandomResizedCrop, TransformSplit

__all__ = ["CropRecipe", "crop_recipe"]


@dataclass(frozen=True)
class CropRecipe:
    """``RandomResizedCrop`` (antialiased, bilinear or bicubic), then an optional
    ``RandomHorizontalFlip``, drawn from a sample's seed as torch's CPU generator draws them.

    Attributes:
        width: The crop's output width.
        height: The crop's output height.
        scale: The crop's area range.
        ratio: The crop's aspect range.
        cubic: Bicubic, else bilinear.
        flip: The flip's probability; ``None`` without a flip (nothing drawn for it).
        fused: Whether this torch's float32 ``uniform_`` rounds its multiply-add once.
    """

    width: int
    height: int
    scale: tuple[float, float]
    ratio: tuple[float, float]
    cubic: bool
    flip: float | None
    fused: bool

    def as_tuple(self, *, exif_orientation: bool, max_pixels: int) -> tuple[object, ...]:
        """The recipe as the region decoder's ``decode_drawn_many`` takes it."""
        flip = -1.0 if self.flip is None else self.flip
        return (
            self.width,
            self.height,
            *self.scale,
            *self.ratio,
            self.cubic,
            flip,
            self.fused,
            exif_orientation,
            max_pixels,
        )


def crop_recipe(split: TransformSplit) -> CropRecipe | None:
    """The recipe a dataset's transform is, when all of it is fused with decoding and is
    exactly fastload's ``RandomResizedCrop`` (antialiased, bilinear or bicubic), then
    optionally its ``RandomHorizontalFlip``, and this torch's draws are reproduced
    (:func:`fastload.sampling.torch_draws.fused_uniform`); ``None`` otherwise. Its draws are torch's
    only while torch's default dtype is float32: the caller asks that at each batch."""
    ops = split.fused
    if split.after or split.pil is not None or not 1 <= len(ops) <= 2:
        return None
    crop, flip = ops[0], ops[1] if len(ops) == 2 else None
    if type(crop) is not RandomResizedCrop or (
        flip is not None and type(flip) is not RandomHorizontalFlip
    ):
        return None
    if not crop.antialias or crop.interpolation not in ("bilinear", "bicubic"):
        return None
    ranges = (*crop.scale, *crop.ratio)
    if not all(map(math.isfinite, ranges)) or crop.scale[0] < 0.0 or crop.ratio[0] <= 0.0:
        return None  # Python's sqrt or log refuses them: the sample's error is Python's to raise
    fused = fused_uniform()
    if fused is None:
        return None
    return CropRecipe(
        width=crop.size[1],
        height=crop.size[0],
        scale=crop.scale,
        ratio=crop.ratio,
        cubic=crop.interpolation == "bicubic",
        flip=None if flip is None else float(flip.p),
        fused=fused,
    )
