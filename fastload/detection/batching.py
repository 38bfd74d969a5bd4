"""Batches of images of different sizes: one padded tensor, the sizes beside it.

torchvision's detection models take a list of images and pad them themselves (to a multiple
of 32); other models (DETR's family, segmentation at several scales) take one tensor and the
images' sizes. :class:`PaddedBatch` is a ``collate_fn`` that makes that tensor in the worker,
so that one copy moves the batch (to pinned memory, to the GPU) instead of one per image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PaddedBatch", "leaves_images", "pad_images"]


def pad_images(
    images: Sequence[torch.Tensor], *, multiple: int = 32, fill: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (each C x H x W, one dtype) in one tensor, padded right and bottom to the largest
    height and width rounded up to ``multiple``.

    Returns:
        The B x C x H x W tensor, and the B x 2 int64 (height, width) of each image.

    Raises:
        ValueError: No image, or images of different dtypes or channel counts.
    """
    if not images:
        raise ValueError("no image to pad into a batch")
    first = images[0]
    if any(i.dtype != first.dtype or i.ndim != 3 or i.shape[0] != first.shape[0] for i in images):
        kinds = sorted({f"{tuple(i.shape[:-2])} {i.dtype}" for i in images})
        raise ValueError(f"images of one dtype and channel count pad into a batch, got {kinds}")
    height = math.ceil(max(i.shape[-2] for i in images) / multiple) * multiple
    width = math.ceil(max(i.shape[-1] for i in images) / multiple) * multiple
    out = first.new_full((len(images), first.shape[0], height, width), fill)
    out = out.as_subclass(torch.Tensor)
    for slot, image in zip(out, images, strict=True):
        slot[:, : image.shape[-2], : image.shape[-1]] = image
    sizes = torch.tensor([tuple(i.shape[-2:]) for i in images], dtype=torch.int64)
    return out, sizes


class PaddedBatch:
    """A ``collate_fn`` for ``(image, target)`` samples of different sizes: ``(images, sizes,
    targets)``, the images padded into one tensor (see :func:`pad_images`), the targets a
    tuple as the detection references' ``collate_fn`` gives them.

    Args:
        multiple: The padded height and width are multiples of this (32: what detection
            backbones' strides need).
        fill: What the padding holds.

    Raises:
        ValueError: ``multiple`` is not a positive int.
    """

    def __init__(self, *, multiple: int = 32, fill: float = 0.0) -> None:
        if not isinstance(multiple, int) or multiple < 1:
            raise ValueError(f"multiple={multiple!r} must be a positive int")
        self.multiple, self.fill = multiple, fill

    def __call__(self, batch: Sequence[tuple[torch.Tensor, Any]]) -> tuple[Any, ...]:
        images, targets = zip(*batch, strict=True)
        padded, sizes = pad_images(images, multiple=self.multiple, fill=self.fill)
        return padded, sizes, tuple(targets)

    def __repr__(self) -> str:
        return f"PaddedBatch(multiple={self.multiple}, fill={self.fill})"


def leaves_images(collate_fn: Any) -> bool:
    """Whether ``collate_fn`` hands the samples' images on with their values as they are, so
    that a uint8 image made float after the collate is the float image collated: the
    references' ``tuple(zip(*batch))`` (proved from its code), or a :class:`PaddedBatch`
    padding with 0."""
    from fastload.callables.wrappers import zips_samples

    if type(collate_fn) is PaddedBatch:
        return collate_fn.fill == 0
    return zips_samples(collate_fn)
