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

Interpolation follows torchvision's names (``InterpolationMode`` members or the strings
``"nearest"``, ``"bilinear"``, ``"bicubic"``). Shrinking with ``antialias=True`` (the default)
runs torch's antialiased kernel, the one torchvision uses; enlarging uses OpenCV's filter of the
same name.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cv2
import numpy as np
import torch

__all__ = [
    "CenterCrop",
    "Compose",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "Transform",
    "TransformSplit",
    "View",
    "Visible",
    "resample",
    "source_window",
    "split_transform",
    "visible_part",
    "whole_pixels",
]

_INTERPOLATION = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
}


@dataclass(frozen=True)
class View:
    """The image so far: region ``box`` of the source, resized to ``width`` x ``height``.

    Attributes:
        box: (x0, y0, x1, y1) in source pixel coordinates (continuous: pixel k spans [k, k+1)).
            May reach outside the source, where the image is padded with zeros.
        width: Output width in pixels.
        height: Output height in pixels.
        mirror: Whether the output is mirrored left-right.
    """

    box: tuple[float, float, float, float]
    width: int
    height: int
    mirror: bool = False

    @classmethod
    def full(cls, width: int, height: int) -> View:
        """The whole source at its own size."""
        return cls((0.0, 0.0, float(width), float(height)), width, height)

    def crop(self, top: int, left: int, height: int, width: int) -> View:
        """The view of a crop, given in this view's output pixel coordinates."""
        x0, y0, x1, y1 = self.box
        sx = (x1 - x0) / self.width
        sy = (y1 - y0) / self.height
        if self.mirror:  # output column c shows source column x1 - (c + 1) * sx
            nx0, nx1 = x1 - (left + width) * sx, x1 - left * sx
        else:
            nx0, nx1 = x0 + left * sx, x0 + (left + width) * sx
        return View((nx0, y0 + top * sy, nx1, y0 + (top + height) * sy), width, height, self.mirror)

    def resize(self, width: int, height: int) -> View:
        """The same region at another output size."""
        return replace(self, width=width, height=height)

    def mirrored(self) -> View:
        """The same view, mirrored left-right."""
        return replace(self, mirror=not self.mirror)


def _interpolation(mode: Any) -> str:
    name = str(getattr(mode, "value", mode)).lower()
    if name not in _INTERPOLATION:
        raise ValueError(
            f"interpolation={mode!r} is not supported; valid: {', '.join(_INTERPOLATION)}"
        )
    return name


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


