"""The pipelines ``fastload bench`` measures: the stock torchvision dataset for each
(:func:`stock_dataset`; shards read as a torchvision user would, :class:`StockShards`) and
fastload's with the same geometry fused with decoding (:func:`fastload_dataset`)."""

from __future__ import annotations

import functools
import io
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from fastload.datasets import ImageFolder
from fastload.shards.dataset import ImageShards
from fastload.shards.sources import is_shards

__all__ = [
    "ACCELERATED",
    "MEAN",
    "PIPELINES",
    "STD",
    "STOCK",
    "THREADS",
    "StockShards",
    "count",
    "fastload_dataset",
    "stock_dataset",
]

PIPELINES = ("train", "val", "decode")
STOCK = "stock torchvision"
ACCELERATED = "torchvision, accelerated"
THREADS = " (threads)"  # a per-sample backend's row with worker_type="thread"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def count(batch: list[Any]) -> int:
    return len(batch)


def _allowed(excluded: frozenset[str], path: str) -> bool:
    from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension

    return has_file_allowed_extension(path, IMG_EXTENSIONS) and path not in excluded


def stock_dataset(root: Path, pipeline: str, *, exclude: Collection[str] = ()) -> Any:
    """The stock torchvision dataset for a pipeline: ImageFolder, its transforms, ToTensor,
    Normalize (float32 samples), without the files in ``exclude``; for shards, the same
    transforms on the members as PIL decodes them (:class:`StockShards`)."""
    import torchvision
    import torchvision.transforms as T

    transform = None
    if pipeline != "decode":
        ops = (
            [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
            if pipeline == "train"
            else [T.Resize(256), T.CenterCrop(224)]
        )
        transform = T.Compose([*ops, T.ToTensor(), T.Normalize(MEAN, STD)])
    if is_shards(root):
        return StockShards(root, transform)
    valid = functools.partial(_allowed, frozenset(exclude)) if exclude else None
    return torchvision.datasets.ImageFolder(root, transform=transform, is_valid_file=valid)


class StockShards(torch.utils.data.Dataset[Any]):
    """What a torchvision user writes to read shard members: PIL decodes each image's bytes
    (found through ``ImageShards``' index, so that reading costs both sides the same) and the
    torchvision transform runs on it.

    Args:
        source: The shards (see :class:`fastload.ImageShards`).
        transform: torchvision's transform, or ``None`` for the PIL image.
    """

    def __init__(self, source: Any, transform: Any) -> None:
        self.shards = ImageShards(source, on_error="skip", target=None)  # images, whatever else
        self.transform = transform

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, index: int) -> Any:
        from PIL import Image

        data, _ = self.shards.read_sample(index)
        image = Image.open(io.BytesIO(data)).convert("RGB")
        return image if self.transform is None else self.transform(image)


def fastload_dataset(
    root: Path, pipeline: str, backend: str, *, exclude: Collection[str] = ()
) -> Any:
    """fastload's dataset for a pipeline: the same geometry, fused with decoding (uint8),
    without the files in ``exclude``, skipping any other file it cannot decode."""
    from fastload import transforms as T

    transform: Any = {
        "train": T.RandomResizedCrop(224),
        "val": T.Compose([T.Resize(256), T.CenterCrop(224)]),
        "decode": None,
    }[pipeline]
    if is_shards(root):
        return ImageShards(root, transform, backend=backend, on_error="skip", target=None)
    valid = functools.partial(_allowed, frozenset(exclude)) if exclude else None
    return ImageFolder(
        root, transform=transform, backend=backend, on_error="skip", is_valid_file=valid
    )
