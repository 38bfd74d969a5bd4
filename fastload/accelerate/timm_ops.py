"""timm's ops whose meaning is torchvision's, each with its translator, its conversions of a
PIL image (none when timm is not installed), and its folder dataset's files
(:func:`timm_folder`)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fastload import transforms as ft
from fastload.accelerate.torchvision_ops import maybe_to_tensor, to_tensor
from fastload.accelerate.walk import NotAccelerated, Walk, interpolation
from fastload.pixels.resampling import View

__all__ = ["TimmFolder", "TimmRandomResizedCrop", "conversions", "timm_folder", "translators"]


class TimmRandomResizedCrop(ft.RandomResizedCrop):
    """timm's ``RandomResizedCropAndInterpolation``: the crop drawn by timm's own
    ``get_params`` (from Python's ``random``, as timm draws it), then, with
    ``interpolation="random"``, bilinear or bicubic drawn for the image by ``random.choice``
    after the crop (as timm draws it), then torchvision's resized crop, as timm applies it."""

    def __init__(self, op: Any) -> None:
        names = _choices(op)
        super().__init__(
            tuple(op.size),
            op.scale,
            op.ratio,
            interpolation=names[0] if names else interpolation(op),
        )
        self.draw = type(op).get_params
        self.drawn_from = (op.scale, op.ratio)  # timm's values as given, for its own arithmetic
        self.choices = names  # drawn per image, from timm's list in its order
        self.draws_interpolation = names is not None

    def params(self, height: int, width: int) -> tuple[int, int, int, int]:
        # get_params reads only the image's size: an empty tensor of that size holds no pixels
        top, left, h, w = self.draw(torch.empty(0, height, width), *self.drawn_from)
        return int(top), int(left), int(h), int(w)

    def make_params(  # type: ignore[override]  # the crop, and the image's interpolation
        self, view: View
    ) -> tuple[tuple[int, int, int, int], str | None]:
        box = self.params(view.height, view.width)
        return box, (random.choice(self.choices) if self.choices else None)

    def apply_params(self, view: View, params: Any) -> View:
        box, drawn = params
        view = super().apply_params(view, box)
        return view if drawn is None else view.resampled(drawn)


@dataclass(frozen=True)
class _Mode:
    """One of timm's interpolation choices, as :func:`interpolation` reads an op's."""

    interpolation: Any


def _choices(op: Any) -> list[str] | None:
    """The names of the interpolations ``op`` draws from per image; ``None`` when it has one.

    Raises:
        NotAccelerated: A choice fastload does not resample with, naming ``op``.
    """
    if not isinstance(op.interpolation, (tuple, list)):
        return None
    try:
        return [interpolation(_Mode(mode)) for mode in op.interpolation]
    except NotAccelerated as why:
        raise NotAccelerated(repr(op), why.why) from None


def _random_resized_crop(walk: Walk, op: Any) -> None:
    walk.geometry(op, TimmRandomResizedCrop(op), resizes=True)


def translators() -> dict[type, Callable[[Walk, Any], None]]:
    """timm's ops, each with its translator.

    ``ToNumpy`` makes a C x H x W uint8 array, which torch's default collate turns into the
    uint8 batch ``PILToTensor`` gives. ``RandomResizedCropAndInterpolation`` draws with timm's
    own code, from Python's ``random`` (which torch's workers seed as they seed torch's), and
    with ``interpolation="random"`` its resampling for each image the same way.
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


@dataclass(frozen=True)
class TimmFolder:
    """What a timm ``ImageDataset`` over a folder reads: its files, labels and classes.

    Attributes:
        paths: The image files, in the reader's order.
        labels: Each file's class index.
        class_to_idx: The reader's class names and their indices.
    """

    paths: list[str]
    labels: list[int]
    class_to_idx: dict[str, int]


def timm_folder(dataset: Any) -> TimmFolder | None:
    """The files of a timm ``ImageDataset`` read by timm's folder reader (what
    ``timm.data.create_dataset("", root=...)`` and timm's ``train.py`` make); ``None`` for any
    other dataset.

    Raises:
        NotAccelerated: A timm dataset read another way than its ``__getitem__`` reads a
            folder's RGB images (its bytes, other image modes, extra features, a tar reader).
    """
    try:
        from timm.data import ImageDataset
        from timm.data.readers.reader_image_folder import ReaderImageFolder
    except ImportError:
        return None
    if not isinstance(dataset, ImageDataset):
        return None
    name = type(dataset).__name__
    if type(dataset).__getitem__ is not ImageDataset.__getitem__:
        raise NotAccelerated(name, "it overrides __getitem__")
    if type(dataset.reader) is not ReaderImageFolder:
        raise NotAccelerated(
            f"reader={type(dataset.reader).__name__}", "fastload reads timm's folder reader"
        )
    if dataset.load_bytes or dataset.input_img_mode != "RGB" or dataset.additional_features:
        raise NotAccelerated(name, "it yields bytes, another image mode than RGB or extra features")
    samples = dataset.reader.samples
    return TimmFolder(
        [path for path, _ in samples],
        [int(label) for _, label in samples],
        dict(dataset.reader.class_to_idx),
    )
