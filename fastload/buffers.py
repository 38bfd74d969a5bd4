"""Batch memory kept from batch to batch where batches are made in the loader's own process.

A normalized float32 batch of 64 x 3 x 224 x 224 is 38.5 MB, above the size from which glibc
maps fresh pages for each allocation: made anew, every batch faults in and zeroes all its
pages again, which took three times as long as the normalizing itself (24 ms against 6 ms for
that batch, one thread). Thread workers (``worker_type="thread"``), and the loader's process
itself with no workers, therefore take such batches from a :class:`BatchRing`: a few buffers
that are written again once nothing refers to them any more (the consumer dropped the batch
and every view of it). While the consumer holds more batches than the ring has buffers, the
extra ones are made anew, so a batch kept is never overwritten.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from fastload import compat

__all__ = ["BatchRing", "current", "use"]

_LOCAL = threading.local()
_use_count = compat.storage_use_count()  # None: nothing is reused


def _unreferenced(buffer: torch.Tensor) -> bool:
    """Whether only the ring refers to ``buffer``'s memory (its own tensor, and the storage
    object made to ask)."""
    if _use_count is None:
        return False
    return bool(_use_count(compat.storage_handle(buffer.untyped_storage())) <= 2)


class BatchRing:
    """Up to ``size`` batch buffers, each handed out again once it is let go of.

    Args:
        size: Buffers kept (the batches in flight, plus those the consumer holds).
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size={size!r} must be at least 1")
        self.size = size
        self._kept: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` and ``dtype``: a free buffer of the ring, or
        a new one (kept while the ring has room)."""
        size = torch.Size(shape)
        with self._lock:
            for buffer in self._kept:
                if buffer.shape == size and buffer.dtype == dtype and _unreferenced(buffer):
                    return buffer.view(size)  # a view: it counts as a reference while held
            new = torch.empty(size, dtype=dtype)
            if len(self._kept) < self.size:
                self._kept.append(new)
            else:
                self._replace(new)
            return new.view(size)

    def _replace(self, new: torch.Tensor) -> None:
        """Keep ``new`` in place of a free buffer of another shape or dtype, if one is."""
        for k, buffer in enumerate(self._kept):
            if _unreferenced(buffer) and (buffer.shape != new.shape or buffer.dtype != new.dtype):
                self._kept[k] = new
                return


def use(ring: BatchRing | None) -> None:
    """Make the calling thread's batches from ``ring`` (``None``: anew)."""
    _LOCAL.ring = ring


def current() -> BatchRing | None:
    """The calling thread's ring, if it has one."""
    return getattr(_LOCAL, "ring", None)
