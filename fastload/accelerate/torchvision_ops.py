"""torchvision's ops (v1 and v2) that ``accelerate`` runs, each with its translator, and the
conversions of a PIL image that :class:`fastload.callables.handover.HandOn` makes exactly."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from fastload import transforms as ft
from fastload.accelerate.walk import NotAccelerated, Walk, interpolation, name_of, need_tensor

__all__ = [
    "POLICY_ON_CPU",
    "RandomCropV2",
    "conversions",
    "maybe_to_tensor",
    "to_tensor",
    "translators",
]


class RandomCropV2(ft.RandomCrop):
    """torchvision v2's RandomCrop: it draws only along an axis the crop is shorter on."""

    def params(self, height: int, width: int) -> tuple[int, int]:
        ch, cw = self.size
        if height < ch or width < cw:
            return super().params(height, width)  # raises
        top = int(torch.randint(0, height - ch + 1, size=()).item()) if height > ch else 0
        left = int(torch.randint(0, width - cw + 1, size=()).item()) if width > cw else 0
        return top, left


def _random_resized_crop(walk: Walk, op: Any) -> None:
    fused = ft.RandomResizedCrop(
        tuple(op.size), op.scale, op.ratio, interpolation=interpolation(op)
    )
    walk.geometry(op, fused, resizes=True)


def _resize(walk: Walk, op: Any) -> None:
    if op.size is None:
        raise NotAccelerated(repr(op), "size=None (max_size alone)")
    fused = ft.Resize(op.size, interpolation(op), max_size=op.max_size)
    walk.geometry(op, fused, resizes=True)


def _center_crop(walk: Walk, op: Any) -> None:
    walk.geometry(op, ft.CenterCrop(tuple(op.size)))


def _random_crop(walk: Walk, op: Any, *, v2: bool) -> None:
    if op.padding is not None or op.pad_if_needed:
        raise NotAccelerated(repr(op), "padding (fastload crops without it)")
    walk.geometry(op, RandomCropV2(tuple(op.size)) if v2 else ft.RandomCrop(tuple(op.size)))


def _horizontal_flip(walk: Walk, op: Any) -> None:
    # a flip commutes with the per-pixel conversions, so it fuses wherever it stands; its one
    # draw keeps its place among the others
    walk.not_after_draws(op)
    walk.fused.append(ft.RandomHorizontalFlip(op.p))
    walk.fused_from.append(repr(op))


def to_tensor(walk: Walk, op: Any, *, dtype: torch.dtype | None) -> None:
    """``ToTensor`` (``dtype=None``: torch's default float dtype), ``PILToTensor``,
    ``ToImage``: each takes a PIL image."""
    if walk.tensor:
        raise NotAccelerated(repr(op), "it takes a PIL image and would get a tensor")
    walk.convert(op, torch.get_default_dtype() if dtype is None else dtype)


def maybe_to_tensor(walk: Walk, op: Any, *, dtype: torch.dtype | None) -> None:
    """A conversion that is torchvision's on a PIL image and passes a tensor on unchanged (timm's
    ``MaybeToTensor`` / ``MaybePILToTensor``, OpenCLIP's ``MaybeToTensor``)."""
    if walk.tensor:
        walk.batch_from.append(f"{op!r} (a tensor already: passed on)")
        return
    to_tensor(walk, op, dtype=dtype)


def _to_image(walk: Walk, op: Any) -> None:
    walk.convert(op, torch.uint8)


def _convert_dtype(walk: Walk, op: Any) -> None:
    need_tensor(walk, op)
    walk.convert(op, op.dtype)


def _to_dtype(walk: Walk, op: Any) -> None:
    need_tensor(walk, op)
    if not isinstance(op.dtype, torch.dtype):
        raise NotAccelerated(repr(op), "a dtype per input type")
    if op.dtype.is_floating_point and not op.scale:
        raise NotAccelerated(repr(op), "scale=False (values 0..255 as floats)")
    walk.convert(op, op.dtype)


def _normalize(walk: Walk, op: Any) -> None:
    if len(walk.drawn) > walk.before:
        raise NotAccelerated(repr(op), "Normalize after RandomErasing")
    if not walk.tensor or not walk.dtype.is_floating_point or walk.mean is not None:
        raise NotAccelerated(repr(op), "Normalize where it does not follow a float conversion")
    walk.mean, walk.std = tuple(op.mean), tuple(op.std)
    walk.batch_from.append(repr(op))


def _to_pure_tensor(walk: Walk, op: Any) -> None:
    if not walk.tensor:
        raise NotAccelerated(name_of(op), "not an op fastload can run with the same meaning")
    walk.batch_from.append(repr(op))


def _policy(walk: Walk, op: Any, *, ours: Any) -> None:
    """torchvision's policies (v1): drawn per sample, applied on the uint8 batch by a CUDA
    device; on the CPU they stay as written."""
    if not walk.policies:
        raise NotAccelerated(repr(op), POLICY_ON_CPU)
    walk.draw_later(op, ours.of(op), on_uint8=True)


