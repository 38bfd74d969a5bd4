"""The image ops of torchvision's augmentation policies, applied to a batch with one op and
magnitude per sample.

:func:`apply_ops` takes a uint8 N x C x H x W batch and, for each sample, the ``(name,
magnitude)`` pairs it drew (torchvision's op names and magnitudes, as its ``_apply_op`` takes
them). Each photometric op runs once for all the samples that chose it, with a factor per
sample, in the arithmetic of torchvision's tensor kernels: a blend is ``ratio * a + (1 - ratio)
* b`` in float32 with both factors rounded from Python's doubles, clamped and truncated, so the
result is torchvision's exactly (Contrast's per-image mean may be summed in another order: within
one level). The geometric ops (shear, translate, rotate) are torchvision's own ``affine`` and
``rotate``, one call per distinct magnitude.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["GEOMETRIC", "JITTER", "NAMES", "apply_jitter", "apply_ops", "blend"]

Ops = Sequence[Sequence[tuple[str, float]]]

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
_ENHANCE = ("Brightness", "Color", "Contrast", "Sharpness")
_OTHER = ("Posterize", "Solarize", "AutoContrast", "Equalize", "Invert", "Identity")
NAMES = GEOMETRIC + _ENHANCE + _OTHER


def blend(a: torch.Tensor, b: torch.Tensor, ratios: Sequence[float]) -> torch.Tensor:
    """``ratio * a + (1 - ratio) * b`` per sample, clamped to 0..255, as uint8 (truncated).

    Args:
        a: uint8 N x C x H x W.
        b: What ``a`` blends with (broadcast to it).
        ratios: One ratio per sample (Python floats: ``1 - ratio`` is taken in double, as
            torchvision's Python arithmetic takes it, before both become float32).
    """
    exact = torch.tensor(list(ratios), dtype=torch.float64).view(-1, 1, 1, 1)
    ratio, rest = exact.float().to(a.device), (1.0 - exact).float().to(a.device)
    return (ratio * a + rest * b).clamp(0, 255).to(a.dtype)


def _grey(images: torch.Tensor) -> torch.Tensor:
    from torchvision.transforms import functional as F

    return F.rgb_to_grayscale(images, num_output_channels=1)


def _enhanced(name: str, images: torch.Tensor, factors: list[float]) -> torch.Tensor:
    from torchvision.transforms import functional as F

    if name == "Brightness":
        return blend(images, torch.zeros_like(images), factors)
    if images.shape[1] == 1 and name == "Color":
        return images
    if name == "Color":
        return blend(images, _grey(images), factors)
    if name == "Contrast":
        mean = torch.mean(_grey(images).to(torch.float32), dim=(-3, -2, -1), keepdim=True)
        return blend(images, mean, factors)
    if images.shape[-1] <= 2 or images.shape[-2] <= 2:  # Sharpness: too small to blur
        return images
    return blend(images, F.adjust_sharpness(images, 0.0), factors)  # factor 0: the blurred one


def _posterize(images: torch.Tensor, magnitudes: list[float]) -> torch.Tensor:
    masks = [(-int(2 ** (8 - int(m)))) & 0xFF for m in magnitudes]
    mask = torch.tensor(masks, dtype=torch.uint8, device=images.device).view(-1, 1, 1, 1)
    return images & mask


def _solarize(images: torch.Tensor, magnitudes: list[float]) -> torch.Tensor:
    # torchvision compares the uint8 image with a Python float: in float32
    threshold = torch.tensor(magnitudes, dtype=torch.float32, device=images.device)
    return torch.where(images >= threshold.view(-1, 1, 1, 1), 255 - images, images)


def _geometric(
    name: str, image: torch.Tensor, magnitude: float, interpolation: Any, fill: list[float] | None
) -> torch.Tensor:
    """One magnitude of a geometric op, with the arguments torchvision's policies pass."""
    from torchvision.transforms import functional as F

    if name == "Rotate":
        return F.rotate(image, magnitude, interpolation=interpolation, fill=fill)
    shear = math.degrees(math.atan(magnitude))
    common: dict[str, Any] = {"angle": 0.0, "scale": 1.0, "interpolation": interpolation}
    if name == "ShearX":
        return F.affine(
            image, translate=[0, 0], shear=[shear, 0.0], fill=fill, center=[0, 0], **common
        )
    if name == "ShearY":
        return F.affine(
            image, translate=[0, 0], shear=[0.0, shear], fill=fill, center=[0, 0], **common
        )
    move = [int(magnitude), 0] if name == "TranslateX" else [0, int(magnitude)]
    return F.affine(image, translate=move, shear=[0.0, 0.0], fill=fill, **common)


def _one_step(
    images: torch.Tensor, chosen: list[tuple[str, float]], interpolation: Any, fill: Any
) -> torch.Tensor:
    """Apply one op per sample (``chosen[i]`` to sample ``i``)."""
    from torchvision.transforms import functional as F

    whole: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "AutoContrast": F.autocontrast,
        "Equalize": F.equalize,
        "Invert": F.invert,
    }
    groups: dict[str, list[int]] = defaultdict(list)
    for i, (name, _) in enumerate(chosen):
        if name not in NAMES:
            raise ValueError(f"op {name!r} is not a policy op; valid: {', '.join(NAMES)}")
        groups[name].append(i)
    out = images.clone()
    for name, rows in groups.items():
        if name == "Identity":
            continue
        index = torch.tensor(rows, device=images.device)
        part, values = images[index], [float(chosen[i][1]) for i in rows]
        if name in _ENHANCE:
            part = _enhanced(name, part, [1.0 + v for v in values])
        elif name == "Posterize":
            part = _posterize(part, values)
        elif name == "Solarize":
            part = _solarize(part, values)
        elif name in whole:
            part = whole[name](part)
        else:
            part = _geometric_group(name, part, values, interpolation, fill)
        out[index] = part
    return out


