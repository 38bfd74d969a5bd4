"""torchvision's augmentation policies as batch ops, with torchvision's draws per sample.

``TrivialAugmentWide``, ``RandAugment``, ``AutoAugment`` and ``AugMix`` take the same arguments as
torchvision's classes of the same names. :meth:`make_params` draws, sample after sample, what
torchvision's op draws for one image: the same calls, in the same order, from torch's stream
(or the op's ``generator``). So drawing one sample at a time where torchvision would (in a
worker, between that sample's crop and the next one's) leaves every other draw unchanged; the
parameters then go with the batch, and :meth:`apply_params` applies them to the whole uint8
batch (:mod:`fastload.gpu.policy_ops`). ``RandomErasing`` does the same for torchvision's
``RandomErasing``, on float batches.

The magnitude tables are torchvision's own, read from a torchvision op of the same settings
(``_augmentation_space``), so that they follow the installed torchvision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastload import compat
from fastload.gpu import policy_ops
from fastload.gpu.transforms import BatchTransform

__all__ = [
    "AugMix",
    "AutoAugment",
    "PerImageColorJitter",
    "PerImageRandomErasing",
    "Policy",
    "RandAugment",
    "TrivialAugmentWide",
    "interpolation_mode",
]


def interpolation_mode(interpolation: Any) -> Any:
    """torchvision's ``InterpolationMode`` for a mode or its name (one-line error otherwise)."""
    from torchvision.transforms import InterpolationMode

    if isinstance(interpolation, InterpolationMode):
        return interpolation
    valid = [m.value for m in InterpolationMode]
    if interpolation not in valid:
        raise ValueError(f"interpolation={interpolation!r} is not valid; valid: {valid}")
    return InterpolationMode(interpolation)