def _policy_v2(walk: Walk, op: Any) -> None:
    """torchvision v2's policies: v2's draws (:mod:`fastload.gpu.policies_v2`), else as v1's."""
    if not walk.policies:
        raise NotAccelerated(repr(op), POLICY_ON_CPU)
    from fastload.gpu import policies_v2

    try:
        ours = policies_v2.of(op)
    except ValueError as exc:
        raise NotAccelerated(repr(op), str(exc)) from None
    walk.draw_later(op, ours, on_uint8=True)


def _color_jitter_v2(walk: Walk, op: Any) -> None:
    """v2's ``ColorJitter`` draws what v1's draws (the order, then each factor from
    ``uniform_``), from the same ranges."""
    import torchvision.transforms as v1

    from fastload.gpu import policies

    if not walk.policies:
        raise NotAccelerated(repr(op), POLICY_ON_CPU)
    ranges = [r if r is not None else 0 for r in (op.brightness, op.contrast, op.saturation)]
    same = v1.ColorJitter(*ranges, op.hue if op.hue is not None else 0)
    walk.draw_later(op, policies.PerImageColorJitter.of(same), on_uint8=True)


POLICY_ON_CPU = (
    "runs as written without a CUDA device: on the CPU Pillow's per-image ops are faster than "
    "the same ops on uint8 batches (benchmarks/peers/reference_recipes.py)"
)


def _random_erasing(walk: Walk, op: Any) -> None:
    from fastload.gpu.policies import PerImageRandomErasing

    # it follows the conversion: the batch it erases is the stage's own, so in place
    walk.draw_later(op, PerImageRandomErasing.of(op, inplace=True), on_uint8=False)


def _random_erasing_v2(walk: Walk, op: Any) -> None:
    """v2's ``RandomErasing`` draws what v1's draws, call for call (its coin, ten tries of
    area and log-ratio, the noise, the corner); it keeps ``value`` as a list, or ``None`` for
    ``"random"``, which v1 reads alike."""
    import torchvision.transforms as v1

    value = "random" if op.value is None else op.value
    _random_erasing(walk, v1.RandomErasing(op.p, op.scale, op.ratio, value))


def translators() -> dict[type, Callable[[Walk, Any], None]]:
    """torchvision's op classes (v1 and v2), each with its translator."""
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    from fastload.gpu import policies

    return {
        v1.TrivialAugmentWide: functools.partial(_policy, ours=policies.TrivialAugmentWide),
        v1.RandAugment: functools.partial(_policy, ours=policies.RandAugment),
        v1.AutoAugment: functools.partial(_policy, ours=policies.AutoAugment),
        v1.AugMix: functools.partial(_policy, ours=policies.AugMix),
        v1.ColorJitter: functools.partial(_policy, ours=policies.PerImageColorJitter),
        v2.TrivialAugmentWide: _policy_v2,
        v2.RandAugment: _policy_v2,
        v2.AutoAugment: _policy_v2,
        v2.AugMix: _policy_v2,
        v2.ColorJitter: _color_jitter_v2,
        v1.RandomErasing: _random_erasing,
        v2.RandomErasing: _random_erasing_v2,
        v1.RandomResizedCrop: _random_resized_crop,
        v2.RandomResizedCrop: _random_resized_crop,
        v1.Resize: _resize,
        v2.Resize: _resize,
        v1.CenterCrop: _center_crop,
        v2.CenterCrop: _center_crop,
        v1.RandomCrop: functools.partial(_random_crop, v2=False),
        v2.RandomCrop: functools.partial(_random_crop, v2=True),
        v1.RandomHorizontalFlip: _horizontal_flip,
        v2.RandomHorizontalFlip: _horizontal_flip,
        v1.ToTensor: functools.partial(to_tensor, dtype=None),
        v2.ToTensor: functools.partial(to_tensor, dtype=None),
        v1.PILToTensor: functools.partial(to_tensor, dtype=torch.uint8),
        v2.PILToTensor: functools.partial(to_tensor, dtype=torch.uint8),
        v2.ToImage: _to_image,
        v1.ConvertImageDtype: _convert_dtype,
        v2.ConvertImageDtype: _convert_dtype,
        v2.ToDtype: _to_dtype,
        v1.Normalize: _normalize,
        v2.Normalize: _normalize,
        v2.ToPureTensor: _to_pure_tensor,
    }


def conversions() -> dict[type, str]:
    """torchvision's conversions of a PIL image, by class, with the form they give (``"uint8"``,
    ``"float"``, ``"image"``)."""
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    return {
        v1.PILToTensor: "uint8",
        v2.PILToTensor: "uint8",
        v1.ToTensor: "float",
        v2.ToTensor: "float",
        v2.ToImage: "image",
    }
