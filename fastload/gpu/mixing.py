"""torchvision v2's ``MixUp``, ``CutMix`` and a ``RandomChoice`` of them, with v2's draws.

v2's ops mix a whole batch with one draw: ``MixUp`` one lambda, ``CutMix`` one box, and
``RandomChoice`` which of them. The reference train script calls them in its collate function,
in the worker, after the samples' own draws. The classes here split that in two:
:meth:`make_params` makes exactly v2's calls, in v2's order, from torch's stream (so made in
the worker where v2 would make them, every later draw stays the same), and
:meth:`apply_params` / :meth:`mix_labels` apply them, later and anywhere (a CUDA device).
For the same draws the results are v2's, bit for bit: the same float operations on the same
values. Made with ``inplace=True`` (what the loader does: the batch is its own), they mix in
the batch given; on the CPU image by image from the last, so that no batch-sized copy is made
(v2's two copies of a float batch cost more than the rest of the batch stage).

(``fastload.gpu.MixUp`` and ``CutMix`` are fastload's own: one lambda per sample; the ``V2``
in these names says whose draws they make.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["CutMixV2", "MixUpV2", "RandomChoice", "mixing_of"]


class _Mix:
    """What v2's ``MixUp`` and ``CutMix`` share: alpha, the classes, one-hot labels."""

    mixes_labels = True

    def __init__(
        self, *, alpha: float = 1.0, num_classes: int | None = None, inplace: bool = False
    ) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
            raise ValueError(f"alpha={alpha!r} must be a positive number")
        if num_classes is not None and (isinstance(num_classes, bool) or num_classes < 1):
            raise ValueError(f"num_classes={num_classes!r} must be a positive int or None")
        self.alpha, self.num_classes, self.inplace = float(alpha), num_classes, inplace
        # v2 samples lambda from this very distribution, shaped (1,): the same stream use
        self.beta = torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha]))

    @classmethod
    def of(cls, torchvision_op: Any, *, inplace: bool = False) -> _Mix:
        """This op with a v2 op's ``alpha`` and ``num_classes``."""
        return cls(
            alpha=torchvision_op.alpha, num_classes=torchvision_op.num_classes, inplace=inplace
        )

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n, _, h, w = images.shape
        params = self.make_params(n, h, w)
        return self.apply_params(images, params), self.mix_labels(labels, params)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        raise NotImplementedError

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def mix_labels(self, labels: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        """v2's soft labels: one-hot (index labels), as float, mixed with the previous
        sample's by the drawn lambda."""
        if labels.ndim not in (1, 2):
            raise ValueError(
                f"labels of shape {tuple(labels.shape)}: {type(self).__name__} takes (N,) class "
                "indices or (N, num_classes) probabilities"
            )
        if labels.ndim == 1:
            if self.num_classes is None:
                raise ValueError("num_classes must be given for class-index labels")
            labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        lam = params["lam"]
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    def __repr__(self) -> str:
        name = f"fastload.gpu.mixing.{type(self).__name__}"
        return f"{name}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUpV2(_Mix):
    """v2's ``MixUp``: each image blended with the previous one by one lambda for the batch."""

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        return {"lam": float(self.beta.sample(()))}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        lam = params["lam"]
        if not self.inplace:
            return images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        if images.device.type == "cpu":
            return _mix_image_by_image(images, lam)
        return _mix_whole(images, lam)


class CutMixV2(_Mix):
    """v2's ``CutMix``: one box of the previous image pasted into each; lambda becomes the
    share of the image left."""

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        lam = float(self.beta.sample(()))
        r_x, r_y = torch.randint(width, size=(1,)), torch.randint(height, size=(1,))
        r = 0.5 * math.sqrt(1.0 - lam)
        half_w, half_h = int(r * width), int(r * height)
        x1, y1 = int(torch.clamp(r_x - half_w, min=0)), int(torch.clamp(r_y - half_h, min=0))
        x2 = int(torch.clamp(r_x + half_w, max=width))
        y2 = int(torch.clamp(r_y + half_h, max=height))
        kept = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return {"box": (x1, y1, x2, y2), "lam": kept}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        x1, y1, x2, y2 = params["box"]
        out = images if self.inplace else images.clone()
        box = out[..., y1:y2, x1:x2]
        box.copy_(box.roll(1, 0))  # the roll copies the box alone
        return out


def _mix_whole(images: torch.Tensor, lam: float) -> torch.Tensor:
    """v2's mix in ``images`` with one copy (the roll): a few launches on a device."""
    rolled = images.roll(1, 0).mul_(1.0 - lam)
    return images.mul_(lam).add_(rolled)  # v2's products, summed the other way: it commutes


def _mix_image_by_image(images: torch.Tensor, lam: float) -> torch.Tensor:
    """v2's ``images.roll(1, 0) * (1 - lam) + images * lam`` in ``images``, image by image from
    the last, each reading its predecessor before that is mixed (the first reads a copy of the
    last): one image of scratch instead of two copies of the batch, the same roundings."""
    n = images.shape[0]
    last, scratch = images[n - 1].clone(), torch.empty_like(images[0])
    for i in range(n - 1, -1, -1):
        torch.mul(images[i - 1] if i else last, 1.0 - lam, out=scratch)
        images[i].mul_(lam).add_(scratch)
    return images


class RandomChoice:
    """v2's ``RandomChoice`` of mixing ops: which one drawn per batch (``torch.multinomial``
    over ``p``), then its own draws.

    Args:
        transforms: The ops (:class:`MixUpV2`, :class:`CutMixV2`).
        p: Their weights (normalised; equal when ``None``).
    """

    mixes_labels = True

    def __init__(self, transforms: Sequence[_Mix], p: Sequence[float] | None = None) -> None:
        if not transforms:
            raise ValueError("RandomChoice needs at least one op")
        weights = [1.0] * len(transforms) if p is None else [float(x) for x in p]
        if len(weights) != len(transforms):
            raise ValueError(f"p has {len(weights)} weights for {len(transforms)} ops")
        total = sum(weights)
        self.transforms, self.p = list(transforms), [w / total for w in weights]

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n, _, h, w = images.shape
        params = self.make_params(n, h, w)
        return self.apply_params(images, params), self.mix_labels(labels, params)

    def make_params(self, n: int, height: int, width: int) -> dict[str, Any]:
        index = int(torch.multinomial(torch.tensor(self.p), 1))
        return {"index": index, "params": self.transforms[index].make_params(n, height, width)}

    def apply_params(self, images: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return self.transforms[params["index"]].apply_params(images, params["params"])

    def mix_labels(self, labels: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        return self.transforms[params["index"]].mix_labels(labels, params["params"])

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"fastload.gpu.mixing.RandomChoice([{inner}], p={self.p})"


def mixing_of(op: Any, *, inplace: bool = False) -> MixUpV2 | CutMixV2 | RandomChoice | None:
    """The op here that is torchvision v2's ``op`` (its ``MixUp``, ``CutMix``, or a
    ``RandomChoice`` of them, with the default ``labels_getter``, by exact class); else
    ``None``. ``inplace``: it mixes in the batch it is given."""
    import torchvision.transforms.v2 as v2

    kinds: dict[type, type[_Mix]] = {v2.MixUp: MixUpV2, v2.CutMix: CutMixV2}
    if type(op) is v2.RandomChoice:
        inner = [mixing_of(t, inplace=inplace) for t in op.transforms]
        if not inner or any(t is None or isinstance(t, RandomChoice) for t in inner):
            return None
        choice = RandomChoice(inner)  # type: ignore[arg-type]
        choice.p = list(op.p)  # v2's own normalised weights, not normalised again
        return choice
    kind = kinds.get(type(op))
    if kind is None or not _default_labels(op):
        return None
    return kind.of(op, inplace=inplace)  # type: ignore[return-value]


def _default_labels(op: Any) -> bool:
    """Whether a v2 mixing op finds the labels v2's default way (the second input)."""
    default = type(op)(num_classes=2)
    return getattr(op, "_labels_getter", None) is getattr(default, "_labels_getter", ())