def _geometric_group(
    name: str, part: torch.Tensor, values: list[float], interpolation: Any, fill: Any
) -> torch.Tensor:
    """A geometric op on a group, one torchvision call per distinct magnitude, written into
    ``part`` (the group's own copy: each magnitude's rows are read before they are written)."""
    by_value: dict[float, list[int]] = defaultdict(list)
    for k, value in enumerate(values):
        by_value[value].append(k)
    for value, ks in by_value.items():
        index = torch.tensor(ks, device=part.device)
        part[index] = _geometric(name, part[index], value, interpolation, fill)
    return part


def apply_ops(
    images: torch.Tensor,
    ops: Ops,
    *,
    interpolation: Any,
    fill: Sequence[float] | float | None = None,
) -> torch.Tensor:
    """Apply each sample's drawn policy ops, in order, to a uint8 batch.

    Args:
        images: uint8 N x C x H x W.
        ops: For each sample, its ``(name, magnitude)`` pairs in the order drawn (a sample may
            have fewer than another: its missing steps are ``Identity``).
        interpolation: torchvision's ``InterpolationMode`` for the geometric ops.
        fill: The geometric ops' fill (a number or one per channel; ``None``: zeros).

    Raises:
        ValueError: Not a uint8 batch, a count of op lists other than N, or an unknown op.
    """
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ValueError(
            f"the policy ops take an N x C x H x W uint8 batch; got shape {tuple(images.shape)} "
            f"and dtype {images.dtype}"
        )
    if len(ops) != images.shape[0]:
        raise ValueError(f"got op lists for {len(ops)} samples and a batch of {images.shape[0]}")
    if isinstance(fill, (int, float)):
        fill = [float(fill)] * images.shape[1]
    elif fill is not None:
        fill = [float(f) for f in fill]
    steps = max((len(sample) for sample in ops), default=0)
    for step in range(steps):
        chosen = [tuple(s[step]) if step < len(s) else ("Identity", 0.0) for s in ops]
        images = _one_step(images, chosen, interpolation, fill)  # type: ignore[arg-type]
    return images


# ColorJitter's adjustments, by torchvision's index (its fn_idx), and this module's op for each
JITTER = ("brightness", "contrast", "saturation", "hue")
_JITTER_OPS = {"brightness": "Brightness", "contrast": "Contrast", "saturation": "Color"}


def apply_jitter(images: torch.Tensor, steps: Ops) -> torch.Tensor:
    """Apply each sample's ColorJitter adjustments, in its own order, to a uint8 batch.

    Args:
        images: uint8 N x C x H x W.
        steps: For each sample, its ``(adjustment, factor)`` pairs in order (an adjustment in
            :data:`JITTER`; the factor as torchvision's ``adjust_*`` takes it).

    Raises:
        ValueError: Not a uint8 batch, a count other than N, or an unknown adjustment.
    """
    if images.dtype != torch.uint8 or images.ndim != 4 or len(steps) != images.shape[0]:
        raise ValueError(
            f"apply_jitter takes an N x C x H x W uint8 batch and N step lists; got shape "
            f"{tuple(images.shape)}, dtype {images.dtype} and {len(steps)} lists"
        )
    from torchvision.transforms import functional as F

    for step in range(max((len(s) for s in steps), default=0)):
        groups: dict[str, list[int]] = defaultdict(list)
        for i, sample in enumerate(steps):
            if step < len(sample):
                if sample[step][0] not in JITTER:
                    raise ValueError(f"{sample[step][0]!r} is not valid; valid: {JITTER}")
                groups[sample[step][0]].append(i)
        out = images.clone()
        for name, rows in groups.items():
            index = torch.tensor(rows, device=images.device)
            factors = [float(steps[i][step][1]) for i in rows]
            if name == "hue":  # one torchvision call per sample: each has its own hue
                for k, i in enumerate(rows):
                    out[i] = F.adjust_hue(images[i], factors[k])
            else:
                out[index] = _enhanced(_JITTER_OPS[name], images[index], factors)
        images = out
    return images