class Policy(BatchTransform):
    """Base of the policies: per-sample draws (:meth:`draw`), one batched application.

    Args:
        torchvision_op: The torchvision op whose settings and tables this one uses.
        generator: The CPU generator the draws come from; torch's default when ``None``.
    """

    channels = (1, 3)

    def __init__(self, torchvision_op: Any, *, generator: torch.Generator | None = None) -> None:
        super().__init__(generator=generator)
        self.torchvision_op = torchvision_op

    @classmethod
    def of(cls, torchvision_op: Any) -> Policy:
        """This op with the settings of a torchvision op of the same class (its ``fill``,
        ``interpolation``, magnitudes and, for ``AutoAugment``, its policy)."""
        made = cls.__new__(cls)
        Policy.__init__(made, torchvision_op)
        return made

    def randint(self, high: int) -> int:
        """One draw in ``[0, high)``, as torchvision draws it (``torch.randint(high, (1,))``)."""
        return int(torch.randint(high, (1,), generator=self.generator).item())

    def space(self, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        """torchvision's magnitudes per op name for an image of this size, and whether each
        op's sign is drawn."""
        raise NotImplementedError

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        """One sample's ops and magnitudes, drawn as torchvision draws them for one image."""
        raise NotImplementedError

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        return {"ops": [self.draw(height, width) for _ in range(n)]}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        op = self.torchvision_op
        return policy_ops.apply_ops(
            images, params["ops"], interpolation=interpolation_mode(op.interpolation), fill=op.fill
        )

    def signed(self, magnitude: float, signed: bool) -> float:
        """The magnitude, negated on a draw of 1 when its op is signed (torchvision's)."""
        if signed and torch.randint(2, (1,), generator=self.generator):
            return -magnitude
        return magnitude

    def __repr__(self) -> str:
        return f"fastload.gpu.{self.torchvision_op!r}"


class TrivialAugmentWide(Policy):
    """torchvision's ``TrivialAugmentWide``: one op per sample, its magnitude drawn too."""

    def __init__(
        self,
        num_magnitude_bins: int = 31,
        interpolation: Any = "nearest",
        fill: Sequence[float] | float | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision.transforms import autoaugment

        op = autoaugment.TrivialAugmentWide(
            num_magnitude_bins, interpolation_mode(interpolation), fill
        )
        super().__init__(op, generator=generator)

    def space(self, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        return compat.augmentation_space(
            self.torchvision_op, self.torchvision_op.num_magnitude_bins
        )

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        space = self.space(height, width)
        name = list(space)[self.randint(len(space))]
        magnitudes, signed = space[name]
        magnitude = 0.0
        if magnitudes.ndim > 0:
            index = torch.randint(len(magnitudes), (1,), dtype=torch.long, generator=self.generator)
            magnitude = float(magnitudes[index].item())
        return [(name, self.signed(magnitude, signed))]


class RandAugment(Policy):
    """torchvision's ``RandAugment``: ``num_ops`` ops per sample at a fixed magnitude."""

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: Any = "nearest",
        fill: Sequence[float] | float | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision.transforms import autoaugment

        op = autoaugment.RandAugment(
            num_ops, magnitude, num_magnitude_bins, interpolation_mode(interpolation), fill
        )
        super().__init__(op, generator=generator)

    def space(self, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        op = self.torchvision_op
        return compat.augmentation_space(op, op.num_magnitude_bins, (height, width))

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        op, space = self.torchvision_op, self.space(height, width)
        drawn = []
        for _ in range(op.num_ops):
            name = list(space)[self.randint(len(space))]
            magnitudes, signed = space[name]
            magnitude = float(magnitudes[op.magnitude].item()) if magnitudes.ndim > 0 else 0.0
            drawn.append((name, self.signed(magnitude, signed)))
        return drawn


class AutoAugment(Policy):
    """torchvision's ``AutoAugment`` (``policy``: ``"imagenet"``, ``"cifar10"``, ``"svhn"``
    or an ``AutoAugmentPolicy``): one sub-policy per sample, each of its two ops applied with
    its probability."""

    def __init__(
        self,
        policy: Any = "imagenet",
        interpolation: Any = "nearest",
        fill: Sequence[float] | float | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision.transforms import autoaugment

        valid = [p.value for p in autoaugment.AutoAugmentPolicy]
        if not isinstance(policy, autoaugment.AutoAugmentPolicy) and policy not in valid:
            raise ValueError(f"policy={policy!r} is not valid; valid: {valid}")
        op = autoaugment.AutoAugment(
            autoaugment.AutoAugmentPolicy(policy), interpolation_mode(interpolation), fill
        )
        super().__init__(op, generator=generator)

    def space(self, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        return compat.augmentation_space(self.torchvision_op, 10, (height, width))

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        policies = self.torchvision_op.policies
        chosen = self.randint(len(policies))
        probs = torch.rand((2,), generator=self.generator)
        signs = torch.randint(2, (2,), generator=self.generator)
        space, drawn = self.space(height, width), []
        for i, (name, p, magnitude_id) in enumerate(policies[chosen]):
            if probs[i] <= p:
                magnitudes, signed = space[name]
                magnitude = (
                    float(magnitudes[magnitude_id].item()) if magnitude_id is not None else 0.0
                )
                drawn.append((name, -magnitude if signed and signs[i] == 0 else magnitude))
        return drawn


class AugMix(Policy):
    """torchvision's ``AugMix``: per sample, ``mixture_width`` chains of policy ops, mixed
    with the image by Dirichlet weights. torchvision runs it on tensors even for a PIL image,
    so this is its result exactly, for the same draws."""

    def __init__(
        self,
        severity: int = 3,
        mixture_width: int = 3,
        chain_depth: int = -1,
        alpha: float = 1.0,
        all_ops: bool = True,
        interpolation: Any = "bilinear",
        fill: Sequence[float] | float | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision.transforms import autoaugment

        if generator is not None:
            raise ValueError("generator must be None: AugMix's Dirichlet draws use torch's stream")
        op = autoaugment.AugMix(
            severity,
            mixture_width,
            chain_depth,
            alpha,
            all_ops,
            interpolation_mode(interpolation),
            fill,
        )
        super().__init__(op)

    def space(self, height: int, width: int) -> dict[str, tuple[torch.Tensor, bool]]:
        op = self.torchvision_op
        return compat.augmentation_space(op, compat.parameter_max(op), (height, width))

    def draw(self, height: int, width: int) -> dict[str, Any]:  # type: ignore[override]
        """One sample's mixing weights (the image's, then each chain's) and chains."""
        op, space = self.torchvision_op, self.space(height, width)
        m = compat.sample_dirichlet(op, torch.tensor([op.alpha, op.alpha]).expand(1, -1))
        chains_weights = compat.sample_dirichlet(
            op, torch.tensor([op.alpha] * op.mixture_width).expand(1, -1)
        ) * m[:, 1].view([1, -1])
        chains = []
        for _ in range(op.mixture_width):
            depth = op.chain_depth
            if depth <= 0:
                depth = int(torch.randint(low=1, high=4, size=(1,)).item())
            chains.append([self.chain_op(space, height, width) for _ in range(depth)])
        return {"image": m[0, 0], "chains": chains_weights[0], "ops": chains}

    def chain_op(self, space: Any, height: int, width: int) -> tuple[str, float]:
        """One op of a chain and its magnitude (v1's draws; v2's draw them otherwise)."""
        name = list(space)[self.randint(len(space))]
        magnitudes, signed = space[name]
        magnitude = 0.0
        if magnitudes.ndim > 0:
            index = torch.randint(self.torchvision_op.severity, (1,), dtype=torch.long)
            magnitude = float(magnitudes[index].item())
        return name, self.signed(magnitude, signed)

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        op, drawn = self.torchvision_op, params["ops"]
        shape = (-1, 1, 1, 1)
        mix = torch.stack([d["image"] for d in drawn]).to(images.device).view(shape) * images
        weights = torch.stack([d["chains"] for d in drawn]).to(images.device)
        for i in range(op.mixture_width):
            chain = [d["ops"][i] for d in drawn]
            aug = policy_ops.apply_ops(
                images, chain, interpolation=interpolation_mode(op.interpolation), fill=op.fill
            )
            mix.add_(weights[:, i].view(shape) * aug)
        return mix.to(dtype=images.dtype)


class PerImageColorJitter(Policy):
    """torchvision's ``ColorJitter`` with its per-image draws: the order of the four
    adjustments and their factors drawn per sample (``fastload.gpu.ColorJitter`` draws the
    order once per batch instead), applied on uint8 batches."""

    def __init__(
        self,
        brightness: Any = 0,
        contrast: Any = 0,
        saturation: Any = 0,
        hue: Any = 0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision import transforms as v1

        if generator is not None:
            raise ValueError(
                "generator must be None: PerImageColorJitter draws from torch's stream"
            )
        super().__init__(v1.ColorJitter(brightness, contrast, saturation, hue))

    def draw(self, height: int, width: int) -> list[tuple[str, float]]:
        op = self.torchvision_op
        order, *factors = type(op).get_params(op.brightness, op.contrast, op.saturation, op.hue)
        return [
            (policy_ops.JITTER[k], factors[k]) for k in order.tolist() if factors[k] is not None
        ]

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return policy_ops.apply_jitter(images, params["ops"])


class PerImageRandomErasing(BatchTransform):
    """torchvision's ``RandomErasing`` with its per-image draws (``fastload.gpu.RandomErasing``
    draws a batch at a time instead): in each sample, with probability ``p``, a rectangle set
    to ``value`` (a number, one per channel, or ``"random"``: normal noise, drawn per sample).

    Args:
        p: Probability of erasing a sample.
        scale: Range of the erased area as a fraction of the image.
        ratio: Range of the rectangle's aspect ratio.
        value: The fill (in the images' units).
        generator: Only ``None``: torchvision's draws come from torch's stream.
    """

    channels = (1, 3)
    draws_channels = True  # its draw takes (channels, height, width)

    def __init__(
        self,
        p: float = 0.5,
        scale: tuple[float, float] = (0.02, 0.33),
        ratio: tuple[float, float] = (0.3, 3.3),
        value: float | str | Sequence[float] = 0.0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        from torchvision import transforms as v1

        if generator is not None:
            raise ValueError(
                "generator must be None: torchvision's RandomErasing draws from torch's stream"
            )
        super().__init__()
        self.torchvision_op = v1.RandomErasing(p, scale, ratio, value)
        self.inplace = False

    @classmethod
    def of(cls, torchvision_op: Any, *, inplace: bool = False) -> PerImageRandomErasing:
        """This op with the settings of a torchvision ``RandomErasing``; ``inplace``: erase in
        the batch given (a batch that nobody else holds: a copy of 64 float images costs more
        than the erasing)."""
        made = cls.__new__(cls)
        BatchTransform.__init__(made)
        made.torchvision_op, made.inplace = torchvision_op, inplace
        return made

    def draw(self, channels: int, height: int, width: int) -> tuple[int, int, int, int, Any] | None:
        """One sample's rectangle (top, left, height, width, value), or ``None`` (not erased):
        torchvision's draws for one image."""
        op = self.torchvision_op
        if torch.rand(1) >= op.p:
            return None
        value = op.value
        if isinstance(value, (int, float)):
            value = [float(value)]
        elif isinstance(value, str):
            value = None
        elif isinstance(value, (list, tuple)):
            value = [float(v) for v in value]
        shape = torch.empty(()).expand(channels, height, width)  # its size, no pixels
        top, left, h, w, fill = op.get_params(shape, scale=op.scale, ratio=op.ratio, value=value)
        if fill is shape:  # ten misses: torchvision erases with the image itself, a no-op
            return None
        return int(top), int(left), int(h), int(w), fill

    def make_params(self, n: int, height: int, width: int, channels: int = 3) -> dict[str, Any]:
        return {"boxes": [self.draw(channels, height, width) for _ in range(n)]}

    def apply(self, images: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        return self.apply_params(images, self.make_params(n, h, w, channels=c))

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        if all(box is None for box in params["boxes"]):
            return images
        out = images if self.inplace else images.clone()
        for i, box in enumerate(params["boxes"]):
            if box is not None:
                top, left, h, w, value = box
                out[i, :, top : top + h, left : left + w] = value.to(out.device, out.dtype)
        return out

    def __repr__(self) -> str:
        return f"fastload.gpu.{self.torchvision_op!r}"
