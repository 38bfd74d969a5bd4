"""What a dataset of images with moving targets shares: one decode path that keeps the views
the fused ops planned, the target made from what was read with the image and moved through
those views, and the user's other ops called on ``(image, target)``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fastload._optional import MissingDependencyError
from fastload.callables.handover import HandOn
from fastload.datasets import ImageDataset, OnError
from fastload.detection.targets import Step, move_boxes, steps
from fastload.pixels.image import probe
from fastload.pixels.resampling import View, render, visible_part
from fastload.sampling.drawing import drawing, drawn, own_draws

__all__ = ["JointDataset", "Undrawn"]


class Undrawn:
    """One of the user's ``(image, target)`` ops known to draw no random number (a v2
    conversion, ``SanitizeBoundingBoxes``): in thread workers it runs outside the lock that
    keeps each sample's draws its own, in parallel with other samples.

    Args:
        op: The op, called as it is.
    """

    draws = False

    def __init__(self, op: Any) -> None:
        self.op = op

    def __call__(self, image: Any, target: Any) -> Any:
        return self.op(image, target)

    def __repr__(self) -> str:
        return repr(self.op)


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

    stacks_samples = False  # the target moves with each image: no batch decoded at once

    @property
    def mask_fill(self) -> int:
        """What a mask shows where a crop reaches past the image: the fused ops' own (one
        value per pipeline: the translation refuses two), else 0."""
        return next((op.mask_fill for op in self._split.fused if hasattr(op, "mask_fill")), 0)

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

    def make_target(self, index: int, extra: Any, canvas: tuple[int, int]) -> Any:
        """Sample ``index``'s target on its image's (height, width) ``canvas``, from what
        :meth:`read_sample` read beside the image."""
        raise NotImplementedError

    def move(self, target: Any, moving: Sequence[Step]) -> Any:
        """The target after what the fused ops did (:func:`fastload.detection.targets.steps`)."""
        raise NotImplementedError

    def subset(self, indices: Sequence[int]) -> Any:
        """A copy holding the samples at ``indices``, in that order (what
        ``torch.utils.data.Subset(self, indices)`` serves, as a dataset of its own)."""
        raise NotImplementedError

    def with_transform(self, transform: Callable[..., Any] | None) -> Any:
        other = super().with_transform(transform)
        other.transforms = transform
        return other

    def _load(self, index: int) -> Any:
        reading = True
        try:
            data, extra = self.read_sample(index)
            reading = False
            array, target, moving = self._decode_and_target(index, data, extra)
        except MissingDependencyError:
            raise  # an install to make, not an unusable sample
        except Exception as exc:
            return self._unusable(index, exc, reading=reading)
        if self._split.pil is not None:
            from PIL import Image

            joint: Any = self._split.pil  # called as transforms(image, target)
            with drawing():
                return joint(Image.fromarray(array), target)
        return self._after(torch.from_numpy(array).permute(2, 0, 1), self.move(target, moving))

    def _decode_and_target(
        self, index: int, data: bytes, extra: Any
    ) -> tuple[np.ndarray, Any, list[Step]]:
        """The decoded image, its target on the canvas and the steps that move it. An op that
        draws from the boxes (``RandomIoUCrop``) needs the target before decoding: its canvas
        is then the header's."""
        if not any(getattr(op, "needs_boxes", False) for op in self._split.fused):
            array, views, effects = self._decode_viewed(data, None)
            target = self._target(index, extra, (views[0].height, views[0].width))
            return array, target, steps(views, effects)
        info = probe(data)
        if info.width is None or info.height is None:
            raise ValueError(f"its {info.format} header gives no size, which RandomIoUCrop needs")
        target = self._target(index, extra, (info.height, info.width))
        array, views, effects = self._decode_viewed(data, target)
        if (views[0].height, views[0].width) != (info.height, info.width):
            raise ValueError(
                f"its header says {info.width} x {info.height}, its pixels are "
                f"{views[0].width} x {views[0].height}"
            )
        return array, target, steps(views, effects)

    def _target(self, index: int, extra: Any, canvas: tuple[int, int]) -> Any:
        """The target on the canvas, converted by the fused ops that make a new one (a
        ``TargetFirst``), before any geometry moves it."""
        target = self.make_target(index, extra, canvas)
        for op in self._split.fused:
            if getattr(op, "converts_target", False):
                converter: Any = op  # a TargetFirst (detection/segmentation.py)
                target = converter.convert(target, canvas)
        return target

    def _after(self, image: torch.Tensor, target: Any) -> Any:
        """The ops after the fused ones, on the image and its target."""
        from torchvision import tv_tensors

        sample: Any = image
        after = self._split.after
        if not after or not isinstance(after[0], HandOn):
            sample = tv_tensors.Image(image)
        start = 0
        while start < len(after):
            # a run of ops that may draw goes under one lock; the ops known to draw nothing
            # (a HandOn, an Undrawn) run outside it
            drawing_run = _draws(after[start])
            end = start + 1
            while end < len(after) and _draws(after[end]) == drawing_run:
                end += 1
            with drawing() if drawing_run else contextlib.nullcontext():
                for op in after[start:end]:
                    if isinstance(op, HandOn):
                        sample = op(sample)
                    else:
                        joint: Any = op  # the user's ops take (image, target)
                        sample, target = joint(sample, target)
            start = end
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
        planner = _Planner(fused, target)
        plan = drawn(planner.plan) if self._split.draws_python else own_draws(planner.plan)
        if not planner.whole:
            array = self._backend().decode(
                data,
                plan=plan,
                render=self._split.render,
                max_pixels=self.max_pixels,
                exif_orientation=False,
            )
            return array, planner.views, planner.effects
        # an op changes the pixels before the geometry, or pads with a colour: the image is
        # decoded whole, changed, then the planned view is rendered from it and filled
        array = self._backend().decode(
            data, plan=None, render={}, max_pixels=self.max_pixels, exif_orientation=False
        )
        assert plan is not None
        view = plan(View.full(array.shape[1], array.shape[0]))
        array = planner.change_pixels(array)  # drawn when planned: no lock
        out = planner.fill(render(array, view, **self._split.render), view, array.shape)
        # a view of the whole image may be the PIL image's own (read-only) buffer
        return out if out.flags.writeable else out.copy(), planner.views, planner.effects


