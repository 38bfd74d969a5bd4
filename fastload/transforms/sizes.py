"""The resizes: torchvision's ``Resize`` and v2's ``RandomShortestSize``, ``RandomResize`` and
``ScaleJitter``, as planned ops, and the shorter-side arithmetic they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastload.pixels.resampling import View, interpolation_name
from fastload.transforms.base import Transform, randint, size_pair, uniform

__all__ = ["RandomResize", "RandomShortestSize", "Resize", "ScaleJitter", "shorter_side_to"]


def shorter_side_to(
    height: int, width: int, size: int, max_size: int | None = None
) -> tuple[int, int]:
    """(height, width) of an image whose shorter side is resized to ``size``, aspect kept and
    the longer side capped by ``max_size``, as torchvision computes it."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


class Resize(Transform):
    """Resize: an int sets the shorter side (aspect kept), (height, width) sets both.

    Args:
        size: An int, or (height, width).
        interpolation: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        max_size: With an int ``size``, the longer side's cap, as in torchvision.
        antialias: Average areas when shrinking by more than 2x.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        interpolation: Any = "bilinear",
        max_size: int | None = None,
        antialias: bool = True,
    ) -> None:
        # torchvision: an int or a 1-element sequence sets the shorter side; 2 elements, both.
        if isinstance(size, Sequence) and len(size) == 1:
            size = size[0]
        self.size: int | tuple[int, int]
        if isinstance(size, int) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError(f"size={size!r} must be positive")
            self.size = size
        else:
            self.size = size_pair(size)
        if max_size is not None and not isinstance(self.size, int):
            raise ValueError(f"max_size={max_size!r} only applies when size is an int")
        if max_size is not None and isinstance(self.size, int) and max_size <= self.size:
            raise ValueError(f"max_size={max_size!r} must be larger than size={size!r}")
        self.max_size = max_size
        self.interpolation = interpolation_name(interpolation)
        self.antialias = antialias

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after resizing an image of this size, as torchvision computes it."""
        if not isinstance(self.size, int):
            return self.size
        return shorter_side_to(height, width, self.size, self.max_size)

    def apply_params(self, view: View, params: Any) -> View:
        # a plain Resize draws nothing (params None); its random kin pass their drawn size
        h, w = self.output_size(view.height, view.width)
        return view.resize(w, h)


class RandomShortestSize(Resize):
    """Resize the shorter side to a size drawn from ``min_size`` (aspect kept), the longer
    side capped by ``max_size``: torchvision v2's ``RandomShortestSize`` (the detection
    references' multiscale training), same draw, same output size.

    Args:
        min_size: The sizes the shorter side is drawn from (an int: that one).
        max_size: The longer side's cap, or ``None``.
        interpolation: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        antialias: Average areas when shrinking by more than 2x.
    """

    def __init__(
        self,
        min_size: int | Sequence[int],
        max_size: int | None = None,
        interpolation: Any = "bilinear",
        antialias: bool = True,
    ) -> None:
        sizes = [min_size] if isinstance(min_size, int) else list(min_size)
        if not sizes or any(not isinstance(s, int) or s <= 0 for s in sizes):
            raise ValueError(f"min_size={min_size!r} must be positive ints")
        if max_size is not None and (not isinstance(max_size, int) or max_size <= 0):
            raise ValueError(f"max_size={max_size!r} must be a positive int or None")
        super().__init__(sizes[0], interpolation, antialias=antialias)
        self.min_size, self.max_size = tuple(sizes), max_size

    def make_params(self, view: View) -> tuple[int, int]:
        """The (height, width) after resizing: one ``torch.randint`` draw of the size."""
        short = self.min_size[randint(0, len(self.min_size))]
        height, width = view.height, view.width
        ratio = short / min(height, width)
        if self.max_size is not None:
            ratio = min(ratio, self.max_size / max(height, width))
        return int(height * ratio), int(width * ratio)

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        height, width = params
        return view.resize(width, height)


class RandomResize(Resize):
    """Resize the shorter side to a size drawn from ``[min_size, max_size)`` (aspect kept):
    torchvision v2's ``RandomResize`` (the segmentation references' training scale), same
    draw, same output size.

    Args:
        min_size: The smallest size drawn.
        max_size: One past the largest size drawn.
        interpolation: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        antialias: Average areas when shrinking by more than 2x.
    """

    def __init__(
        self,
        min_size: int,
        max_size: int,
        interpolation: Any = "bilinear",
        antialias: bool = True,
    ) -> None:
        if not 0 < min_size < max_size:
            raise ValueError(
                f"min_size={min_size!r}, max_size={max_size!r}: need 0 < min_size < max_size"
            )
        super().__init__(min_size, interpolation, antialias=antialias)
        self.min_size, self.max_size_drawn = min_size, max_size

    def make_params(self, view: View) -> tuple[int, int]:
        """The (height, width) after resizing: one ``torch.randint`` draw of the size."""
        return shorter_side_to(view.height, view.width, randint(self.min_size, self.max_size_drawn))

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        height, width = params
        return view.resize(width, height)


class ScaleJitter(Resize):
    """Resize by a scale drawn from ``scale_range`` times the one that fits the image in
    ``target_size`` (aspect kept): torchvision v2's ``ScaleJitter`` (the detection references'
    large-scale jitter, ``lsj``), same draw, same float32 arithmetic, same output size.

    Args:
        target_size: The size a drawn scale of 1 fits the image in, read as torchvision reads
            it: ``target_size[0]`` bounds the width, ``target_size[1]`` the height.
        scale_range: The (low, high) the scale is drawn from, uniformly.
        interpolation: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        antialias: Average areas when shrinking by more than 2x.
    """

    def __init__(
        self,
        target_size: Sequence[int],
        scale_range: Sequence[float] = (0.1, 2.0),
        interpolation: Any = "bilinear",
        antialias: bool = True,
    ) -> None:
        pair = size_pair(tuple(target_size), "target_size")
        low, high = (float(s) for s in scale_range)
        if not 0 < low <= high:
            raise ValueError(f"scale_range={scale_range!r}: need 0 < low <= high")
        super().__init__(pair, interpolation, antialias=antialias)
        self.target_size, self.scale_range = pair, (low, high)

    def make_params(self, view: View) -> tuple[int, int]:
        """The (height, width) after resizing: one ``torch.rand(1)`` draw of the scale."""
        low, high = self.scale_range
        # torchvision scales in float32 tensors: the same ops give the same rounding
        drawn = torch.tensor([uniform(0.0, 1.0)], dtype=torch.get_default_dtype())
        scale = low + drawn * (high - low)
        ratio = min(self.target_size[1] / view.height, self.target_size[0] / view.width) * scale
        return int(view.height * ratio), int(view.width * ratio)

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        height, width = params
        return view.resize(width, height)
