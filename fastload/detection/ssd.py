"""The SSD preset's other ops, planned: ``RandomZoomOut`` as a view reaching past the image
(the canvas of the fill is never made: only the part a later crop keeps is drawn), and
``RandomPhotometricDistort``, drawn where v2 draws it (first) and applied to the whole decoded
image by torchvision's own op, before the geometry is rendered from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastload.pixels.resampling import View
from fastload.sampling import drawing
from fastload.transforms import Transform

__all__ = ["PhotometricFirst", "RandomZoomOut"]


class RandomZoomOut(Transform):
    """Put the image on a canvas ``side_range`` times its size, at a drawn place, with
    probability ``p``: torchvision v2's op, same draws (the coin, the side, the corner).

    Args:
        image_fill: What the image's canvas holds (one value per channel).
        mask_fill: What masks hold there.
        side_range: The canvas's side, as a multiple of the image's.
        p: The probability of zooming out.
    """

    def __init__(
        self,
        *,
        image_fill: Sequence[float] = (0.0, 0.0, 0.0),
        mask_fill: int = 0,
        side_range: Sequence[float] = (1.0, 4.0),
        p: float = 0.5,
    ) -> None:
        self.image_fill, self.mask_fill = tuple(image_fill), mask_fill
        self.side_range, self.p = tuple(side_range), p

    def make_params(self, view: View) -> tuple[int, int, int, int] | None:
        """(top, left, canvas height, canvas width), or ``None``: no zoom."""
        generator = drawing.generator()
        if torch.rand(1, generator=generator) >= self.p:
            return None
        low, high = self.side_range
        r = low + torch.rand(1, generator=generator) * (high - low)
        width, height = int(view.width * r), int(view.height * r)
        r = torch.rand(2, generator=generator)
        left, top = int((width - view.width) * r[0]), int((height - view.height) * r[1])
        return top, left, height, width

    def apply_params(self, view: View, params: tuple[int, int, int, int] | None) -> View:
        if params is None:
            return view
        top, left, height, width = params
        return view.crop(-top, -left, height, width)


class PhotometricFirst(Transform):
    """torchvision v2's ``RandomPhotometricDistort`` at the head of a pipeline: planned first,
    so that its draws come before the geometry's (as v2 makes them), and applied by
    torchvision itself to the whole decoded image (a PIL image, as torchvision's dataset gives
    it) before the geometry is rendered from it. It moves nothing.

    Args:
        op: The user's ``RandomPhotometricDistort``.
    """

    needs_pixels = True  # the image is decoded whole and changed before the geometry

    def __init__(self, op: Any) -> None:
        self.op = op

    def make_params(self, view: View) -> dict[str, Any]:
        """v2's draws for a 3-channel image (all they read of the image is its channel count)."""
        return self.op.make_params([torch.empty(3, 1, 1, dtype=torch.uint8)])

    def apply_params(self, view: View, params: dict[str, Any]) -> View:
        return view

    def apply_pixels(self, image: Any, params: dict[str, Any]) -> Any:
        """The drawn ops on ``image`` (a PIL image), by torchvision (whose ``transform`` draws
        nothing: every draw is in ``make_params``)."""
        return self.op.transform(image, params)

    def __repr__(self) -> str:
        return repr(self.op)
