"""Images with their segmentation masks (VOC's layout: one PNG per image whose pixels are the
classes), read fastload's way.

:class:`SegmentationList` gives what ``wrap_dataset_for_transforms_v2(VOCSegmentation(...))``
gives for the same files: the image, and its mask as a ``tv_tensors.Mask`` of the PNG's pixels
(1 x H x W, uint8 for a palette or grey PNG). Its leading fastload ops run fused with decoding
and the mask moves with them (padding shows ``mask_fill``, 255 in the references); the ops
after them get ``(image, mask)``.

:class:`TargetFirst` is the other way the segmentation references read a set: COCO's
instances merged into one such mask by their ``CocoDetectionToVOCSegmentation``, which runs as
written on the target, before the geometry moves the mask it made.
"""

from __future__ import annotations

import copy
import io
import os
from collections.abc import Callable, Sequence
from typing import Any

from fastload import backends
from fastload.backends.files import read_file
from fastload.datasets import OnError, check_options
from fastload.detection.joint import JointDataset
from fastload.detection.targets import Step, move_mask
from fastload.pixels.resampling import View
from fastload.transforms import Transform

__all__ = ["SegmentationList", "TargetFirst"]


class SegmentationList(JointDataset):
    """Images and their segmentation masks: ``ds[i]`` is ``(image, mask)`` as torchvision's
    v2-wrapped ``VOCSegmentation`` gives it.

    Args:
        images: The image files.
        masks: One mask file (PNG) per image, the same size as its image.
        transforms: What to do with each ``(image, mask)`` (see
            :class:`fastload.detection.joint.JointDataset`).
        backend: ``"auto"`` or a per-sample decoder of ``fastload.backends.names()``.
        on_error: ``"raise"`` or ``"skip"`` (see ``fastload.ImageList``); a mask that cannot be
            read, or whose size is not its image's, is an unusable sample like an unreadable
            image.
        max_pixels: Refuse images whose header claims more pixels.

    Raises:
        ValueError: A bad option, or not one mask per image.
    """

    def __init__(
        self,
        images: Sequence[str | os.PathLike[str]],
        masks: Sequence[str | os.PathLike[str]],
        transforms: Callable[..., Any] | None = None,
        *,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
    ) -> None:
        if len(images) != len(masks):
            raise ValueError(f"got {len(images)} images but {len(masks)} masks: one mask each")
        check_options(on_error, max_pixels)
        self.images = [os.fspath(p) for p in images]
        self.masks = [os.fspath(p) for p in masks]
        self._setup_joint(transforms, backend, on_error, max_pixels)

    def __len__(self) -> int:
        return len(self.images)

    def path(self, index: int) -> str:
        """The image file of sample ``index``."""
        return self.images[index]

    def read_sample(self, index: int) -> tuple[bytes, bytes]:
        """The bytes of sample ``index``'s image and of its mask."""
        return read_file(self.images[index]), read_file(self.masks[index])

    def subset(self, indices: Sequence[int]) -> SegmentationList:
        """A copy holding the samples at ``indices``, in that order (what
        ``torch.utils.data.Subset(self, indices)`` serves, as a dataset of its own)."""
        other = copy.copy(self)
        other.images = [self.images[int(i)] for i in indices]
        other.masks = [self.masks[int(i)] for i in indices]
        return other

    def make_target(self, index: int, extra: Any, canvas: tuple[int, int]) -> Any:
        """The mask as torchvision makes it from the PNG (``tv_tensors.Mask`` of its pixels).

        Raises:
            ValueError: Its size is not the image's.
        """
        from PIL import Image
        from torchvision import tv_tensors

        with Image.open(io.BytesIO(extra)) as png:
            mask = tv_tensors.Mask(png)
        if tuple(mask.shape[-2:]) != canvas:
            raise ValueError(
                f"its mask {self.masks[index]} is {mask.shape[-1]} x {mask.shape[-2]} (width x "
                f"height), the image {canvas[1]} x {canvas[0]}"
            )
        return mask

    def move(self, target: Any, moving: Sequence[Step]) -> Any:
        return move_mask(target, moving, fill=self.mask_fill)


class TargetFirst(Transform):
    """An op of the user's that makes a new target from the image's whole one and draws
    nothing (the segmentation references' ``CocoDetectionToVOCSegmentation``: COCO's instance
    masks merged into one class mask), at the head of a pipeline: run as written on the target
    before the geometry, which then moves what it made. It moves nothing itself.

    The op gets a stand-in for the image, of the image's size and no pixels: what such an op
    reads of the image is its size.

    Args:
        op: The user's op, called as ``op(image, target)``.
    """

    converts_target = True

    def __init__(self, op: Any) -> None:
        self.op = op

    def apply_params(self, view: View, params: None) -> View:
        return view

    def convert(self, target: Any, canvas: tuple[int, int]) -> Any:
        """The op's target for ``target`` on an image of (height, width) ``canvas``."""
        import torch
        from torchvision import tv_tensors

        image = tv_tensors.Image(torch.zeros((1, 1, 1), dtype=torch.uint8).expand(3, *canvas))
        return self.op(image, target)[1]

    def __repr__(self) -> str:
        return repr(self.op)
