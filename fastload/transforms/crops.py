"""The crops: torchvision's ``RandomResizedCrop``, ``RandomCrop`` (v1, and v2's with padding),
``CenterCrop``, and the padding of an image smaller than a size, as planned ops."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fastload.pixels.resampling import View, interpolation_name
from fastload.transforms.base import Transform, randint, size_pair, uniform

__all__ = ["CenterCrop", "PadIfSmaller", "RandomCrop", "RandomCropWithPadding", "RandomResizedCrop"]


class RandomResizedCrop(Transform):
    """Crop a random area and aspect ratio, then resize: torchvision's op, same draws.

    Args:
        size: Output size: an int for a square, or (height, width).
        scale: Range of the crop's area, as a fraction of the image's.
        ratio: Range of the crop's aspect ratio (width / height), sampled log-uniformly.
        interpolation: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        antialias: Average areas when shrinking by more than 2x.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Any = "bilinear",
        antialias: bool = True,
    ) -> None:
        self.size = size_pair(size)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"scale={scale!r} and ratio={ratio!r} must each be (min, max)")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.interpolation = interpolation_name(interpolation)
        self.antialias = antialias

    def params(self, height: int, width: int) -> tuple[int, int, int, int]:
        """Draw a crop (top, left, height, width) for an image of this size.

        The draws, their order and the fallback are torchvision's, so the same torch seed gives
        the same crop box.
        """
        area = height * width
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * uniform(self.scale[0], self.scale[1])
            aspect = math.exp(uniform(log_lo, log_hi))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = randint(0, height - h + 1)
                left = randint(0, width - w + 1)
                return top, left, h, w
        # ten misses: the largest centred crop within the ratio range
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def make_params(self, view: View) -> tuple[int, int, int, int]:
        return self.params(view.height, view.width)

    def apply_params(self, view: View, params: tuple[int, int, int, int]) -> View:
        top, left, h, w = params
        return view.crop(top, left, h, w).resize(self.size[1], self.size[0])


class RandomCropWithPadding(Transform):
    """torchvision v2's ``RandomCrop`` with ``padding`` and ``pad_if_needed``: padding first
    (the image with zeros, masks with ``mask_fill``), then a crop drawn as v2 draws it (one
    draw per axis the padded image is longer on).

    Args:
        size: An int for a square, or (height, width).
        padding: (left, right, top, bottom) added before cropping.
        pad_if_needed: Pad each side by what the crop lacks, on an axis shorter than the crop.
        mask_fill: What masks show in the padding.

    Raises:
        ValueError: (when planning) The padded image is smaller than the crop.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        *,
        padding: Sequence[int] = (0, 0, 0, 0),
        pad_if_needed: bool = False,
        mask_fill: int = 0,
    ) -> None:
        self.size = size_pair(size)
        if len(padding) != 4 or any(p < 0 for p in padding):
            raise ValueError(f"padding={padding!r} must be 4 sizes >= 0: left, right, top, bottom")
        self.padding = tuple(padding)
        self.pad_if_needed, self.mask_fill = pad_if_needed, mask_fill

    def make_params(self, view: View) -> tuple[int, int]:
        """The crop's (top, left) in the view's own pixels (negative: in the padding)."""
        left, right, top, bottom = self.padding
        height, width = view.height + top + bottom, view.width + left + right
        ch, cw = self.size
        if self.pad_if_needed and height < ch:
            top, height = top + ch - height, height + 2 * (ch - height)
        if self.pad_if_needed and width < cw:
            left, width = left + cw - width, width + 2 * (cw - width)
        if height < ch or width < cw:
            raise ValueError(
                f"RandomCrop of {ch} x {cw} (height x width) is larger than the padded {height} "
                f"x {width} image"
            )
        y = randint(0, height - ch + 1) if height > ch else 0
        x = randint(0, width - cw + 1) if width > cw else 0
        return y - top, x - left

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        return view.crop(*params, *self.size)


class PadIfSmaller(Transform):
    """Pad on the right and at the bottom up to ``size`` on each side shorter than it (the
    image with zeros, masks with ``mask_fill``): the segmentation references' own
    ``PadIfSmaller``, which goes before a ``RandomCrop`` of that size. Draws nothing.

    Args:
        size: The least height and width.
        mask_fill: What masks show in the padding.

    Raises:
        ValueError: ``size`` is not a positive int.
    """

    def __init__(self, size: int, *, mask_fill: int = 0) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size={size!r} must be a positive int")
        self.size, self.mask_fill = size, mask_fill

    def apply_params(self, view: View, params: None) -> View:
        if view.height >= self.size and view.width >= self.size:
            return view
        return view.crop(0, 0, max(view.height, self.size), max(view.width, self.size))


class CenterCrop(Transform):
    """Crop the centre; a crop larger than the image is padded with zeros, as in torchvision.

    Args:
        size: An int for a square, or (height, width).
    """

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size_pair(size)

    def apply_params(self, view: View, params: None) -> View:
        ch, cw = self.size
        top = -((ch - view.height) // 2) if ch > view.height else round((view.height - ch) / 2)
        left = -((cw - view.width) // 2) if cw > view.width else round((view.width - cw) / 2)
        return view.crop(top, left, ch, cw)


class RandomCrop(Transform):
    """Crop a random ``size`` region: torchvision's ``RandomCrop`` without padding, same draws.

    Args:
        size: An int for a square, or (height, width).

    Raises:
        ValueError: (when planning) The image is smaller than the crop, as in torchvision.
    """

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size_pair(size)

    def params(self, height: int, width: int) -> tuple[int, int]:
        """Draw the crop's (top, left) for an image of this size: torchvision's draws (none
        when the image is the crop's size, else one per axis)."""
        ch, cw = self.size
        if height < ch or width < cw:
            raise ValueError(
                f"RandomCrop of {ch} x {cw} (height x width) is larger than the {height} x "
                f"{width} image"
            )
        if (height, width) == (ch, cw):
            return 0, 0
        top = randint(0, height - ch + 1)
        left = randint(0, width - cw + 1)
        return top, left

    def make_params(self, view: View) -> tuple[int, int]:
        return self.params(view.height, view.width)

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        top, left = params
        return view.crop(top, left, *self.size)
