"""torchvision's ``RandomHorizontalFlip`` as a planned op: the flip is part of the view."""

from __future__ import annotations

from fastload.pixels.resampling import View
from fastload.transforms.base import Transform, uniform

__all__ = ["RandomHorizontalFlip"]


class RandomHorizontalFlip(Transform):
    """Mirror left-right with probability ``p`` (one ``torch.rand(1)`` draw, as torchvision)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p={p!r} must be within [0, 1]")
        self.p = p

    def make_params(self, view: View) -> bool:
        """Whether to mirror: one ``torch.rand(1)`` draw."""
        return uniform(0.0, 1.0) < self.p  # torch.rand(1) is uniform_(0, 1)

    def apply_params(self, view: View, params: bool) -> View:
        return view.mirrored() if params else view