def resample(
    array: np.ndarray,
    box: tuple[float, float, float, float],
    width: int,
    height: int,
    *,
    interpolation: str = "bilinear",
    antialias: bool = True,
    scale: tuple[float, float] = (1.0, 1.0),
    origin: tuple[int, int] | None = None,
) -> np.ndarray:
    """Resample region ``box`` of an H x W x C uint8 array to ``width`` x ``height``.

    Sampling follows torchvision's conventions, case by case:

    * a box on whole pixels (a crop, then a resize: RandomResizedCrop) is sliced, then resized;
    * a box on whole pixels of the image resized as a whole (a resize, then a crop: Resize +
      CenterCrop) is resized as a whole, then sliced: the same order as torchvision;
    * any other box is sampled directly with an affine warp (no antialiasing).

    Shrinking with ``antialias`` uses torch's antialiased kernel, the one torchvision uses;
    enlarging and ``antialias=False`` use OpenCV. Parts of ``box`` outside the array are
    zeros, like torchvision's padding.

    Args:
        array: The source pixels, H x W x C, channels last.
        box: (x0, y0, x1, y1) in source coordinates.
        width: Output width.
        height: Output height.
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        antialias: Filter when shrinking, as torchvision's ``antialias=True``.
        scale: How many array pixels one source pixel spans, per axis (x, y): below 1 when the
            array was decoded at a reduced DCT scale.
        origin: For an array that holds only the window of the scaled source that
            :func:`source_window` names (a region decode): where ``array[0, 0]`` lies in it.
            ``None``: the array is the whole source.

    Returns:
        A ``height`` x ``width`` x C array; a view of ``array`` when nothing needs resampling.
    """
    rows, cols = array.shape[:2]
    method, (x0, y0, x1, y1) = _sampling(box, scale, origin, cols, rows, width, height)
    if method == "padded":
        if origin is not None:  # a window from source_window always holds the box
            raise ValueError(
                f"box {box} at scale {scale} reaches outside the {cols} x {rows} window at "
                f"origin {origin}"
            )
        return _resample_padded(array, (x0, y0, x1, y1), width, height, interpolation, antialias)
    if method == "slice":
        region = array[round(y0) : round(y1), round(x0) : round(x1)]
        return _resize(region, width, height, interpolation, antialias)
    # the whole image at the size that makes this box whole pixels: resize, then slice
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    if method == "whole":
        full_w, full_h, left, top = cols * fx, rows * fy, x0 * fx, y0 * fy
        full = _resize(array, round(full_w), round(full_h), interpolation, antialias)
        return full[round(top) : round(top) + height, round(left) : round(left) + width]
    sx, sy = 1.0 / fx, 1.0 / fy
    matrix = np.array([[sx, 0.0, x0 + 0.5 * sx - 0.5], [0.0, sy, y0 + 0.5 * sy - 0.5]])
    out = cv2.warpAffine(
        array,
        matrix,
        (width, height),
        flags=_INTERPOLATION[interpolation] | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )
    return _keep_channels(out)


def _sampling(
    box: tuple[float, float, float, float],
    scale: tuple[float, float],
    origin: tuple[int, int] | None,
    cols: int,
    rows: int,
    width: int,
    height: int,
) -> tuple[str, tuple[float, float, float, float]]:
    """How :func:`resample` samples ``box`` from a ``cols`` x ``rows`` array, and the box in
    array pixels: ``"padded"``, ``"slice"``, ``"whole"`` (resize all, then slice; only for a
    whole source, ``origin=None``) or ``"warp"``."""
    left, top = origin or (0, 0)
    x0, y0 = box[0] * scale[0] - left, box[1] * scale[1] - top
    x1, y1 = box[2] * scale[0] - left, box[3] * scale[1] - top
    eps = 1e-6 * max(rows, cols)  # scaled edges land on the border up to rounding
    if x0 < -eps or y0 < -eps or x1 > cols + eps or y1 > rows + eps:
        return "padded", (x0, y0, x1, y1)
    x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(cols)), min(y1, float(rows))
    if whole_pixels(x0, y0, x1, y1):
        return "slice", (x0, y0, x1, y1)
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    if origin is None and whole_pixels(cols * fx, rows * fy, x0 * fx, y0 * fy):
        return "whole", (x0, y0, x1, y1)
    return "warp", (x0, y0, x1, y1)


# How far past the box OpenCV's warp reads, in array pixels: the kernel's reach, plus one for
# its fixed-point rounding of source positions.
_WARP_REACH = {"nearest": 1, "bilinear": 2, "bicubic": 3}


def source_window(
    box: tuple[float, float, float, float],
    size: tuple[int, int],
    width: int,
    height: int,
    *,
    interpolation: str = "bilinear",
    scale: tuple[float, float] = (1.0, 1.0),
) -> tuple[int, int, int, int] | None:
    """The pixels :func:`resample` reads to render ``box``: what a region decoder must deliver.

    Given an array holding at least this window, placed with ``origin=(x0, y0)``,
    :func:`resample` returns what it returns for the whole array.

    Args:
        box: (x0, y0, x1, y1) in source coordinates, as for :func:`resample`.
        size: The whole array's (width, height).
        width: Output width.
        height: Output height.
        interpolation: As for :func:`resample`.
        scale: As for :func:`resample`.

    Returns:
        (x0, y0, x1, y1) in array pixels, end exclusive; ``None`` when it may read the whole
        array (the box pads, or the whole array is resized before slicing).
    """
    cols, rows = size
    method, (x0, y0, x1, y1) = _sampling(box, scale, None, cols, rows, width, height)
    if method in ("padded", "whole"):
        return None
    if method == "slice":
        return round(x0), round(y0), round(x1), round(y1)
    reach = _WARP_REACH[_interpolation(interpolation)]
    return (
        max(0, math.floor(x0) - reach),
        max(0, math.floor(y0) - reach),
        min(cols, math.ceil(x1) + reach),
        min(rows, math.ceil(y1) + reach),
    )


