"""Batch augmentation with parameters drawn independently for every sample.

Each class draws its random parameters once per call, one per sample, on the CPU from its
``generator`` (torch's default CPU generator when ``None``), so the same seed gives the same
batch on the CPU and on a GPU. Drawing is apart from applying, as in torchvision v2:
``make_params(n, height, width)`` returns the draws for a batch of ``n`` images of that size,
and ``apply_params(images, params)`` hands them to a kernel of ``fastload.gpu.functional``,
which applies them without a host sync. Whoever runs an op elsewhere (a batch executor folding
flips into its own graph) calls ``make_params`` and gets the very draws the op would make.

Call an op as ``op(images)`` for images alone or ``op(images, labels)`` for both (MixUp and
CutMix need labels and return soft ones). Images are N x C x H x W, uint8 (0-255) or floating
point (0-1); an empty batch passes through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from fastload.checks import check_int
from fastload.gpu import functional as F

__all__ = [
    "BatchTransform",
    "ColorJitter",
    "Compose",
    "CutMix",
    "GaussianBlur",
    "MixUp",
    "Normalize",
    "RandomApply",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomTransform",
    "RandomVerticalFlip",
    "transforms_in",
]


def _probability(p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p={p!r} must be a number within [0, 1]")
    return float(p)


def _range(name: str, value: float | Sequence[float], *, center: float, low: float, high: float):
    """torchvision's jitter ranges: v -> [center - v, center + v] clipped to [low, high], or
    an explicit (min, max)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name}={value!r} must be non-negative")
        lo, hi = center - value, center + value
        lo = max(lo, low)
    elif isinstance(value, Sequence) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise ValueError(f"{name}={value!r} must be a number or a (min, max) pair")
    if not low <= lo <= hi <= high:
        raise ValueError(f"{name}={value!r} gives the range ({lo}, {hi}), outside [{low}, {high}]")
    return (lo, hi)


class BatchTransform:
    """Base of the batch ops: checks the batch, draws parameters, applies a kernel.

    Subclasses implement :meth:`make_params` and :meth:`apply_params` (or :meth:`apply` for
    an op that draws nothing).

    Args:
        generator: The CPU generator parameters are drawn from; torch's default when ``None``.
    """

    channels: tuple[int, ...] = (1, 3)
    mixes_labels = False

    def __init__(self, *, generator: torch.Generator | None = None) -> None:
        if generator is not None and generator.device.type != "cpu":
            raise ValueError(
                f"generator must be a CPU torch.Generator (parameters are drawn on the CPU so that "
                f"a seed gives the same batch on every device); got one on {generator.device}"
            )
        self.generator = generator

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        F.check_images(images, type(self).__name__, channels=self.channels)
        out = images if images.shape[0] == 0 else self.apply(images)
        return out if labels is None else (out, labels)

    def apply(self, images: torch.Tensor) -> torch.Tensor:
        """Draw this call's parameters and apply them to a non-empty batch."""
        n, _, height, width = images.shape
        return self.apply_params(images, self.make_params(n, height, width))

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        """Draw the parameters for ``n`` images of ``height`` x ``width`` (on the CPU)."""
        raise NotImplementedError

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        """Apply parameters drawn by :meth:`make_params` to a batch."""
        raise NotImplementedError

    def rand(self, *shape: int) -> torch.Tensor:
        """Uniform [0, 1) draws on the CPU from this op's generator."""
        return torch.rand(shape, generator=self.generator)

    def uniform(self, n: int, lo: float, hi: float) -> torch.Tensor:
        return lo + (hi - lo) * self.rand(n)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "generator")
        return f"{type(self).__name__}({fields})"


