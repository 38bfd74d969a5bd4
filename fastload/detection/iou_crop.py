"""torchvision v2's ``RandomIoUCrop`` (the SSD presets' crop) as a planned op: its draws read
the boxes, which come from the annotations before the image is decoded, so that only the
crop is decoded.

Its draws are v2's, call for call: an option of ``sampler_options`` (``torch.randint``), then up
to ``trials`` tries of a size (``torch.rand(2)``) and a corner (``torch.rand(2)``), kept when
some box's centre lies inside the crop and one of those boxes overlaps it by the option's IoU;
an option of 1.0 or more leaves the image as it is. The boxes whose centres fall outside are
set to zero after the crop (degenerate, for ``SanitizeBoundingBoxes`` to remove), as v2 does.
v2 makes one try at a time (a few tensor ops each, some 50 tries an image); here one drawn IoU's
tries are drawn in one call and checked together, and the generator is left where v2's
calls leave it, so the draws and crops are v2's, number for number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastload.pixels.resampling import View
from fastload.sampling import drawing
from fastload.transforms import Transform

__all__ = ["IoUCrop", "RandomIoUCrop"]


@dataclass(frozen=True)
class IoUCrop:
    """A drawn crop: its box in the view's pixels and which boxes' centres lie inside it."""

    top: int
    left: int
    height: int
    width: int
    inside: torch.Tensor


class RandomIoUCrop(Transform):
    """Crop to a region that overlaps some box by a drawn IoU (torchvision v2's op).

    Args:
        min_scale: The smallest side of the crop, as a fraction of the image's.
        max_scale: The largest.
        min_aspect_ratio: The smallest width / height of the crop.
        max_aspect_ratio: The largest.
        sampler_options: The IoUs drawn from (1.0 or more: no crop).
        trials: Tries per drawn IoU.
    """

    needs_boxes = True  # its draws read the boxes (see fastload.detection.joint)

    def __init__(
        self,
        min_scale: float = 0.3,
        max_scale: float = 1.0,
        min_aspect_ratio: float = 0.5,
        max_aspect_ratio: float = 2.0,
        sampler_options: Sequence[float] | None = None,
        trials: int = 40,
    ) -> None:
        self.min_scale, self.max_scale = min_scale, max_scale
        self.min_aspect_ratio, self.max_aspect_ratio = min_aspect_ratio, max_aspect_ratio
        options = (
            [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else sampler_options
        )
        self.options, self.trials = list(options), trials

    def make_params(self, view: View) -> Any:
        raise TypeError("RandomIoUCrop draws from the boxes: plan it with make_params_with")

    def make_params_with(self, view: View, boxes: Any) -> IoUCrop | None:
        """Draw the crop for ``view`` and its boxes (``tv_tensors.BoundingBoxes`` on the view's
        canvas); ``None``: no crop.

        Raises:
            TypeError: No boxes, as v2 refuses a sample without them.
        """
        from torchvision import tv_tensors
        from torchvision.transforms.v2 import functional as F

        if boxes is None:
            raise TypeError("RandomIoUCrop() requires bounding boxes in the sample")
        xyxy = F.convert_bounding_box_format(
            boxes.as_subclass(torch.Tensor), boxes.format, tv_tensors.BoundingBoxFormat.XYXY
        )
        centres = 0.5 * (xyxy[..., 0] + xyxy[..., 2]), 0.5 * (xyxy[..., 1] + xyxy[..., 3])
        generator = drawing.generator()
        while True:
            pick = int(torch.randint(0, len(self.options), (1,), generator=generator))
            overlap = self.options[pick]
            if overlap >= 1.0:
                return None
            crop = self._search(view, xyxy, centres, overlap, generator)
            if crop is not None:
                return crop

    def _search(
        self,
        view: View,
        xyxy: torch.Tensor,
        centres: tuple[torch.Tensor, torch.Tensor],
        overlap: float,
        generator: torch.Generator | None,
    ) -> IoUCrop | None:
        """v2's ``trials`` tries for one drawn IoU, all at once: the most numbers the tries can
        draw are drawn in one call (the same numbers as v2's ``torch.rand(2)`` calls, in
        order), the tries are walked to find each one's crop, every crop is checked against
        the boxes together, and the generator is then left where v2's would be after the
        first crop it keeps (or after every try)."""
        source = generator if generator is not None else torch.default_generator
        state = source.get_state()
        drawn = torch.rand(4 * self.trials, generator=generator)
        scale = self.min_scale + (self.max_scale - self.min_scale) * drawn  # v2's r, float32
        crops, ends = self._walk(view, scale, drawn)
        kept = _first_kept(crops, xyxy, centres, overlap)
        source.set_state(state)
        torch.rand(ends[kept[0]] if kept else ends[-1], generator=generator)  # what v2 drew
        if kept is None:
            return None
        chosen, inside = kept
        return IoUCrop(*crops[chosen], inside)

    def _walk(
        self, view: View, scale: torch.Tensor, drawn: torch.Tensor
    ) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        """The tries over the drawn numbers, as v2 makes them (its float32 products): the crops
        worth checking (top, left, height, width), and where in the numbers each one's try
        ends (the last item: after all tries)."""
        widths, heights = (view.width * scale).tolist(), (view.height * scale).tolist()
        numbers = drawn.numpy()  # float32, for v2's float32 products of the corner
        crops: list[tuple[int, int, int, int]] = []
        ends: list[int] = []
        at = 0
        for _ in range(self.trials):
            width, height = int(widths[at]), int(heights[at + 1])
            at += 2
            if height == 0 or not self.min_aspect_ratio <= width / height <= self.max_aspect_ratio:
                continue
            left = int(np.float32(view.width - width) * numbers[at])
            top = int(np.float32(view.height - height) * numbers[at + 1])
            at += 2
            if width > 0:
                crops.append((top, left, height, width))
                ends.append(at)
        ends.append(at)
        return crops, ends

    def apply_params(self, view: View, params: IoUCrop | None) -> View:
        if params is None:
            return view
        return view.crop(params.top, params.left, params.height, params.width)

    def target_steps(self, params: IoUCrop | None) -> list[tuple[str, tuple[Any, ...]]]:
        """What the crop does to the target besides moving it: the boxes whose centres were
        outside, zeroed."""
        return [] if params is None else [("zero", (params.inside,))]


def _first_kept(
    crops: list[tuple[int, int, int, int]],
    xyxy: torch.Tensor,
    centres: tuple[torch.Tensor, torch.Tensor],
    overlap: float,
) -> tuple[int, torch.Tensor] | None:
    """The first of ``crops`` (top, left, height, width) that holds some box's centre and
    overlaps one of those boxes by ``overlap`` (IoU) or more, as v2 checks each try: its index
    and which boxes' centres it holds."""
    from torchvision.ops import box_iou

    if not crops or not len(xyxy):
        return None
    tops, lefts, heights, widths = torch.tensor(crops, dtype=torch.int64).T
    rights, bottoms = lefts + widths, tops + heights
    cx, cy = centres
    inside = (
        (lefts[:, None] < cx)
        & (cx < rights[:, None])
        & (tops[:, None] < cy)
        & (cy < bottoms[:, None])
    )
    regions = torch.stack([lefts, tops, rights, bottoms], dim=1).to(xyxy.dtype)
    ious = box_iou(xyxy, regions).T.masked_fill(~inside, -1.0)
    kept = torch.nonzero(inside.any(dim=1) & (ious.max(dim=1).values >= overlap))
    if not len(kept):
        return None
    chosen = int(kept[0])
    return chosen, inside[chosen]
