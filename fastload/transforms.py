"""Per-sample ops on uint8 images, planned before decoding so that decoding can be cut short.

Each geometric op does not touch pixels at first: it *plans*, turning a :class:`View` (which
region of the source image, resized to what size, mirrored or not) into the next one, with the
same random draws, in the same order, as torchvision's op of the same name. Once a chain of ops
is planned, the decoder knows the region and the output size up front: it decodes at a reduced
DCT scale when the region is at least twice the output, and the region is then resampled
once, straight to the output size.

Used with ``fastload.ImageFolder``, a ``Compose`` of these ops runs fused with decoding; any
other callable in the ``Compose`` runs afterwards, on the CHW uint8 tensor. Called directly on
a CHW uint8 tensor, each op gives the same result without the decoding shortcut.

Each op draws apart from applying, as the batch ops do: ``make_params(view)`` makes its random
draws (torchvision's, in torchvision's order), ``apply_params(view, params)`` turns the view
into the next one without drawing, and ``plan(view)`` is the two in turn. The views are
rendered by :mod:`fastload.resampling`.

Interpolation follows torchvision's names (``InterpolationMode`` members or the strings
``"nearest"``, ``"bilinear"``, ``"bicubic"``). Resizing with ``antialias=True`` (the default),
shrinking or enlarging, runs torch's antialiased kernel, the one torchvision's ``resize`` of a
tensor runs; ``antialias=False`` uses OpenCV's filter of the same name.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fastload import drawing
from fastload.resampling import (
    View,
    Visible,
    apply_planned,
    interpolation_name,
    resample,
    source_window,
    visible_part,
    whole_pixels,
)

__all__ = [
    "CenterCrop",
    "Compose",
    "PadIfSmaller",
    "RandomCrop",
    "RandomCropWithPadding",
    "RandomHorizontalFlip",
    "RandomResize",
    "RandomResizedCrop",
    "RandomShortestSize",
    "Resize",
    "ScaleJitter",
    "Transform",
    "TransformSplit",
    # the kernel's names, kept here for code that imported them from this module
    "View",
    "Visible",
    "resample",
    "shorter_side_to",
    "source_window",
    "split_transform",
    "visible_part",
    "whole_pixels",
]


def _size_pair(size: int | Sequence[int], what: str = "size") -> tuple[int, int]:
    """(height, width) from an int or a 1- or 2-element sequence, as torchvision reads it."""
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) in (1, 2):
        pair = (size[0], size[0]) if len(size) == 1 else (size[0], size[1])
    else:
        raise ValueError(f"{what}={size!r} must be an int or a sequence of 1 or 2 ints")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"{what}={size!r} must hold positive ints")
    return pair


# One-element tensors the draws below fill again, one set per thread: the same kernels, and so
# the same numbers from torch's stream, as torchvision's fresh tensors, at half the cost
# (planning is on the executors' critical path).
_scratch = threading.local()


def _uniform(low: float, high: float) -> float:
    """``torch.empty(1).uniform_(low, high).item()``, as torchvision draws it."""
    words = drawing.words()
    if words is not None:
        return words.uniform(low, high)
    dtype = torch.get_default_dtype()  # torch.empty(1) follows it
    buffer = getattr(_scratch, "floats", None)
    if buffer is None or buffer.dtype != dtype:
        buffer = _scratch.floats = torch.empty(1, dtype=dtype)
    return buffer.uniform_(low, high, generator=drawing.generator()).item()


def _randint(low: int, high: int) -> int:
    """``torch.randint(low, high, size=(1,)).item()``: randint fills an int64 tensor with
    ``random_(low, high)``."""
    words = drawing.words()
    drawn = None if words is None else words.integer(low, high)
    if drawn is not None:
        return drawn
    buffer = getattr(_scratch, "ints", None)
    if buffer is None:
        buffer = _scratch.ints = torch.empty(1, dtype=torch.int64)
    return int(buffer.random_(low, high, generator=drawing.generator()).item())


class Transform:
    """A per-sample op that plans on a :class:`View` and can run fused with decoding.

    Subclasses implement :meth:`apply_params`, and :meth:`make_params` when they draw.
    Calling an op on a C x H x W uint8 tensor plans on the whole image and renders the result,
    so ops also work outside ``fastload.ImageFolder``.
    """

    interpolation: str = "bilinear"
    antialias: bool = True

    def make_params(self, view: View) -> Any:
        """Draw this op's random parameters for ``view`` (from torch's CPU stream, as
        torchvision draws them); ``None`` for an op that draws nothing."""
        return None

    def apply_params(self, view: View, params: Any) -> View:
        """The view after this op, with ``params`` from :meth:`make_params`; draws nothing."""
        raise NotImplementedError

    def plan(self, view: View) -> View:
        """The view after this op: its draws, then their application."""
        return self.apply_params(view, self.make_params(view))

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return apply_planned(image, self.plan, type(self).__name__, self.render_options)

    @property
    def render_options(self) -> dict[str, Any]:
        """How this op resamples when it is the one that decides (see ``Compose``)."""
        return {"interpolation": self.interpolation, "antialias": self.antialias}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


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
        self.size = _size_pair(size)
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
            target = area * _uniform(self.scale[0], self.scale[1])
            aspect = math.exp(_uniform(log_lo, log_hi))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = _randint(0, height - h + 1)
                left = _randint(0, width - w + 1)
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
            self.size = _size_pair(size)
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
        short = self.min_size[_randint(0, len(self.min_size))]
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
        return shorter_side_to(
            view.height, view.width, _randint(self.min_size, self.max_size_drawn)
        )

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
        pair = _size_pair(tuple(target_size), "target_size")
        low, high = (float(s) for s in scale_range)
        if not 0 < low <= high:
            raise ValueError(f"scale_range={scale_range!r}: need 0 < low <= high")
        super().__init__(pair, interpolation, antialias=antialias)
        self.target_size, self.scale_range = pair, (low, high)

    def make_params(self, view: View) -> tuple[int, int]:
        """The (height, width) after resizing: one ``torch.rand(1)`` draw of the scale."""
        low, high = self.scale_range
        # torchvision scales in float32 tensors: the same ops give the same rounding
        drawn = torch.tensor([_uniform(0.0, 1.0)], dtype=torch.get_default_dtype())
        scale = low + drawn * (high - low)
        ratio = min(self.target_size[1] / view.height, self.target_size[0] / view.width) * scale
        return int(view.height * ratio), int(view.width * ratio)

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        height, width = params
        return view.resize(width, height)


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
        self.size = _size_pair(size)
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
        y = _randint(0, height - ch + 1) if height > ch else 0
        x = _randint(0, width - cw + 1) if width > cw else 0
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
        self.size = _size_pair(size)

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
        self.size = _size_pair(size)

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
        top = _randint(0, height - ch + 1)
        left = _randint(0, width - cw + 1)
        return top, left

    def make_params(self, view: View) -> tuple[int, int]:
        return self.params(view.height, view.width)

    def apply_params(self, view: View, params: tuple[int, int]) -> View:
        top, left = params
        return view.crop(top, left, *self.size)


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p`` (one ``torch.rand(1)`` draw, as torchvision)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p={p!r} must be within [0, 1]")
        self.p = p

    def make_params(self, view: View) -> bool:
        """Whether to mirror: one ``torch.rand(1)`` draw."""
        return _uniform(0.0, 1.0) < self.p  # torch.rand(1) is uniform_(0, 1)

    def apply_params(self, view: View, params: bool) -> View:
        return view.mirrored() if params else view


class Compose:
    """Run ops in order. The leading fastload ops are planned together (and fused with
    decoding under ``fastload.ImageFolder``); anything after the first other callable runs on
    the CHW uint8 tensor that the fused part produced.

    Args:
        transforms: fastload ops and any other callables.
    """

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)
        split = next(
            (i for i, t in enumerate(self.transforms) if not isinstance(t, Transform)),
            len(self.transforms),
        )
        self.planned: list[Transform] = self.transforms[:split]  # type: ignore[assignment]
        self.rest: list[Callable[[Any], Any]] = self.transforms[split:]

    def plan(self, view: View) -> View:
        """Plan the leading fastload ops."""
        for t in self.planned:
            view = t.plan(view)
        return view

    @property
    def render_options(self) -> dict[str, Any]:
        """How the planned part resamples: the last planned op that resizes decides."""
        for t in reversed(self.planned):
            if isinstance(t, (RandomResizedCrop, Resize)):
                return t.render_options
        return {}

    def __call__(self, image: Any) -> Any:
        if self.planned:
            image = apply_planned(image, self.plan, "Compose", self.render_options)
        for t in self.rest:
            image = t(image)
        return image

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose([{inner}\n])"


@dataclass(frozen=True)
class TransformSplit:
    """A dataset's ``transform`` cut where decoding can no longer take it over.

    Attributes:
        fused: The leading fastload ops: planned before decoding, run fused with it.
        after: Callables run on the fused C x H x W uint8 tensor, in order.
        pil: A transform that is not fastload's (torchvision's, a lambda): it gets a PIL image
            of the whole decoded file; ``fused`` and ``after`` are then empty.
        render: How the fused part resamples (``interpolation``, ``antialias``).
    """

    fused: tuple[Transform, ...] = ()
    after: tuple[Callable[[Any], Any], ...] = ()
    pil: Callable[[Any], Any] | None = None
    render: dict[str, Any] = field(default_factory=dict)

    @property
    def plan(self) -> Callable[[View], View] | None:
        """Plans the fused ops on a view; ``None`` when nothing is fused."""
        return Compose(list(self.fused)).plan if self.fused else None

    @property
    def draws(self) -> bool:
        """Whether planning the fused ops draws random numbers (an op with ``make_params``)."""
        return any(type(op).make_params is not Transform.make_params for op in self.fused)

    @property
    def draws_python(self) -> bool:
        """Whether planning may draw from other streams than torch's through
        :func:`fastload.drawing.generator` (Python's ``random``, say): fastload's own ops do
        not; another ``Transform`` subclass may."""
        return any(type(op) not in _TORCH_DRAWN for op in self.fused)


# fastload's planned ops, which draw from torch's stream only (as torchvision's do), through
# _uniform and _randint
_TORCH_DRAWN = (
    RandomResizedCrop,
    Resize,
    RandomShortestSize,
    RandomResize,
    RandomCropWithPadding,
    PadIfSmaller,
    CenterCrop,
    RandomCrop,
    RandomHorizontalFlip,
)


def split_transform(transform: Callable[[Any], Any] | None) -> TransformSplit:
    """Split a dataset transform into the part fused with decoding and what runs after it."""
    if transform is None:
        return TransformSplit()
    if isinstance(transform, Compose):
        return TransformSplit(
            tuple(transform.planned), tuple(transform.rest), render=transform.render_options
        )
    if isinstance(transform, Transform):
        return TransformSplit((transform,), render=transform.render_options)
    return TransformSplit(pil=transform)