class RandomTransform(BatchTransform):
    """A batch op applied to each sample with probability ``p``, decided per sample.

    :meth:`make_params` draws ``{"apply": bool tensor}`` (one decision per sample) before any
    parameter a subclass adds.

    Args:
        p: The probability that a sample is changed.
        generator: The CPU generator parameters are drawn from; torch's default when ``None``.
    """

    def __init__(self, p: float = 0.5, *, generator: torch.Generator | None = None) -> None:
        super().__init__(generator=generator)
        self.p = _probability(p)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        return {"apply": self.rand(n) < self.p}


class RandomHorizontalFlip(RandomTransform):
    """Mirror each sample left-right with probability ``p``."""

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return F.hflip(images, params["apply"])


class RandomVerticalFlip(RandomTransform):
    """Mirror each sample top-bottom with probability ``p``."""

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return F.vflip(images, params["apply"])


class RandomResizedCrop(BatchTransform):
    """Crop a random area and aspect ratio of each sample and resize it to ``size``.

    The boxes follow torchvision's RandomResizedCrop (ten tries, then the central fallback), drawn
    per sample. Also takes a list of C x H x W images of different sizes and returns one batch.

    Args:
        size: Output (height, width), or an int for a square.
        scale: Range of the crop's area as a fraction of the image's.
        ratio: Range of the crop's aspect ratio (width / height), sampled log-uniformly.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator=generator)
        pair = (size, size) if isinstance(size, int) else tuple(size)
        if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
            raise ValueError(f"size={size!r} must be a positive int or (height, width)")
        if not 0 < scale[0] <= scale[1] or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"scale={scale!r} and ratio={ratio!r} must be positive (min, max)")
        self.size = (int(pair[0]), int(pair[1]))
        self.scale, self.ratio = tuple(scale), tuple(ratio)

    def __call__(self, images: Any, labels: torch.Tensor | None = None) -> Any:
        if isinstance(images, torch.Tensor):
            return super().__call__(images, labels)
        if not isinstance(images, Sequence) or not images:
            raise ValueError("RandomResizedCrop takes an N x C x H x W tensor or a list of images")
        for im in images:
            F.check_images(im.unsqueeze(0), "RandomResizedCrop", channels=self.channels)
        sizes = torch.tensor([[im.shape[-2], im.shape[-1]] for im in images], dtype=torch.float64)
        out = F.resized_crop(list(images), self.boxes(sizes[:, 0], sizes[:, 1]), self.size)
        return out if labels is None else (out, labels)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        heights = torch.full((n,), float(height), dtype=torch.float64)
        widths = torch.full((n,), float(width), dtype=torch.float64)
        return {"boxes": self.boxes(heights, widths)}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return F.resized_crop(images, params["boxes"], self.size)

    def boxes(self, heights: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
        """(N, 4) boxes (top, left, height, width) for images of these sizes."""
        n, tries = heights.shape[0], 10
        area = (heights * widths)[:, None]
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * self.rand(n, tries))
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * self.rand(n, tries).double())
        w = torch.round(torch.sqrt(target * aspect))
        h = torch.round(torch.sqrt(target / aspect))
        fits = (w > 0) & (w <= widths[:, None]) & (h > 0) & (h <= heights[:, None])
        first = torch.argmax(fits.int(), dim=1)  # the first try that fits
        found = fits.any(dim=1)
        rows = torch.arange(n)
        w, h = w[rows, first], h[rows, first]
        # torchvision's fallback after ten misses: the largest centred crop within the ratios
        in_ratio = widths / heights
        fw = torch.where(
            in_ratio < self.ratio[0],
            widths,
            torch.where(in_ratio > self.ratio[1], torch.round(heights * self.ratio[1]), widths),
        )
        fh = torch.where(in_ratio < self.ratio[0], torch.round(widths / self.ratio[0]), heights)
        w, h = torch.where(found, w, fw), torch.where(found, h, fh)
        u = self.rand(n, 2).double()
        top = torch.where(
            found, torch.floor(u[:, 0] * (heights - h + 1)), torch.floor((heights - h) / 2)
        )
        left = torch.where(
            found, torch.floor(u[:, 1] * (widths - w + 1)), torch.floor((widths - w) / 2)
        )
        return torch.stack([top, left, h, w], dim=1).long()


class ColorJitter(BatchTransform):
    """Jitter brightness, contrast, saturation and hue, with factors drawn per sample.

    Ranges follow torchvision: ``brightness=b`` draws from [max(0, 1 - b), 1 + b] (likewise
    contrast and saturation), ``hue=h`` from [-h, h] with h <= 0.5; a (min, max) pair gives the
    range itself. The order of the four adjustments is drawn once per batch (one permutation,
    as torchvision draws one per call); their factors are drawn per sample.
    """

    def __init__(
        self,
        brightness: float | Sequence[float] = 0.0,
        contrast: float | Sequence[float] = 0.0,
        saturation: float | Sequence[float] = 0.0,
        hue: float | Sequence[float] = 0.0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator=generator)
        inf = float("inf")
        self.brightness = _range("brightness", brightness, center=1.0, low=0.0, high=inf)
        self.contrast = _range("contrast", contrast, center=1.0, low=0.0, high=inf)
        self.saturation = _range("saturation", saturation, center=1.0, low=0.0, high=inf)
        self.hue = _range("hue", hue, center=0.0, low=-0.5, high=0.5)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        order = torch.randperm(4, generator=self.generator).tolist()
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        return {"order": order, "factors": [self.uniform(n, *r) for r in ranges]}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        steps = [
            (F.adjust_brightness, self.brightness, 1.0),
            (F.adjust_contrast, self.contrast, 1.0),
            (F.adjust_saturation, self.saturation, 1.0),
            (F.adjust_hue, self.hue, 0.0),
        ]
        out = images
        for i in params["order"]:
            kernel, (lo, hi), identity = steps[i]
            if lo == hi == identity:
                continue  # not asked for
            out = kernel(out, params["factors"][i])
        return out if out is not images else images.clone()


class RandomGrayscale(RandomTransform):
    """Turn each sample grey (kept as 3 channels) with probability ``p``."""

    channels = (3,)

    def __init__(self, p: float = 0.1, *, generator: torch.Generator | None = None) -> None:
        super().__init__(p, generator=generator)

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        grey = F.rgb_to_grayscale(images).to(images.dtype)  # truncates for uint8, as torchvision
        mask = F.to_device(params["apply"], images.device).view(-1, 1, 1, 1)
        return torch.where(mask, grey.expand_as(images), images)


class GaussianBlur(BatchTransform):
    """Blur each sample with a Gaussian of its own sigma, drawn from ``sigma`` (min, max).

    Args:
        kernel_size: Odd positive int, or (width, height).
        sigma: A fixed sigma, or the (min, max) range to draw from.
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        sigma: float | Sequence[float] = (0.1, 2.0),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator=generator)
        pair = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if len(pair) != 2 or not all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in pair):
            raise ValueError(f"kernel_size={kernel_size!r} must be odd positive ints")
        lo, hi = (sigma, sigma) if isinstance(sigma, (int, float)) else tuple(sigma)
        if not 0 < lo <= hi:
            raise ValueError(f"sigma={sigma!r} must be positive, as a number or (min, max)")
        self.kernel_size, self.sigma = (pair[0], pair[1]), (float(lo), float(hi))

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        if self.kernel_size[0] // 2 >= width or self.kernel_size[1] // 2 >= height:
            raise ValueError(
                f"GaussianBlur kernel {self.kernel_size} is too large for {width} x {height} images"
            )
        return {"sigma": self.uniform(n, *self.sigma)}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return F.gaussian_blur(images, self.kernel_size, params["sigma"])


