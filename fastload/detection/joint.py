"""What a dataset of images with moving targets shares: one decode path that keeps the views
the fused ops planned, the target made from what was read with the image and moved through
those views, and the user's other ops called on ``(image, target)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fastload import errors
from fastload.datasets import ImageDataset, OnError
from fastload.detection.targets import Step, move_boxes, steps
from fastload.drawing import drawing, drawn, own_draws
from fastload.handover import HandOn
from fastload.image import probe
from fastload.resampling import View
from fastload.skipping import Skipped

__all__ = ["JointDataset"]


class JointDataset(ImageDataset):
    """A fastload dataset whose samples are ``(image, target)`` and whose target moves with the
    image (boxes, masks).

    A subclass says where a sample's bytes are and what else it reads with them
    (:meth:`read_sample`), how its target is made on the image's canvas (:meth:`make_target`)
    and moved through the planned views (:meth:`move`). ``transforms`` is split as a dataset's
    ``transform`` is (``fastload.transforms.split_transform``): the leading fastload ops run
    fused with decoding, and the target moves with them; the callables after them get
    ``(image, target)`` (a ``HandOn`` the image alone); any other ``transforms`` gets the PIL
    image and the target, as torchvision's dataset hands them.
    """

    mask_fill = 0  # what a mask shows where a crop reaches past the image

    def _setup_joint(
        self,
        transforms: Callable[..., Any] | None,
        backend: str,
        on_error: OnError,
        max_pixels: int,
    ) -> None:
        # torchvision's loaders keep the stored pixels (no EXIF rotation): so do these
        self._setup(transforms, None, backend, on_error, max_pixels, exif_orientation=False)
        self.transforms = transforms
        fills = [op.mask_fill for op in self._split.fused if hasattr(op, "mask_fill")]
        self.mask_fill = fills[-1] if fills else 0

    def make_target(self, index: int, extra: Any, canvas: tuple[int, int]) -> Any:
        """Sample ``index``'s target on its image's (height, width) ``canvas``, from what
        :meth:`read_sample` read beside the image."""
        raise NotImplementedError

    def move(self, target: Any, moving: Sequence[Step]) -> Any:
        """The target after what the fused ops did (:func:`fastload.detection.targets.steps`)."""
        raise NotImplementedError

    def with_transform(self, transform: Callable[..., Any] | None) -> Any:
        other = super().with_transform(transform)
        other.transforms = transform
        fills = [op.mask_fill for op in other._split.fused if hasattr(op, "mask_fill")]
        other.mask_fill = fills[-1] if fills else 0
        return other

    def _load(self, index: int) -> Any:
        reading = True
        try:
            data, extra = self.read_sample(index)
            reading = False
            array, target, moving = self._decode_and_target(index, data, extra)
        except Exception as exc:
            path, why = self.path(index), errors.reason(exc)
            if self.on_error == "skip":
                self.bad_files[path] = why
                return Skipped(path, why)
            stage = errors.stage_of(exc, reading=reading)
            raise errors.unusable(path, why, stage=stage, backend=self.backend) from exc
        if self._split.pil is not None:
            from PIL import Image

            with drawing():
                return self._split.pil(Image.fromarray(array), target)
        return self._after(torch.from_numpy(array).permute(2, 0, 1), self.move(target, moving))

    def _decode_and_target(
        self, index: int, data: bytes, extra: Any
    ) -> tuple[np.ndarray, Any, list[Step]]:
        """The decoded image, its target on the canvas and the steps that move it. An op that
        draws from the boxes (``RandomIoUCrop``) needs the target before decoding: its canvas
        is then the header's."""
        if not any(getattr(op, "needs_boxes", False) for op in self._split.fused):
            array, views, effects = self._decode_viewed(data, None)
            target = self.make_target(index, extra, (views[0].height, views[0].width))
            return array, target, steps(views, effects)
        info = probe(data)
        if info.width is None or info.height is None:
            raise ValueError(f"its {info.format} header gives no size, which RandomIoUCrop needs")
        target = self.make_target(index, extra, (info.height, info.width))
        array, views, effects = self._decode_viewed(data, target)
        return array, target, steps(views, effects)

    def _after(self, image: torch.Tensor, target: Any) -> Any:
        """The ops after the fused ones, on the image and its target."""
        from torchvision import tv_tensors

        sample: Any = image
        if not self._split.after or not isinstance(self._split.after[0], HandOn):
            sample = tv_tensors.Image(image)
        with drawing():
            for op in self._split.after:
                if isinstance(op, HandOn):
                    sample = op(sample)
                else:
                    sample, target = op(sample, target)
        return sample, target

    def _decode_viewed(
        self, data: bytes, target: Any
    ) -> tuple[np.ndarray, list[View], list[list[Step]]]:
        """Decode with the fused ops: the views they planned (the canvas, then one per op), and
        what each op does to the target besides. ``target``: what ops that draw from the boxes
        draw from (``None`` when none does)."""
        fused = self._split.fused
        if not fused:
            array = self._backend().decode(
                data, plan=None, render={}, max_pixels=self.max_pixels, exif_orientation=False
            )
            return array, [View.full(array.shape[1], array.shape[0])], []
        views: list[View] = []
        effects: list[list[Step]] = []
        boxes = target.get("boxes") if isinstance(target, dict) else None

        def plan(view: View) -> View:
            nonlocal boxes
            views.append(view)
            for op in fused:
                if getattr(op, "needs_boxes", False):
                    params = op.make_params_with(view, boxes)
                    after, effect = op.apply_params(view, params), op.target_steps(params)
                else:
                    after, effect = op.plan(view), []
                if boxes is not None:  # the boxes as the next op sees them
                    boxes = move_boxes(boxes, steps([view, after], [effect]))
                views.append(after)
                effects.append(effect)
                view = after
            return view

        array = self._backend().decode(
            data,
            plan=drawn(plan) if self._split.draws_python else own_draws(plan),
            render=self._split.render,
            max_pixels=self.max_pixels,
            exif_orientation=False,
        )
        return array, views, effects
