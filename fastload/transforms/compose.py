"""A chain of per-sample ops, and a dataset's transform cut where decoding can no longer take it
over (:func:`split_transform`): the leading planned ops run fused with decoding, the rest after."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastload.pixels.resampling import View, apply_planned
from fastload.transforms.base import Transform
from fastload.transforms.crops import (
    CenterCrop,
    PadIfSmaller,
    RandomCrop,
    RandomCropWithPadding,
    RandomResizedCrop,
)
from fastload.transforms.flips import RandomHorizontalFlip
from fastload.transforms.sizes import RandomResize, RandomShortestSize, Resize

__all__ = ["Compose", "TransformSplit", "split_transform"]


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
        :func:`fastload.sampling.drawing.generator` (Python's ``random``, say): fastload's own
        ops do not; another ``Transform`` subclass may."""
        return any(type(op) not in _TORCH_DRAWN for op in self.fused)


# fastload's planned ops, which draw from torch's stream only (as torchvision's do), through
# uniform and randint
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
