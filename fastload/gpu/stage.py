"""The batch stage of ``fastload.DataLoader``: batch ops applied to whole loader batches.

With a CUDA device it runs on the prefetcher's side stream right after the copy, so it overlaps
the training step; otherwise it runs inside the worker processes, after collating, in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import get_worker_info

from fastload.gpu.transforms import transforms_in

__all__ = ["BatchStage", "CollateThenStage"]


class BatchStage:
    """Applies batch ops to a batch that is an image tensor or a sequence (images, labels, ...).

    Args:
        transforms: Called as ``transforms(images, labels)`` when the batch has labels, else
            ``transforms(images)``; ``None`` applies nothing.
        channels_last: Return the images in channels-last memory format.
    """

    def __init__(self, transforms: Callable[..., Any] | None, *, channels_last: bool) -> None:
        if transforms is not None and not callable(transforms):
            raise ValueError(f"gpu_transforms={transforms!r} is not callable")
        self.transforms, self.channels_last = transforms, channels_last

    def __call__(self, batch: Any) -> Any:
        if isinstance(batch, torch.Tensor):
            images, labels, rest, kind = batch, None, (), None
        elif isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
            images = batch[0]
            has_labels = len(batch) > 1 and isinstance(batch[1], torch.Tensor)
            labels = batch[1] if has_labels else None
            rest, kind = tuple(batch[2 if has_labels else 1 :]), type(batch)
        else:
            raise TypeError(
                "gpu_transforms and channels_last need batches that are an image tensor or a "
                f"sequence (images, labels, ...); got {type(batch).__name__}"
            )
        if self.transforms is not None:
            if labels is None:
                images = self.transforms(images)
            else:
                images, labels = self.transforms(images, labels)
        if self.channels_last and images.ndim == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        if kind is None:
            return images
        items = (images, labels, *rest) if labels is not None else (images, *rest)
        if hasattr(batch, "_fields"):  # namedtuple
            return kind(*items)
        return kind(items)


class CollateThenStage:
    """A collate function followed by the batch stage, for the worker processes.

    A worker forked from the main process holds a copy of every explicit ``generator`` of the
    ops: left alone, all workers would draw the same parameters. On its first batch, each worker
    reseeds them from its own torch seed (distinct per worker, and derived from the loader's
    ``generator`` when one is given).
    """

    def __init__(self, collate_fn: Callable[[Any], Any], stage: BatchStage) -> None:
        self.collate_fn, self.stage = collate_fn, stage
        self._seeded_pid: int | None = None

    def __call__(self, samples: Any) -> Any:
        info = get_worker_info()
        if info is not None and self._seeded_pid != os.getpid():
            for k, op in enumerate(transforms_in(self.stage.transforms)):
                generator = getattr(op, "generator", None)
                if isinstance(generator, torch.Generator):
                    generator.manual_seed((info.seed + 7919 * k) % 2**63)
            self._seeded_pid = os.getpid()
        return self.stage(self.collate_fn(samples))