class RandomErasing(RandomTransform):
    """Erase a random rectangle in each sample with probability ``p`` (torchvision's draws).

    Args:
        p: Probability of erasing a sample.
        scale: Range of the erased area as a fraction of the image.
        ratio: Range of the rectangle's aspect ratio, sampled log-uniformly.
        value: The fill: one number or one per channel, in the images' units.
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: tuple[float, float] = (0.02, 0.33),
        ratio: tuple[float, float] = (0.3, 3.3),
        value: float | Sequence[float] = 0.0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p, generator=generator)
        if not 0 <= scale[0] <= scale[1] <= 1 or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"scale={scale!r} must lie in [0, 1] and ratio={ratio!r} be positive")
        if isinstance(value, str):
            raise ValueError(f"value={value!r}: only numbers are supported")
        self.scale, self.ratio, self.value = tuple(scale), tuple(ratio), value

    def apply(self, images: torch.Tensor) -> torch.Tensor:
        c = images.shape[1]
        if not isinstance(self.value, (int, float)) and len(self.value) not in (1, c):
            raise ValueError(f"value has {len(self.value)} entries for {c}-channel images")
        return super().apply(images)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        """``apply``: whether each sample is erased; ``boxes``: (top, left, height, width),
        zero-sized where not erased. torchvision's draws: ten tries for a box that fits."""
        h, w = height, width
        tries = 10
        area = float(h * w)
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * self.rand(n, tries))
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * self.rand(n, tries))
        eh = torch.round(torch.sqrt(target * aspect))
        ew = torch.round(torch.sqrt(target / aspect))
        fits = (eh < h) & (ew < w)
        first = torch.argmax(fits.int(), dim=1)
        rows = torch.arange(n)
        eh, ew = eh[rows, first], ew[rows, first]
        erase = fits.any(dim=1) & (self.rand(n) < self.p)
        u = self.rand(n, 2)
        top = torch.floor(u[:, 0] * (h - eh + 1))
        left = torch.floor(u[:, 1] * (w - ew + 1))
        return {
            "apply": erase,
            "boxes": torch.stack([top, left, eh * erase, ew * erase], dim=1).long(),
        }

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return F.erase(images, params["boxes"], self.value)


