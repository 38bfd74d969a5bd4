"""The worker path: torch's worker processes read the dataset, fastload delivers the batches.

fastload never changes the attributes of the loader the user holds: the planned dataset, the
collate chain (:mod:`fastload.loader.collate`) and the :class:`~fastload.sampling.EpochSampler`
that records where the epoch stands go to a torch ``DataLoader`` of the path's own, whose
iterators are torch's (subclassed under their own names, so that profiler labels and
``iter(loader)`` on the CPU stay torch's). With a CUDA device the batches then go through a
:class:`~fastload.gpu.prefetch.CUDAPrefetcher`, which runs the batch stage on its side stream.
"""

from __future__ import annotations

import gc
import inspect
import signal
import time
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from fastload.compat import (
    MP_STATUS_CHECK_INTERVAL,
    MultiProcessingDataLoaderIter,
    SingleProcessDataLoaderIter,
    pins_in_thread,
)
from fastload.datasets.skipping import SkipReport
from fastload.gpu import registered
from fastload.gpu.prefetch import CUDAPrefetcher
from fastload.gpu.stage import BatchStage, DeviceStage
from fastload.loader.collate import collate_chain
from fastload.loader.delivery import Counting, counted
from fastload.loader.plan import WorkerPlan
from fastload.loader.threads import ThreadWorkersIter
from fastload.memory import buffers, handover, shared_buffers
from fastload.memory.shared_buffers import Returns, RingInit, SlotTable
from fastload.memory.stacked import (
    Normalizing,
    normalizes_stacked,
    takes_stacked,
    welcome,
    welcomed,
    welcomed_normalizing,
)
from fastload.sampling import EpochSampler

__all__ = ["WorkerPath", "dead_workers"]

# torch's parameters that the path's own loader takes from the user's loader as they are
# (whatever the installed torch has: in_order, pin_memory_device, ...)
_AS_GIVEN = tuple(
    name
    for name in inspect.signature(torch.utils.data.dataloader.DataLoader.__init__).parameters
    if name
    not in (
        "self",
        "dataset",
        "batch_size",
        "shuffle",
        "sampler",
        "batch_sampler",
        "drop_last",
        "collate_fn",
    )
)


