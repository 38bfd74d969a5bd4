"""torchvision v2's ``RandomIoUCrop`` (the SSD presets' crop) as a planned op: its draws read
the boxes, which come from the annotations before the image is decoded, so that only the
crop is decoded.

Its draws are v2's, call for call: an option of ``sampler_options`` (``torch.randint``), then up
to ``trials`` tries of a size (``torch.rand(2)``) and a corner (``torch.rand(2)``), kept when
some box's centre lies inside the crop and one of those boxes overlaps it by the option's IoU;
an option of 1.0 or more leaves the image as it is. The boxes whose centres fall outside are
set to zero after the crop (degenerate, for ``SanitizeBoundingBoxes`` to remove), as v2 does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fastload import drawing
from fastload.resampling import View
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
        from torchvision.ops import box_iou
        from torchvision.transforms.v2 import functional as F

        if boxes is None:
            raise TypeError("RandomIoUCrop() requires bounding boxes in the sample")
        xyxy = F.convert_bounding_box_format(
            boxes.as_subclass(torch.Tensor), boxes.format, tv_tensors.BoundingBoxFormat.XYXY
        )
        cx, cy = 0.5 * (xyxy[..., 0] + xyxy[..., 2]), 0.5 * (xyxy[..., 1] + xyxy[..., 3])
        generator = drawing.generator()
        while True:
            pick = int(torch.randint(0, len(self.options), (1,), generator=generator))
            overlap = self.options[pick]
            if overlap >= 1.0:
                return None
            for _ in range(self.trials):
                crop = self._try(view, generator)
                if crop is None:
                    continue
                top, left, height, width = crop
                inside = (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)
                if not inside.any():
                    continue
                region = torch.tensor([[left, top, left + width, top + height]], dtype=xyxy.dtype)
                if box_iou(xyxy[inside], region).max() < overlap:
                    continue
                return IoUCrop(top, left, height, width, inside)

    def _try(self, view: View, generator: torch.Generator | None) -> tuple[int, ...] | None:
        """One try's size and corner (v2's two ``torch.rand(2)``), or ``None`` when v2 would
        try again."""
        r = self.min_scale + (self.max_scale - self.min_scale) * torch.rand(2, generator=generator)
        width, height = int(view.width * r[0]), int(view.height * r[1])
        if height == 0 or not self.min_aspect_ratio <= width / height <= self.max_aspect_ratio:
            return None
        r = torch.rand(2, generator=generator)
        left, top = int((view.width - width) * r[0]), int((view.height - height) * r[1])
        if width == 0 or height == 0:
            return None
        return top, left, height, width

    def apply_params(self, view: View, params: IoUCrop | None) -> View:
        if params is None:
            return view
        return view.crop(params.top, params.left, params.height, params.width)

    def target_steps(self, params: IoUCrop | None) -> list[tuple[str, tuple[Any, ...]]]:
        """What the crop does to the target besides moving it: the boxes whose centres were
        outside, zeroed."""
        return [] if params is None else [("zero", (params.inside,))]
