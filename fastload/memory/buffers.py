"""Batch memory kept from batch to batch where batches are made outside worker processes.

A normalized float32 batch of 64 x 3 x 224 x 224 is 38.5 MB, above the size from which glibc
maps fresh pages for each allocation: made anew, every batch faults in and zeroes all its
pages again, which took three times as long as the normalizing itself (24 ms against 6 ms for
that batch, one thread). Thread workers (``worker_type="thread"``), the loader's process
itself with no workers, and on Ray each worker's decoding tasks and the training process
copying the batches out of Ray's object store (``fastload.ray``), therefore take such
batches from a :class:`BatchRing`: a few buffers that are written again once nothing refers
to them any more (the consumer dropped the batch and every view of it). While the consumer
holds more batches than the ring has buffers, the extra ones are made anew, so a batch kept is
never overwritten. A batch of several large fields (two views, an image and its mask) takes a
buffer for each: the ring keeps as many buffers a batch as the most one batch took
(:func:`one_batch`).

A thread can also ask for its batches in channels-last memory (:func:`channels_last`), so that
the op making a batch writes it in the layout the loader delivers. A ring whose batches go to a
CUDA device can keep pinned buffers (``pinned=True``): a batch made in one is copied to the
device from where it was made, not pinned by copying it first.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

from fastload import compat
from fastload.system import keep_freed_heap

__all__ = [
    "BatchRing",
    "channels_last",
    "current",
    "in_channels_last",
    "one_batch",
    "use",
    "using",
]

_LOCAL = threading.local()
_use_count = compat.storage_use_count()  # None: nothing is reused


def _unreferenced(buffer: torch.Tensor) -> bool:
    """Whether only the ring refers to ``buffer``'s memory (its own tensor, and the storage
    object made to ask)."""
    if _use_count is None:
        return False
    return bool(_use_count(compat.storage_handle(buffer.untyped_storage())) <= 2)


class BatchRing:
    """Up to ``size`` batches' buffers, each handed out again once it is let go of.

    Args:
        size: Batches kept (those in flight, plus those the consumer holds): as many buffers,
            times the most buffers one batch took (:func:`one_batch`).
        pinned: Allocate the buffers in pinned (page-locked) memory, for copies to a CUDA
            device (needs CUDA). The consumer must hold a batch until its copy has finished:
            the ring writes a buffer again once nothing refers to it.
    """

    def __init__(self, size: int, *, pinned: bool = False) -> None:
        if size < 1:
            raise ValueError(f"size={size!r} must be at least 1")
        self.size = size
        self.pinned = pinned
        self._kept: list[torch.Tensor] = []
        self._lock = threading.Lock()
        self._per_batch = 1  # the most buffers one batch took
        self._taking = threading.local()  # the buffers the thread's batch took so far

    @contextlib.contextmanager
    def one_batch(self) -> Iterator[None]:
        """Within it, the calling thread's takes make one batch: the ring then keeps
        ``size`` times as many buffers as the most a batch took."""
        outer = getattr(self._taking, "count", None)
        self._taking.count = 0
        try:
            yield
        finally:
            count = self._taking.count
            self._taking.count = None if outer is None else outer + count
            with self._lock:
                self._per_batch = max(self._per_batch, count)

    def take(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` and ``dtype``: a free buffer of the ring, or
        a new one (kept while the ring has room)."""
        size = torch.Size(shape)
        if getattr(self._taking, "count", None) is not None:
            self._taking.count += 1
        with self._lock:
            for buffer in self._kept:
                if buffer.shape == size and buffer.dtype == dtype and _unreferenced(buffer):
                    return buffer.view(size)  # a view: it counts as a reference while held
            new = torch.empty(size, dtype=dtype, pin_memory=self.pinned)
            # never freed, so the samples it is made from would not be kept by malloc
            keep_freed_heap(new.nbytes)
            if len(self._kept) < self.size * self._per_batch:
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


@contextlib.contextmanager
def one_batch() -> Iterator[None]:
    """Within it, what the calling thread takes from its ring makes one batch
    (:meth:`BatchRing.one_batch`); nothing where it has no ring."""
    ring = current()
    if ring is None:
        yield
        return
    with ring.one_batch():
        yield


@contextlib.contextmanager
def using(ring: BatchRing | None) -> Iterator[None]:
    """Within it, the calling thread's batches come from ``ring``; the ring it had before is
    its own again after."""
    before = current()
    use(ring)
    try:
        yield
    finally:
        use(before)


@contextlib.contextmanager
def channels_last() -> Iterator[None]:
    """Within it, the calling thread's batch ops make their new image batches in channels-last
    memory (the loader's ``channels_last``): written so as they are made, rather than copied
    into that layout after."""
    before = in_channels_last()
    _LOCAL.channels_last = True
    try:
        yield
    finally:
        _LOCAL.channels_last = before


def in_channels_last() -> bool:
    """Whether the calling thread's new image batches are made in channels-last memory."""
    return bool(getattr(_LOCAL, "channels_last", False))