class WorkerPath:
    """Batches from torch's worker processes, as a :class:`WorkerPlan` says.

    Args:
        loader: The user's loader (its torch attributes are read once, here).
        plan: What to read and what runs where.
    """

    def __init__(self, loader: Any, plan: WorkerPlan) -> None:
        self.plan = plan
        has_ops = plan.batch_ops is not None or plan.channels_last
        self.stage = (
            BatchStage(
                plan.batch_ops,
                channels_last=plan.channels_last,
                then=plan.then,
                images_at=plan.images_at,
            )
            if has_ops
            else None
        )
        self.device_stage = DeviceStage(self.stage) if plan.cuda and self.stage else None
        self._own_generator = loader.generator is not None
        batched = loader.batch_sampler is not None
        arguments: dict[str, Any] = {name: getattr(loader, name) for name in _AS_GIVEN}
        self.epochs: EpochSampler | None = None
        if isinstance(loader.dataset, torch.utils.data.IterableDataset):
            arguments.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
        else:
            self.epochs = EpochSampler(
                loader.batch_sampler if batched else loader.sampler,
                batched=batched,
                generator=loader.generator,
                sampler=loader.sampler,
                keyed=plan.keyed,
            )
            if batched:
                arguments["batch_sampler"] = self.epochs
            else:
                arguments.update(sampler=self.epochs, batch_size=None)
        # batches made in pinned memory (the worker processes' kept slots registered with
        # CUDA, the rings of this process allocated pinned) need no pinned copy: torch's
        # pinning returns a tensor already pinned as it is. Worker processes: where torch's
        # pin-memory thread receives the batches, it registers each slot as it first arrives
        # (shared_buffers.Arriving), so receiving stays off the loop's thread and only the
        # copy is gone; it pins what is left (the labels).
        in_place = plan.cuda and registered.enabled()
        arguments["collate_fn"] = collate_chain(
            loader.collate_fn if plan.then is None else torch.utils.data.default_collate,
            stage=self.stage,
            on_device=plan.cuda,
            skipping=plan.skipping,
            batched=batched,
            keyed=plan.keyed,
            drawn=plan.deferred,
            pinned=bool(loader.pin_memory),
        )
        if not plan.threads:
            start = _WorkerStart(loader.worker_init_fn)
            start.stacked = takes_stacked(arguments["collate_fn"])
            start.normalizing = normalizes_stacked(arguments["collate_fn"])
            arguments["worker_init_fn"] = start
        kind = _ThreadsLoader if plan.threads else _TorchLoader
        self.torch_loader = kind(plan.dataset, **arguments)
        self.torch_loader.pins_in_place = in_place

    def __len__(self) -> int:
        return len(self.torch_loader)

    def batches(self) -> Iterator[Any]:
        """One pass: torch's iterator on the CPU, the prefetcher's with a CUDA device."""
        return counted(self.epochs, self._start, own_generator=self._own_generator)

    def _start(self) -> Iterator[Any]:
        plan = self.plan
        batches: Iterator[Any] = iter(self.torch_loader)
        if self.device_stage is not None and (plan.keyed or plan.deferred):
            batches = self.device_stage.untag(batches)  # the seed and draws rode along
        if plan.skipping:
            dropped = self.epochs.drop if self.epochs is not None else None
            batches = SkipReport(batches, plan.dataset, on_drop=dropped)
        if not plan.cuda:
            return batches
        assert plan.device is not None
        prefetcher = CUDAPrefetcher(
            batches, device=plan.device, depth=plan.device_prefetch, transform=self.device_stage
        )
        return iter(prefetcher)  # started: `for batch in loader` calls iter() only on the loader

    def state(self) -> dict[str, Any]:
        """Where the epoch stands (see :class:`EpochSampler`)."""
        assert self.epochs is not None
        return {"epochs": self.epochs.state(), "executor_epochs": 0}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`."""
        assert self.epochs is not None
        self.epochs.load(state["epochs"])


class _TorchLoader(torch.utils.data.dataloader.DataLoader):
    """torch's loader over the planned dataset, whose iterators count what they hand out."""

    pins_in_place = False  # batches made in pinned memory (gpu.registered)

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessingDataLoaderIter(self)


class _ThreadsLoader(torch.utils.data.dataloader.DataLoader):
    """The path's loader when its workers are threads (:mod:`fastload.loader.threads`)."""

    pins_in_place = False  # batches made in pinned memory (gpu.registered)

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _ThreadWorkersIter(self)


class _ThreadWorkersIter(Counting, ThreadWorkersIter):
    pass


# torch's two iterators under their own names (torch's profiler labels use them)
class _SingleProcessDataLoaderIter(Counting, SingleProcessDataLoaderIter):
    """torch's iterator with no workers, whose batches are made in memory kept from batch to
    batch (:mod:`fastload.memory.buffers`), as the thread workers' are: a float32 batch made anew in
    this process faults in and zeroes fresh pages each time (the batch ops' normalize cost
    five times as much as in a worker, measured)."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        # the batch being made (and the uint8 batch batch ops make it from) and those the
        # consumer holds (a previous one, one it keeps)
        self._ring = buffers.BatchRing(4, pinned=loader.pins_in_place)
        self._stacked = takes_stacked(loader.collate_fn)
        self._normalizing = normalizes_stacked(loader.collate_fn)

    def _next_data(self) -> Any:
        before = welcomed(), welcomed_normalizing()
        # a fastload dataset's batches come stacked (and normalized), for this fetch
        welcome(self._stacked, self._normalizing)
        try:
            with buffers.using(self._ring):
                return super()._next_data()
        finally:
            welcome(*before)


class _MultiProcessingDataLoaderIter(Counting, MultiProcessingDataLoaderIter):
    def __init__(self, loader: Any) -> None:
        # each iterator's workers get slots of their own (fastload.memory.shared_buffers); the
        # batches are received by this thread, or by torch's pin-memory thread where it pins
        self._returns: Returns | None = None
        init = loader.worker_init_fn
        if isinstance(init, RingInit):
            fds = torch.multiprocessing.get_sharing_strategy() == "file_descriptor"
            ring = shared_buffers.enabled() and fds
            pinning = pins_in_thread(loader)
            init.table = SlotTable(loader.num_workers, pinning_thread=pinning) if ring else None
            if init.table is not None:
                registry = None
                if loader.pins_in_place:
                    registry = registered.HostRegistry()
                self._returns = Returns(init.table, registry)
        collects = gc.isenabled()
        if isinstance(init, _WorkerStart):
            init.collects = collects
        # no collection between a worker's fork and its freezing what it inherited
        gc.disable()
        try:
            super().__init__(loader)
        finally:
            if collects:
                gc.enable()

    def _shutdown_workers(self) -> None:
        super()._shutdown_workers()
        returns = getattr(self, "_returns", None)  # torch may call this from its own __init__
        if returns is not None:
            returns.close()  # the slots' memory goes with the workers' last references

    def _try_get_data(self, timeout: float = MP_STATUS_CHECK_INTERVAL) -> Any:
        try:
            got, data = super()._try_get_data(timeout)
        except (ConnectionError, EOFError) as exc:
            # a batch whose worker died while it was being received: torch looks for dead
            # workers before the kernel has reaped this one, and lets the socket error through
            died = dead_workers(self._workers)
            if died is None:
                raise
            raise died from exc
        if got and self._returns is not None and not self._returns.pinning_thread:
            self._returns.received(data)  # else that thread did, as it pinned the batch
        return got, data


class _WorkerStart(RingInit):
    """The workers' ``worker_init_fn``: first, each worker freezes the objects it inherited,
    so that it never finalizes the main process's garbage; then the ring and the user's own.

    A forked worker inherits the uncollected garbage, and a collection there would finalize
    it: a CUDA tensor that was record_stream'd (every batch the prefetcher delivered) then
    records an event in a process where CUDA cannot run, and the worker aborts (torch's own
    loader too). The main process collects its garbage as before; collecting it before the
    fork instead would scan its whole heap at each epoch's start, and unfreezing after a
    freeze there would undo what anything else froze.
    """

    collects = True  # whether collection was on in the main process, as the iterator found it
    stacked = False  # whether the collate chain takes a fastload dataset's stacked batches
    normalizing: Normalizing | None = None  # and the normalize it runs first on them

    def __call__(self, worker_id: int) -> None:
        gc.freeze()
        if self.collects:
            gc.enable()
        else:
            gc.disable()
        welcome(self.stacked, self.normalizing)
        if shared_buffers.enabled():
            handover.install()
        super().__call__(worker_id)


def dead_workers(workers: list[Any], *, wait: float = 5.0) -> RuntimeError | None:
    """The error naming the workers that exited (how, too), waiting up to ``wait`` seconds
    for one to be reaped; ``None`` when none did."""
    deadline = time.monotonic() + wait
    dead = [w for w in workers if w.exitcode is not None]
    while not dead and time.monotonic() < deadline:
        time.sleep(0.05)
        dead = [w for w in workers if w.exitcode is not None]
    if not dead:
        return None
    named = []
    for worker in dead:
        code = worker.exitcode
        how = f"killed by signal: {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        named.append(f"pid {worker.pid}, {how}")
    return RuntimeError(f"DataLoader worker ({'; '.join(named)}) exited unexpectedly")
