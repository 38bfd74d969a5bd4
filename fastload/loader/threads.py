"""Thread workers (``worker_type="thread"``): torch's loader iterator, with the workers as
threads of the loader's process.

Each worker's job is what a torch worker process does for a batch: fetch the samples of one
batch of indices and collate them with the path's collate chain (which runs the batch ops), then
pin the batch when asked. Up to ``num_workers x prefetch_factor`` batches are in flight on a pool
of ``num_workers`` threads, handed out in the sampler's order. Nothing is pickled and nothing
goes through shared memory: a batch is made where it is used.

What keeps the batches those of the worker processes: the indices come from the same sampler,
each with its own seed (the plan refuses datasets that would draw from shared streams, see
:func:`fastload.loader.plan.thread_refusal`), and the loader's ``generator`` is drawn from as
torch's iterator draws from it. The decoders release the GIL while they decode; what holds it
(planning, Python transforms) is shared by the threads.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import torch.utils.data

from fastload.compat import BaseDataLoaderIter, DatasetKind, pin_memory
from fastload.memory import buffers
from fastload.memory.buffers import BatchRing
from fastload.memory.stacked import normalizes_stacked, takes_stacked
from fastload.sampling import drawing
from fastload.system import single_threaded_ops

__all__ = ["StackedFetcher", "ThreadWorkersIter"]


class ThreadWorkersIter(BaseDataLoaderIter):
    """torch's iterator protocol over batches made by ``num_workers`` threads.

    Args:
        loader: The path's own torch loader (map-style dataset, ``num_workers >= 1``).
    """

    def __init__(self, loader: torch.utils.data.dataloader.DataLoader) -> None:
        super().__init__(loader)
        self._fetcher: Any = DatasetKind.create_fetcher(
            self._dataset_kind,
            self._dataset,
            self._auto_collation,
            self._collate_fn,
            self._drop_last,
        )
        if (
            self._auto_collation
            and callable(getattr(self._dataset, "load_stacked", None))
            and takes_stacked(self._collate_fn)
        ):
            self._fetcher = StackedFetcher(self._dataset, self._collate_fn)
        self._in_flight = self._num_workers * (loader.prefetch_factor or 2)
        # the batches in flight, one being made per thread (and its uint8 batch, which batch
        # ops then make a float32 one of), and two the consumer holds
        self._ring = BatchRing(
            self._in_flight + 2 * self._num_workers + 2,
            pinned=getattr(loader, "pins_in_place", False),  # made where the copy reads them
        )
        self._pool = self._new_pool()
        self._pending: deque[Future[Any]] = deque()
        self._fill()

    def _new_pool(self) -> ThreadPoolExecutor:
        drawing.pool_started()
        self._open = True
        return ThreadPoolExecutor(
            self._num_workers,
            thread_name_prefix="fastload-worker",
            initializer=_start_worker,
            initargs=(self._ring,),
        )

    def _fill(self) -> None:
        while len(self._pending) < self._in_flight:
            try:
                with drawing.guard():  # the sampler's draws: not from a sample's streams
                    index = self._next_index()
            except StopIteration:
                return
            # the job holds what it needs, not the iterator, so that an iterator the consumer
            # dropped is collected (and stops its threads) at once, as torch's is
            pin = self._pin_memory_device if self._pin_memory else None
            self._pending.append(self._pool.submit(_make, self._fetcher, pin, index))

    def _next_data(self) -> Any:
        if not self._pending:
            self._shutdown()
            raise StopIteration
        future = self._pending.popleft()
        try:
            data = future.result(timeout=self._timeout or None)
        except FutureTimeout:
            self._shutdown(wait=False)  # a thread that does not come back is not waited for
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None
        except BaseException:
            self._shutdown()
            raise  # the worker's exception as it was raised: its own type and message
        self._fill()
        return data

    def _reset(
        self, loader: torch.utils.data.dataloader.DataLoader, first_iter: bool = False
    ) -> None:
        """The next epoch of a ``persistent_workers`` loader: a new pass, new threads."""
        super()._reset(loader, first_iter)
        self._shutdown()
        self._pool = self._new_pool()
        self._fill()

    def _shutdown(self, *, wait: bool = True) -> None:
        """Cancel the batches not started and, unless ``wait`` is false, let the threads
        finish the ones they are making: a batch still being made swaps the process's random
        streams in and out, which would undo the consumer's own seeding that follows (a worker
        process's draws stay in that process). Never waited for from a worker thread itself
        (the collector may run there)."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if getattr(self, "_open", False):  # once per pool
            self._open = False
            wait = wait and not drawing.in_worker_thread()
            self._pool.shutdown(wait=wait, cancel_futures=True)
            drawing.pool_stopped()

    # bound here: at the interpreter's exit a module's names may be gone before its objects
    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # at exit the pool's threads are joined by concurrent.futures itself
        if hasattr(self, "_pool") and not _finalizing():
            self._shutdown()


class StackedFetcher:
    """torch's fetcher of a batch of indices, asking a fastload dataset for its samples decoded
    straight into one batch tensor (``ImageDataset.load_stacked``), for a collate chain that
    takes them so. A worker thread then makes no tensor a sample, each of which would hand the
    GIL over twice."""

    def __init__(self, dataset: Any, collate_fn: Any) -> None:
        self.dataset, self.collate_fn = dataset, collate_fn
        self._normalizing = normalizes_stacked(collate_fn)

    def fetch(self, index: Any) -> Any:
        if self._normalizing is None:  # a dataset's own load_stacked need not take it
            return self.collate_fn(self.dataset.load_stacked(index))
        return self.collate_fn(self.dataset.load_stacked(index, normalizing=self._normalizing))


def _make(fetcher: Any, pin_device: str | None, index: Any) -> Any:
    """One batch, made in a worker thread: fetched and collated, then pinned when asked
    (``pin_device`` not ``None``)."""
    try:
        data = fetcher.fetch(index)
    except Exception as exc:  # raised as it is, with where it happened
        samples = [int(i) for i in index] if isinstance(index, list) else int(index)
        if hasattr(exc, "add_note"):  # Python >= 3.11
            exc.add_note(f"in a fastload worker thread, reading samples {samples}")
        raise
    return data if pin_device is None else pin_memory(data, pin_device)


def _start_worker(ring: BatchRing) -> None:
    """A worker thread's start: its samples draw from their own streams, its batches are
    made in ``ring``, and torch's CPU ops run on it alone (``num_workers`` threads each
    fanning out over every core would oversubscribe them, as processes would without torch
    setting one thread in each)."""
    drawing.worker_thread()
    buffers.use(ring)
    single_threaded_ops()