def whole_pixels(*values: float) -> bool:
    """Whether every value lies on a whole pixel (within rounding)."""
    return all(abs(v - round(v)) < 1e-6 for v in values)


def _resize(
    region: np.ndarray, width: int, height: int, interpolation: str, antialias: bool
) -> np.ndarray:
    rows, cols = region.shape[:2]
    if (cols, rows) == (width, height):
        return region
    if antialias and interpolation != "nearest" and (width < cols or height < rows):
        # torch's uint8 channels-last kernel: torchvision's antialiased result, and fast. The
        # output is channels-first in memory, so the batch collate copies it without a transpose.
        if region.flags.writeable:
            image = torch.from_numpy(region)
        else:  # Pillow's arrays are read-only; this kernel only reads its input
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                image = torch.from_numpy(region)
        image = image.permute(2, 0, 1).unsqueeze(0)
        out = torch.nn.functional.interpolate(
            image, size=(height, width), mode=interpolation, antialias=True, align_corners=False
        )
        return out[0].permute(1, 2, 0).numpy()
    flag = _INTERPOLATION[interpolation]
    return _keep_channels(cv2.resize(region, (width, height), interpolation=flag))


def _keep_channels(out: np.ndarray) -> np.ndarray:
    # OpenCV drops a trailing channel axis of size 1.
    return out[:, :, None] if out.ndim == 2 else out


@dataclass(frozen=True)
class Visible:
    """The part of a view's output whose source lies inside the image, when it pads.

    Attributes:
        columns: Output columns [c0, c1) that show the image.
        rows: Output rows [r0, r1) that show the image.
        box: (x0, y0, x1, y1): the source region those output pixels sample, clipped to the
            image.
    """

    columns: tuple[int, int]
    rows: tuple[int, int]
    box: tuple[float, float, float, float]


def visible_part(
    box: tuple[float, float, float, float], width: int, height: int, cols: int, rows: int
) -> Visible | None:
    """Which output pixels of ``box`` resampled to ``width`` x ``height`` show a ``cols`` x
    ``rows`` image (the rest is padding); ``None`` when none do."""
    x0, y0, x1, y1 = box
    sx, sy = (x1 - x0) / width, (y1 - y0) / height
    c0, c1 = max(0, math.ceil(-x0 / sx - 1e-9)), min(width, math.floor((cols - x0) / sx + 1e-9))
    r0, r1 = max(0, math.ceil(-y0 / sy - 1e-9)), min(height, math.floor((rows - y0) / sy + 1e-9))
    if c1 <= c0 or r1 <= r0:
        return None
    inner = (
        max(x0 + c0 * sx, 0.0),
        max(y0 + r0 * sy, 0.0),
        min(x0 + c1 * sx, float(cols)),
        min(y0 + r1 * sy, float(rows)),
    )
    return Visible((c0, c1), (r0, r1), inner)


def _resample_padded(
    array: np.ndarray,
    box: tuple[float, float, float, float],
    width: int,
    height: int,
    interpolation: str,
    antialias: bool,
) -> np.ndarray:
    """Resample the part of ``box`` inside the array into its place on a zero canvas."""
    canvas = np.zeros((height, width, array.shape[2]), dtype=array.dtype)
    part = visible_part(box, width, height, array.shape[1], array.shape[0])
    if part is not None:
        (c0, c1), (r0, r1) = part.columns, part.rows
        canvas[r0:r1, c0:c1] = resample(
            array, part.box, c1 - c0, r1 - r0, interpolation=interpolation, antialias=antialias
        )
    return canvas


