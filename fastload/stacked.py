"""A batch's samples whose images were decoded straight into one batch tensor
(:class:`StackedSamples`), and the collate functions that take them so (:func:`takes_stacked`).

In a process of worker threads, every tensor a sample makes and frees hands the GIL over twice,
and each hand-over is a wait among the threads. A dataset that can decode a whole batch into
one tensor (``ImageDataset.load_stacked``) hands the collate function this instead of a list of
``(image, target)`` samples: a sequence that reads as that list (each image a view of its slot)
for code that iterates it, and that fastload's own collate links, which know it, turn into
``default_collate``'s batch without making a tensor a sample.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, overload

import torch
from torch.utils.data import default_collate

__all__ = ["StackedSamples", "takes_stacked", "welcome", "welcomed"]

_LOCAL = threading.local()  # whether stacked samples are welcome, per thread


class StackedSamples(Sequence[Any]):
    """A batch's samples, their images already stacked.

    Args:
        images: N x C x H x W: sample ``k``'s image is ``images[k]``.
        targets: The samples' targets, or ``None`` when a sample is its image alone.
        seed: The batch's seed (as ``fastload.sampling.SeededSamples`` carries it), if any.
    """

    def __init__(self, images: torch.Tensor, targets: list[Any] | None, seed: int | None) -> None:
        if targets is not None and len(targets) != len(images):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images, self.targets, self.seed = images, targets, seed

    def __len__(self) -> int:
        return len(self.images)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[k] for k in range(len(self))[index]]
        image = self.images[index]
        return image if self.targets is None else (image, self.targets[index])

    def collated(self) -> Any:
        """What torch's ``default_collate`` makes of these samples, without a tensor per
        sample: the images, or ``[images, targets collated]``."""
        if self.targets is None:
            return self.images
        return [self.images, default_collate(self.targets)]


def takes_stacked(collate_fn: Callable[[Any], Any]) -> bool:
    """Whether ``collate_fn`` (a link of fastload's collate chain) takes
    :class:`StackedSamples` as they are: every link between it and ``default_collate`` knows
    them."""
    return bool(getattr(collate_fn, "takes_stacked", False))


def welcome(flag: bool) -> None:
    """Say, in the thread that fetches a loader's batches through torch's fetcher (a worker
    process's, or the loader's own with no workers), whether the loader's collate chain takes
    :class:`StackedSamples` (:func:`takes_stacked`): a fastload dataset's ``__getitems__``
    then hands its batches stacked. Thread workers ask for them in their own fetcher."""
    _LOCAL.welcome = flag


def welcomed() -> bool:
    """Whether :func:`welcome` said so in the calling thread."""
    return bool(getattr(_LOCAL, "welcome", False))
