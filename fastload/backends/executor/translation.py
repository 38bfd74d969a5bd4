"""What an executor runs of a dataset's fused ops: the planned geometry, translated for the
executor's engine (:func:`translate`), and the options every executor takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fastload.pixels.resampling import View
from fastload.transforms import CenterCrop, TransformSplit

__all__ = ["ExecutorOptions", "Translation", "translate"]


@dataclass(frozen=True)
class Translation:
    """What an executor does per sample, read from a dataset's transform.

    Attributes:
        plan: Turns the whole image's view into the wanted one (``None``: keep the image).
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        antialias: Filter when shrinking.
        may_pad: The plan can reach outside the image (a ``CenterCrop`` larger than it).
    """

    plan: Callable[[View], View] | None
    interpolation: str = "bilinear"
    antialias: bool = True
    may_pad: bool = False


def translate(split: TransformSplit, backend: str) -> Translation:
    """Read a dataset's split transform as an executor's per-sample work.

    Args:
        split: The dataset's ``transform_split``.
        backend: The executor's name, for the error.

    Raises:
        ValueError: The transform holds an op an executor cannot run (named in the message,
            with what to do instead).
    """
    if split.pil is not None or split.after:
        op = split.pil if split.pil is not None else split.after[0]
        raise ValueError(
            f"the {backend} backend cannot run {op!r}: it runs fastload.transforms ops "
            "(RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Compose of them); "
            "run batch ops as batch_transforms=fastload.gpu..., or use a CPU backend for this "
            "transform"
        )
    drawn = next((op for op in split.fused if op.draws_interpolation), None)
    if drawn is not None:
        raise ValueError(
            f"the {backend} backend resamples a batch one way, and {drawn!r} draws the "
            "interpolation per image; give the op one interpolation, or use a CPU backend"
        )
    return Translation(
        split.plan,
        interpolation=split.render.get("interpolation", "bilinear"),
        antialias=split.render.get("antialias", True),
        may_pad=any(isinstance(op, CenterCrop) for op in split.fused),
    )


@dataclass(frozen=True)
class ExecutorOptions:
    """How an executor runs.

    Attributes:
        device: Where batches are delivered: the CPU, or a CUDA device.
        num_threads: The executor's CPU threads (``max(1, num_workers)``).
        prefetch: Batches decoded ahead of the one in use (``prefetch_factor``, default 2).
        batch_size: The largest batch expected (the loader's ``batch_size``); a larger one
            rebuilds the engine's graph.
        pin_memory: Deliver CPU batches in pinned memory (torch's ``pin_memory``).
    """

    device: torch.device
    num_threads: int
    prefetch: int = 2
    batch_size: int = 1
    pin_memory: bool = False