class Normalize(BatchTransform):
    """``(x - mean) / std`` per channel; uint8 images are scaled to [0, 1] first.

    Args:
        mean: Per-channel means in torchvision's [0, 1] units (1 or 3 values).
        std: Per-channel standard deviations, same length, all positive.
        dtype: Output dtype: ``torch.float32`` (default), ``torch.bfloat16`` or
            ``torch.float16``.
    """

    _DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

    def __init__(
        self, mean: Sequence[float], std: Sequence[float], *, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        mean, std = [float(m) for m in mean], [float(s) for s in std]
        if len(mean) not in (1, 3) or len(std) != len(mean):
            raise ValueError(
                f"mean={mean!r} and std={std!r} must have the same length, 1 or 3 (one per channel)"
            )
        if any(s <= 0 for s in std):
            raise ValueError(f"std={std!r} must be positive")
        if dtype not in self._DTYPES:
            raise ValueError(f"dtype={dtype!r} is not supported; valid: {list(self._DTYPES)}")
        self.mean, self.std, self.dtype = mean, std, dtype

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        F.check_images(
            images, "Normalize", channels=(len(self.mean),) if len(self.mean) == 3 else (1, 3)
        )
        out = F.normalize(images, self.mean, self.std, dtype=self.dtype)
        return out if labels is None else (out, labels)


class ToFloat(BatchTransform):
    """uint8 images as float32 scaled to [0, 1], by the steps of torchvision v2's
    ``ToDtype(torch.float32, scale=True)`` (a cast, then ``mul_(1 / 255)``): the same values on
    every device. Float images pass as they are."""

    def __init__(self) -> None:
        super().__init__()

    def apply(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8:
            return images
        return images.to(torch.float32).mul_(1.0 / 255)


class _LabelMix(BatchTransform):
    mixes_labels = True

    def __init__(
        self, alpha: float = 1.0, *, num_classes: int, generator: torch.Generator | None = None
    ) -> None:
        super().__init__(generator=generator)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
            raise ValueError(f"alpha={alpha!r} must be a positive number")
        check_int("num_classes", num_classes, minimum=2)
        self.alpha, self.num_classes = float(alpha), num_classes

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        if labels is None:
            raise ValueError(
                f"{type(self).__name__} mixes labels too: call it as op(images, labels)"
            )
        F.check_images(images, type(self).__name__, channels=self.channels)
        if labels.shape[0] != images.shape[0]:
            raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
        if images.shape[0] == 0:
            return images, F.one_hot(labels, self.num_classes, F.label_dtype(images))
        return self.mix(images, labels)

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class MixUp(_LabelMix):
    """Mix each sample with the previous one in the batch, lambda ~ Beta(alpha, alpha) per
    sample; labels become soft (N x num_classes)."""

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        return {"lam": F.sample_beta(self.alpha, n, self.generator)}

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        params = self.make_params(*_sizes(images))
        return F.mixup(images, labels, params["lam"], self.num_classes)


class CutMix(_LabelMix):
    """Paste a box from the previous sample into each sample, sized by lambda ~ Beta(alpha,
    alpha) per sample (torchvision's box rule); labels mix by the pasted area."""

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        h, w = height, width
        lam = F.sample_beta(self.alpha, n, self.generator).double()
        cy = torch.floor(self.rand(n).double() * h)
        cx = torch.floor(self.rand(n).double() * w)
        r = 0.5 * torch.sqrt(1.0 - lam)
        half_w, half_h = torch.floor(r * w), torch.floor(r * h)
        x0, y0 = torch.clamp(cx - half_w, min=0), torch.clamp(cy - half_h, min=0)
        x1, y1 = torch.clamp(cx + half_w, max=w), torch.clamp(cy + half_h, max=h)
        return {"boxes": torch.stack([y0, x0, y1 - y0, x1 - x0], dim=1).long()}

    def mix(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        params = self.make_params(*_sizes(images))
        return F.cutmix(images, labels, params["boxes"], self.num_classes)


class Compose:
    """Run batch ops in order, passing labels along when given."""

    def __init__(self, transforms: Sequence[Callable[..., Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        for t in self.transforms:
            if labels is None:
                images = t(images)
            else:
                images, labels = t(images, labels)
        return images if labels is None else (images, labels)

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose([{inner}\n])"


class RandomApply(RandomTransform):
    """Apply ``transform`` to each sample with probability ``p`` (decided per sample).

    The op runs on the whole batch and each sample keeps its result or its input, so the op must
    keep the batch's shape and dtype; label-mixing ops (MixUp, CutMix) are refused.
    """

    def __init__(
        self,
        transform: Callable[..., Any],
        p: float = 0.5,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(p, generator=generator)
        if any(getattr(t, "mixes_labels", False) for t in transforms_in(transform)):
            raise TypeError(f"RandomApply cannot wrap {transform!r}: it mixes labels")
        self.transform = transform

    def apply(self, images: torch.Tensor) -> torch.Tensor:
        # the wrapped op draws first, then this op's per-sample decisions
        out = self.transform(images)
        if out.shape != images.shape or out.dtype != images.dtype:
            raise ValueError(
                f"RandomApply needs an op that keeps shape and dtype; {self.transform!r} turned "
                f"{tuple(images.shape)} {images.dtype} into {tuple(out.shape)} {out.dtype}"
            )
        params = self.make_params(*_sizes(images))
        mask = F.to_device(params["apply"], images.device).view(-1, 1, 1, 1)
        return torch.where(mask, out, images)


def _sizes(images: torch.Tensor) -> tuple[int, int, int]:
    n, _, height, width = images.shape
    return n, height, width


def transforms_in(transform: Any) -> Iterator[Any]:
    """The op and every op nested in it (through Compose and RandomApply)."""
    yield transform
    for child in getattr(transform, "transforms", []):
        yield from transforms_in(child)
    inner = getattr(transform, "transform", None)
    if inner is not None:
        yield from transforms_in(inner)