def _draws(op: Any) -> bool:
    """Whether ``op`` may draw: anything but a ``HandOn`` or an op that says it does not."""
    return getattr(op, "draws", not isinstance(op, HandOn))


class _Planner:
    """Plans the fused ops on a view, op by op: the views, what each op does to the target
    besides, the boxes as each op sees them, and the drawn parameters of the ops that change
    pixels."""

    def __init__(self, fused: Sequence[Any], target: Any) -> None:
        self.fused = fused
        self.boxes = target.get("boxes") if isinstance(target, dict) else None
        self.views: list[View] = []
        self.effects: list[list[Step]] = []
        self.pixels: list[tuple[Any, Any]] = []
        fills = [getattr(op, "image_fill", ()) for op in fused]
        self.colour = next((f for f in reversed(fills) if any(v != 0 for v in f)), None)
        self.whole = self.colour is not None or any(
            getattr(op, "needs_pixels", False) for op in fused
        )

    def plan(self, view: View) -> View:
        self.views.append(view)
        for op in self.fused:
            if getattr(op, "needs_boxes", False):
                params = op.make_params_with(view, self.boxes)
                after, effect = op.apply_params(view, params), op.target_steps(params)
            else:
                params = op.make_params(view)
                after, effect = op.apply_params(view, params), []
            if getattr(op, "needs_pixels", False):
                self.pixels.append((op, params))
            if self.boxes is not None:  # the boxes as the next op sees them
                self.boxes = move_boxes(self.boxes, steps([view, after], [effect]))
            self.views.append(after)
            self.effects.append(effect)
            view = after
        return view

    def change_pixels(self, array: np.ndarray) -> np.ndarray:
        """The ops that change pixels, on the whole image (as a PIL image, as torchvision's
        dataset hands it), in their order. Their draws were made when planning: applying them
        draws nothing."""
        if not self.pixels:
            return array
        from PIL import Image

        image = Image.fromarray(array)
        for op, params in self.pixels:
            image = op.apply_pixels(image, params)
        return np.asarray(image)

    def fill(self, out: np.ndarray, view: View, shape: tuple[int, ...]) -> np.ndarray:
        """``out`` with the colour where the view reaches past the image (zeros until now)."""
        if self.colour is None:
            return out
        part = visible_part(view.box, view.width, view.height, shape[1], shape[0])
        filled = np.empty_like(out)
        filled[...] = np.asarray([int(v) for v in self.colour], dtype=out.dtype)
        if part is not None:
            (c0, c1), (r0, r1) = part.columns, part.rows
            if view.mirror:
                c0, c1 = view.width - c1, view.width - c0
            filled[r0:r1, c0:c1] = out[r0:r1, c0:c1]
        return filled
