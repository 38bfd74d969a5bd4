"""A batch's samples whose images were decoded straight into one batch tensor
(:class:`StackedSamples`), and the collate functions that take them so (:func:`takes_stacked`).

In a process of worker threads, every tensor a sample makes and frees hands the GIL over twice,
and each hand-over is a wait among the threads. A dataset that can decode a whole batch into
one tensor (``ImageDataset.load_stacked``) hands the collate function this instead of a list of
``(image, target)`` samples: a sequence that reads as that list (each image a view of its slot)
for code that iterates it, and that fastload's own collate links, which know it, turn into
``default_collate``'s batch without making a tensor a sample. Where a chain's batch ops start
with a normalize (:func:`normalizes_stacked`), the dataset may write the batch normalized as
it decodes it (:class:`Normalizing`: float32 at the cost of uint8), and the chain leaves that
op undone for such a batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch.utils.data import default_collate

__all__ = [
    "Normalizing",
    "StackedSamples",
    "normalizes_stacked",
    "takes_stacked",
    "welcome",
    "welcomed",
    "welcomed_normalizing",
]

_LOCAL = threading.local()  # whether stacked samples are welcome, per thread


@dataclass(frozen=True)
class Normalizing:
    """The normalize a collate chain runs first on a stacked batch's images, for the dataset
    to write as it decodes them (float32 at the cost of uint8): each uint8 value ``v`` of
    channel ``c`` becomes the float32 ``v * factors[c] + shifts[c]``, a multiply then an add
    in float32, as fastload's batch normalize computes it
    (:func:`fastload.gpu.functional.normalizing_of` makes one from a mean and a std).

    Args:
        factors: One per channel (three).
        shifts: One per channel (three).
        channels_last: The batch is made in channels-last memory (N x H x W x C), as the
            chain's ``channels_last`` makes its batches.
    """

    factors: tuple[float, float, float]
    shifts: tuple[float, float, float]
    channels_last: bool


class StackedSamples(Sequence[Any]):
    """A batch's samples, their images already stacked.

    Args:
        images: N x C x H x W: sample ``k``'s image is ``images[k]``.
        targets: The samples' targets, or ``None`` when a sample is its image alone.
        seed: The batch's seed (as ``fastload.sampling.SeededSamples`` carries it), if any.
        normalized: The normalize the images were written with (float32), which the collate
            chain asked for (:func:`normalizes_stacked`) and so does not run again; ``None``:
            they are the samples' own.
    """

    def __init__(
        self,
        images: torch.Tensor,
        targets: list[Any] | None,
        seed: int | None,
        *,
        normalized: Normalizing | None = None,
    ) -> None:
        if targets is not None and len(targets) != len(images):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images, self.targets, self.seed = images, targets, seed
        self.normalized = normalized

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
        sample: the images, or ``[images, targets collated]``, the targets collated as torch
        collates a field of tuples (its transposed column, a tuple: strings stay a tuple)."""
        if self.targets is None:
            return self.images
        # torch's typing says list; torch itself collates the transposed column, a tuple
        return [self.images, default_collate(tuple(self.targets))]  # type: ignore[arg-type]


def takes_stacked(collate_fn: Callable[[Any], Any]) -> bool:
    """Whether ``collate_fn`` (a link of fastload's collate chain) takes
    :class:`StackedSamples` as they are: every link between it and ``default_collate`` knows
    them."""
    return bool(getattr(collate_fn, "takes_stacked", False))


def normalizes_stacked(collate_fn: Callable[[Any], Any]) -> Normalizing | None:
    """The normalize ``collate_fn`` (a link of fastload's collate chain that
    :func:`takes_stacked`) runs first on a stacked batch's images, and leaves undone for
    :class:`StackedSamples` made ``normalized`` by it; ``None`` where it runs none first."""
    return getattr(collate_fn, "normalizes_stacked", None)


def welcome(flag: bool, normalizing: Normalizing | None = None) -> None:
    """Say, in the thread that fetches a loader's batches through torch's fetcher (a worker
    process's, or the loader's own with no workers), whether the loader's collate chain takes
    :class:`StackedSamples` (:func:`takes_stacked`), and the normalize it runs first on them
    (:func:`normalizes_stacked`): a fastload dataset's ``__getitems__`` then hands its batches
    stacked, and normalized where it can. Thread workers ask in their own fetcher."""
    _LOCAL.welcome, _LOCAL.normalizing = flag, normalizing


def welcomed() -> bool:
    """Whether :func:`welcome` said so in the calling thread."""
    return bool(getattr(_LOCAL, "welcome", False))


def welcomed_normalizing() -> Normalizing | None:
    """The normalize :func:`welcome` said the calling thread's chain runs first."""
    return getattr(_LOCAL, "normalizing", None) if welcomed() else None