def render(array: np.ndarray, view: View, **options: Any) -> np.ndarray:
    """Produce a planned view from the full source ``array`` (H x W x C)."""
    out = resample(array, view.box, view.width, view.height, **options)
    return np.ascontiguousarray(out[:, ::-1]) if view.mirror else out


def apply_planned(
    image: torch.Tensor, plan: Callable[[View], View], name: str, options: dict[str, Any]
) -> torch.Tensor:
    """Plan on the whole of a C x H x W uint8 tensor and render the result in one resample."""
    if not isinstance(image, torch.Tensor) or image.ndim != 3 or image.dtype != torch.uint8:
        got = (
            f"a {image.dtype} tensor of shape {tuple(image.shape)}"
            if isinstance(image, torch.Tensor)
            else type(image).__name__
        )
        raise TypeError(f"{name} takes a C x H x W uint8 tensor, got {got}")
    array = image.permute(1, 2, 0).numpy()
    if array.strides[2] != array.itemsize:  # OpenCV needs interleaved channels
        array = np.ascontiguousarray(array)
    view = plan(View.full(array.shape[1], array.shape[0]))
    return torch.from_numpy(render(array, view, **options)).permute(2, 0, 1)


class Transform:
    """A per-sample op that plans on a :class:`View` and can run fused with decoding.

    Subclasses implement :meth:`plan`. Calling an op on a C x H x W uint8 tensor plans on the
    whole image and renders the result, so ops also work outside ``fastload.ImageFolder``.
    """

    interpolation: str = "bilinear"
    antialias: bool = True

    def plan(self, view: View) -> View:
        """Return the view after this op; draws random parameters from torch's global RNG."""
        raise NotImplementedError

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
        self.interpolation = _interpolation(interpolation)
        self.antialias = antialias

    def params(self, height: int, width: int) -> tuple[int, int, int, int]:
        """Draw a crop (top, left, height, width) for an image of this size.

        The draws, their order and the fallback are torchvision's, so the same torch seed gives
        the same crop box.
        """
        area = height * width
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_lo, log_hi).item())
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, size=(1,)).item())
                left = int(torch.randint(0, width - w + 1, size=(1,)).item())
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

    def plan(self, view: View) -> View:
        top, left, h, w = self.params(view.height, view.width)
        return view.crop(top, left, h, w).resize(self.size[1], self.size[0])


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
        self.interpolation = _interpolation(interpolation)
        self.antialias = antialias

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after resizing an image of this size, as torchvision computes it."""
        if not isinstance(self.size, int):
            return self.size
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = self.size, int(self.size * long / short)
        if self.max_size is not None and new_long > self.max_size:
            new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_long, new_short) if width <= height else (new_short, new_long)

    def plan(self, view: View) -> View:
        h, w = self.output_size(view.height, view.width)
        return view.resize(w, h)


class CenterCrop(Transform):
    """Crop the centre; a crop larger than the image is padded with zeros, as in torchvision.

    Args:
        size: An int for a square, or (height, width).
    """

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _size_pair(size)

    def plan(self, view: View) -> View:
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
        top = int(torch.randint(0, height - ch + 1, size=(1,)).item())
        left = int(torch.randint(0, width - cw + 1, size=(1,)).item())
        return top, left

    def plan(self, view: View) -> View:
        top, left = self.params(view.height, view.width)
        return view.crop(top, left, *self.size)


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p`` (one ``torch.rand(1)`` draw, as torchvision)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p={p!r} must be within [0, 1]")
        self.p = p

    def plan(self, view: View) -> View:
        return view.mirrored() if torch.rand(1).item() < self.p else view


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
