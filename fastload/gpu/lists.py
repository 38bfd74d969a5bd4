"""Batch ops on batches whose images differ in size: a list of images, as detection batches.

The detection references collate with ``tuple(zip(*batch))``: the images stay a tuple of
C x H x W tensors of different sizes, each image's boxes and masks in its target dict. The ops
that leave every pixel where it is (a float conversion, normalize, colour jitter, grayscale,
blur) run on such a
list image by image, each image a batch of one with draws of its own, in the list's order, on
whatever device the images are on. Ops that move pixels (flips, crops, the policies) would leave
the boxes and masks behind, and ops that mix labels need one label tensor: both are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fastload.gpu.transforms import (
    BatchTransform,
    ColorJitter,
    Compose,
    GaussianBlur,
    Normalize,
    RandomApply,
    RandomGrayscale,
    ToFloat,
)

__all__ = ["PIXELWISE", "apply_to_images", "is_image_list"]

PIXELWISE = (ToFloat, Normalize, ColorJitter, RandomGrayscale, GaussianBlur)  # pixels stay


def is_image_list(value: Any) -> bool:
    """Whether ``value`` is a non-empty list or tuple of image tensors (a detection batch's
    images)."""
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(image, torch.Tensor) for image in value)
    )


def apply_to_images(
    transforms: Callable[..., Any], images: list[torch.Tensor] | tuple[torch.Tensor, ...]
) -> Any:
    """Apply batch ops to each of ``images`` (each C x H x W), a batch of one at a time.

    A callable that is not made of fastload's batch ops gets the list as it is: what it does
    with it is its own (in a ``Compose``, the list as the ops before it left it).

    Returns:
        The images transformed (plain tensors), a list for a list, else a tuple.

    Raises:
        ValueError: An op moves pixels or mixes labels, or an image is not C x H x W.
    """
    if not isinstance(transforms, (BatchTransform, Compose)):
        return transforms(images)
    steps = transforms.transforms if isinstance(transforms, Compose) else []
    if not all(isinstance(step, (BatchTransform, Compose)) for step in steps):
        # a callable of the user's among the ops (after the float conversion fastload put
        # first, say): each step in turn, the user's getting the list
        for step in steps:
            images = apply_to_images(step, images)
        return images
    _check_pixelwise(transforms)
    out = []
    for k, image in enumerate(images):
        if image.ndim != 3:
            raise ValueError(
                f"batch_transforms on a list of images take C x H x W images; image {k} of "
                f"the batch has shape {tuple(image.shape)}"
            )
        out.append(transforms(image.as_subclass(torch.Tensor)[None])[0])
    return out if isinstance(images, list) else tuple(out)


def _check_pixelwise(op: Any) -> None:
    if isinstance(op, Compose):
        for child in op.transforms:
            _check_pixelwise(child)
    elif isinstance(op, RandomApply):
        _check_pixelwise(op.transform)
    elif not isinstance(op, PIXELWISE):
        valid = ", ".join(kind.__name__ for kind in PIXELWISE)
        raise ValueError(
            f"batch_transforms={op!r} cannot run on a batch of images of different sizes "
            "(a list, as detection batches are): it moves pixels or mixes labels, and the "
            f"targets would not follow; valid there: {valid} (in Compose or RandomApply)"
        )
