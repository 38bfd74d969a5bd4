"""torchvision v2's augmentation policies as batch ops, with v2's draws per sample.

v2's ``TrivialAugmentWide``, ``RandAugment``, ``AutoAugment`` and ``AugMix`` pick the same kind
of ops as v1's, but draw them otherwise: an op by ``torch.randint(n, ())`` over v2's own table,
a sign by ``torch.rand(()) <= 0.5``, AutoAugment's coins one op at a time, and Solarize's
magnitude as a share of the largest value. So each class here is its v1 counterpart of
:mod:`fastload.gpu.policies` with :meth:`draw` making v2's calls, in v2's order, from torch's
stream; what is drawn is written in v1's terms (Solarize's threshold in 0..255), and applied
to the uint8 batch the same way (:mod:`fastload.gpu.policy_ops`).

The tables are read from the v2 op itself (``_AUGMENTATION_SPACE``: per op a function of the
bin count and the image size, and whether its sign is drawn), so they follow the installed
torchvision. Made only with :meth:`of` from a v2 op (``fastload.accelerate`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fastload import compat
from fastload.gpu import policies

__all__ = ["AugMixV2", "AutoAugmentV2", "RandAugmentV2", "TrivialAugmentWideV2", "of"]

_Space = dict[str, tuple[Callable[[int, int, int], torch.Tensor | None], bool]]


def _pick(space: _Space) -> tuple[str, Callable[[int, int, int], torch.Tensor | None], bool]:
    """v2's ``_get_random_item``: one key of the table, by ``torch.randint(len, ())``."""
    keys = tuple(space)
    name = keys[int(torch.randint(len(keys), ()))]
    magnitudes, signed = space[name]
    return name, magnitudes, signed


def _signed(magnitude: float, signed: bool) -> float:
    if signed and torch.rand(()) <= 0.5:
        return -magnitude
    return magnitude


def _as_v1(name: str, magnitude: float) -> tuple[str, float]:
    """A v2 draw in v1's terms: v2's Solarize magnitude is a share of the uint8 maximum."""
    return (name, 255.0 * magnitude) if name == "Solarize" else (name, magnitude)


class _V2:
    """Made from a v2 op, whose settings the v1 classes' application reads alike."""

    @classmethod
    def of(cls, torchvision_op: Any) -> Any:
        made = cls.__new__(cls)
        policies.Policy.__init__(made, torchvision_op)  # type: ignore[arg-type]
        policies.interpolation_mode(torchvision_op.interpolation)  # a bad one is named now
        return made


class TrivialAugmentWideV2(_V2, policies.TrivialAugmentWide):
    """v2's ``TrivialAugmentWide``: one op per sample, a magnitude bin drawn for it."""

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        op = self.torchvision_op
        name, magnitudes_of, signed = _pick(compat.v2_augmentation_space(op))
        magnitudes = magnitudes_of(op.num_magnitude_bins, height, width)
        magnitude = 0.0
        if magnitudes is not None:
            magnitude = float(magnitudes[int(torch.randint(op.num_magnitude_bins, ()))])
            magnitude = _signed(magnitude, signed)
        return [_as_v1(name, magnitude)]


class RandAugmentV2(_V2, policies.RandAugment):
    """v2's ``RandAugment``: ``num_ops`` ops per sample at the fixed magnitude bin."""

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        op, drawn = self.torchvision_op, []
        for _ in range(op.num_ops):
            name, magnitudes_of, signed = _pick(compat.v2_augmentation_space(op))
            magnitudes = magnitudes_of(op.num_magnitude_bins, height, width)
            magnitude = 0.0
            if magnitudes is not None:
                magnitude = _signed(float(magnitudes[op.magnitude]), signed)
            drawn.append(_as_v1(name, magnitude))
        return drawn


class AutoAugmentV2(_V2, policies.AutoAugment):
    """v2's ``AutoAugment``: one sub-policy per sample, each op's coin (and then its sign)
    drawn as its turn comes."""

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        op, drawn = self.torchvision_op, []
        policies = compat.v2_policies(op)
        chosen = policies[int(torch.randint(len(policies), ()))]
        for name, probability, magnitude_id in chosen:
            if not torch.rand(()) <= probability:
                continue
            magnitudes_of, signed = compat.v2_augmentation_space(op)[name]
            magnitudes = magnitudes_of(10, height, width)
            magnitude = 0.0
            if magnitudes is not None:
                magnitude = _signed(float(magnitudes[magnitude_id]), signed)
            drawn.append(_as_v1(name, magnitude))
        return drawn


class AugMixV2(_V2, policies.AugMix):
    """v2's ``AugMix``: the mixing weights and chain depths as v1's; each chain op drawn
    v2's way."""

    def space(self, height: int, width: int) -> Any:
        op = self.torchvision_op
        return compat.v2_augmentation_space(op, partial=not op.all_ops)

    def chain_op(self, space: Any, height: int, width: int) -> tuple[str, float]:
        op = self.torchvision_op
        name, magnitudes_of, signed = _pick(space)
        magnitudes = magnitudes_of(compat.parameter_max(op), height, width)
        magnitude = 0.0
        if magnitudes is not None:
            magnitude = _signed(float(magnitudes[int(torch.randint(op.severity, ()))]), signed)
        return _as_v1(name, magnitude)


def of(torchvision_op: Any) -> policies.Policy:
    """The batch op for a v2 policy op (by exact class).

    Raises:
        ValueError: Not one of v2's four policies, or a ``fill`` per input type (a dict),
            which a uint8 batch has no use for.
    """
    import torchvision.transforms.v2 as v2

    kinds: dict[type, Any] = {
        v2.TrivialAugmentWide: TrivialAugmentWideV2,
        v2.RandAugment: RandAugmentV2,
        v2.AutoAugment: AutoAugmentV2,
        v2.AugMix: AugMixV2,
    }
    kind = kinds.get(type(torchvision_op))
    if kind is None:
        raise ValueError(
            f"{torchvision_op!r} is not one of v2's {', '.join(k.__name__ for k in kinds)}"
        )
    if isinstance(torchvision_op.fill, dict):
        raise ValueError(f"fill={torchvision_op.fill!r}: a fill per input type")
    return kind.of(torchvision_op)
