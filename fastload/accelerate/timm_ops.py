"""timm's ops whose meaning is torchvision's, each with its translator, and its conversions of a
PIL image (none when timm is not installed)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from fastload import transforms as ft
from fastload.accelerate.torchvision_ops import maybe_to_tensor, to_tensor
from fastload.accelerate.walk import NotAccelerated, Walk, interpolation

__all__ = ["TimmRandomResizedCrop", "conversions", "translators"]


class TimmRandomResizedCrop(ft.RandomResizedCrop):
    """timm's ``RandomResizedCropAndInterpolation``: the crop drawn by timm's own
    ``get_params`` (from Python's ``random``, as timm draws it), then torchvision's resized
    crop, as timm applies it."""

    def __init__(self, op: Any, interpolation: str) -> None:
        super().__init__(tuple(op.size), op.scale, op.ratio, interpolation=interpolation)
        self.draw = type(op).get_params
        self.drawn_from = (op.scale, op.ratio)  # timm's values as given, for its own arithmetic

    def params(self, height: int, width: int) -> tuple[int, int, int, int]:
        # get_params reads only the image's size: an empty tensor of that size holds no pixels
        top, left, h, w = self.draw(torch.empty(0, height, width), *self.drawn_from)
        return int(top), int(left), int(h), int(w)


def _random_resized_crop(walk: Walk, op: Any) -> None:
    if isinstance(op.interpolation, (tuple, list)):
        raise NotAccelerated(
            repr(op),
            "interpolation='random' picks bilinear or bicubic per image; fastload resamples "
            "a whole pipeline one way",
        )
    walk.geometry(op, TimmRandomResizedCrop(op, interpolation(op)), resizes=True)


def translators() -> dict[type, Callable[[Walk, Any], None]]:
    """timm's ops, each with its translator.

    ``ToNumpy`` makes a C x H x W uint8 array, which torch's default collate turns into the
    uint8 batch ``PILToTensor`` gives. ``RandomResizedCropAndInterpolation`` draws with timm's
    own code, from Python's ``random`` (which torch's workers seed as they seed torch's).
    """
    try:
        from timm.data import transforms as timm
    except ImportError:
        return {}
    return {
        timm.RandomResizedCropAndInterpolation: _random_resized_crop,
        timm.MaybeToTensor: functools.partial(maybe_to_tensor, dtype=None),
        timm.MaybePILToTensor: functools.partial(maybe_to_tensor, dtype=torch.uint8),
        timm.ToNumpy: functools.partial(to_tensor, dtype=torch.uint8),
    }


def conversions() -> dict[type, str]:
    """timm's conversions of a PIL image, by class, with the form they give."""
    try:
        from timm.data import transforms as timm
    except ImportError:
        return {}
    return {timm.MaybePILToTensor: "uint8", timm.MaybeToTensor: "float"}
