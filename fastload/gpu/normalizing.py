"""uint8 batches normalized into float32 in one compiled pass (``normalizing.c``; OpenCV's
planes where it was not built), the factors and shifts it writes with (which the region
decoder's resize writes with too), and the float32 batch memory it writes into: kept memory a
worker or thread has, not fresh pages a batch."""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import cv2
import torch
from torch.utils.data import default_collate, get_worker_info

from fastload.memory import buffers, shared_buffers
from fastload.memory.stacked import Normalizing

__all__ = [
    "NORMALIZE_KERNEL",
    "float_batch",
    "normalize_planes",
    "normalize_terms",
    "normalizing_of",
]

NORMALIZE_KERNEL = "fastload.gpu._normalizing"  # compiled from gpu/normalizing.c


def float_batch(shape: torch.Size) -> torch.Tensor:
    """An uninitialised float32 batch; inside a DataLoader worker, in shared memory (from the
    worker's :class:`fastload.memory.shared_buffers.WorkerRing` when it has a free slot); in a
    thread worker, from its :class:`fastload.memory.buffers.BatchRing`.

    A worker's batch goes to the main process through shared memory: a batch made there
    saves copying 4 bytes per value into it afterwards (10% of a worker's time on the train
    recipe, measured). torch's ``default_collate`` makes its batches there with
    ``UntypedStorage._new_shared``; this takes the same storage without stacking anything
    into it (a pass over the batch that cost ~10 ms of 46 for 64 x 3 x 224 x 224, with the
    normalize), and falls back to ``default_collate`` of a template where torch lacks it.

    Within :func:`fastload.memory.buffers.channels_last` a 4-D batch is made in channels-last memory
    (the same memory, taken as N x H x W x C).
    """
    if len(shape) == 4 and buffers.in_channels_last():
        n, c, h, w = shape
        return _kept_batch(torch.Size((n, h, w, c))).permute(0, 3, 1, 2)
    return _kept_batch(shape)


def _kept_batch(shape: torch.Size) -> torch.Tensor:
    """A contiguous uninitialised float32 batch in kept memory (see :func:`float_batch`)."""
    if get_worker_info() is None or len(shape) == 0 or shape[0] == 0:
        ring = buffers.current()  # a thread worker's: memory the consumer has let go of
        if ring is None:
            return torch.empty(shape, dtype=torch.float32)
        return ring.take(shape, torch.float32)
    kept = shared_buffers.take(shape, torch.float32)  # memory the main process let go of
    if kept is not None:
        return kept
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is not None:
        storage: torch.UntypedStorage = new_shared(math.prod(shape) * 4)
        return torch.empty(0, dtype=torch.float32).set_(storage).view(shape)
    template = torch.empty(shape[1:], dtype=torch.float32)
    return default_collate([template] * shape[0])


def _normalize_kernel() -> Any:
    """fastload's compiled normalize kernel, or ``None`` where it was not built (no C
    compiler at install: ``fastload info`` says so)."""
    try:
        return importlib.import_module(NORMALIZE_KERNEL)
    except ImportError:
        return None


def normalize_planes(
    images: torch.Tensor,
    factors: Sequence[float],
    shifts: Sequence[float],
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x * factor + shift`` per channel plane of a CPU batch, into a new float32 batch
    (:func:`float_batch`), or into ``out`` (float32, the batch's shape, contiguous or
    channels-last memory).

    A contiguous uint8 batch goes through fastload's compiled kernel (``gpu/normalizing.c``):
    one call for the batch, each value read once and written once, half the time of OpenCV's
    ``addWeighted`` (15 against 31 us an image at 224, one core). Without the kernel built,
    and for float32 batches, ``addWeighted`` converts, scales and shifts each plane in one
    vectorised pass (about 3 ms for 64 x 3 x 224 x 224 uint8 on one core, against 14 ms for
    torch's multiply then add over each plane); a batch it cannot view plane by plane (not
    contiguous, empty, a dtype OpenCV lacks) takes torch's way. The kernel also writes a
    channels-last batch (:func:`fastload.memory.buffers.channels_last`) pixel by pixel, in the same
    pass; without it such a batch takes torch's way.
    """
    if out is None:
        out = float_batch(images.shape)
    interleaved = not out.is_contiguous()  # channels-last memory (buffers.channels_last)
    planes = images.is_contiguous() and images.numel() > 0
    kernel = _normalize_kernel() if planes and images.dtype == torch.uint8 else None
    if kernel is not None:
        written = out.permute(0, 2, 3, 1) if interleaved else out  # C-contiguous either way
        size = images[0, 0].numel()
        kernel.planes(images.numpy(), written.numpy(), size, factors, shifts, interleaved)
        return out
    if planes and not interleaved and images.dtype in (torch.uint8, torch.float32):
        source, target = images.numpy(), out.numpy()
        for n in range(images.shape[0]):
            for ch, (factor, shift) in enumerate(zip(factors, shifts, strict=True)):
                plane = source[n, ch]
                cv2.addWeighted(
                    plane, factor, plane, 0.0, shift, dst=target[n, ch], dtype=cv2.CV_32F
                )
        return out
    for ch, (factor, shift) in enumerate(zip(factors, shifts, strict=True)):
        plane = out[:, ch]
        torch.mul(images[:, ch], factor, out=plane)
        plane.add_(shift)
    return out


def normalize_terms(
    mean: Sequence[float], std: Sequence[float], *, channels: int, uint8: bool
) -> tuple[list[float], list[float]]:
    """The per-channel ``(factors, shifts)`` that :func:`normalize` writes a CPU batch's
    float32 values with, ``x * factor + shift``: ``1 / (scale * std)`` and ``-mean / std``
    computed in float32 (``scale`` 255 for uint8 images), one per channel (a single mean and
    std repeated)."""
    scale = 255.0 if uint8 else 1.0
    mean_t = torch.as_tensor(mean, dtype=torch.float32)
    std_t = torch.as_tensor(std, dtype=torch.float32)
    factors = (1.0 / (scale * std_t)).flatten().tolist()
    shifts = (-mean_t / std_t).flatten().tolist()
    return factors * (channels // len(factors)), shifts * (channels // len(shifts))


def normalizing_of(
    mean: Sequence[float], std: Sequence[float], *, channels_last: bool = False
) -> Normalizing:
    """:func:`normalize` of a uint8 batch of three channels as a decoder writes it into the
    batch (:class:`fastload.memory.stacked.Normalizing`): the same values, in planes or, with
    ``channels_last``, channels-last memory."""
    factors, shifts = normalize_terms(mean, std, channels=3, uint8=True)
    return Normalizing(
        (factors[0], factors[1], factors[2]), (shifts[0], shifts[1], shifts[2]), channels_last
    )
