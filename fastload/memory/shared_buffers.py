"""Batch memory kept from batch to batch in worker processes (``worker_type="process"``).

A worker process hands its batch over in shared memory. Made anew for every batch, that memory
is faulted in and zeroed page by page in the worker, every batch: for a normalized float32
batch of 64 x 3 x 224 x 224 (38.5 MB) that cost more than the normalize itself, and float32
batches went at 0.83-0.85x the rate of uint8 ones (measured on 2 cores, 2 workers). So a worker
writes such batches into a few storages of shared memory that it keeps (a :class:`WorkerRing`),
each written again once the main process has let go of it:

* the main process makes, for each iterator, a :class:`SlotTable`: one row of slot states per
  worker, itself in shared memory, and a random id;
* each storage of a worker's ring ends, past the batch's bytes, with a tag: the table's id,
  the worker and the slot; the worker marks the slot out when it hands the storage out;
* the main process reads the tags of the batches it receives (:class:`Returns`), keeps a
  reference to each tagged storage, and marks the slot free again once nothing else in the
  process refers to it (the consumer dropped the batch and every view of it). Keeping the
  reference also means the next batch sent in the same memory is not mapped again;
* once the main process maps a storage, it says so in the table (:attr:`SlotTable.mapped`), and
  the worker sends later batches in it by their slot's name instead of by a file descriptor
  (:mod:`fastload.memory.handover`);
* a tensor sent that is not in shared memory yet (the batch of a collate function of the
  user's own, a detection batch's images) is copied into a slot as it is sent, where torch
  would copy it into fresh shared memory (:meth:`WorkerRing.copy_in`, in the queue's feeder
  thread).

While every slot is out (the consumer holds many batches), a worker makes its batch anew, as
torch does, so a batch kept is never overwritten. A slot taken for an intermediate result (a
normalized batch a later op replaced) never reaches the main process: the worker frees it
again once the batch it sends is made (:func:`settle`). A batch sent on from the main process
to a third process shares its memory (torch sends shared storages without copying): copy it
first if the main process may drop it while the other still reads it.

Images of varying sizes (detection's, one storage each) take a free storage that holds them
with at most as much again to spare, else replace one that does not fit, so that no slot grows
to the largest image seen; storages not taken lately are let go of. What the ring keeps beside
the batches in flight costs memory: on detection's multiscale and ssd pipelines (2 workers,
batch 4) about 115 and 100-200 MB more shared memory at the peak than fresh storages, for
1.10x their images/s (measured).
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from fastload import compat
from fastload.system import keep_freed_heap

__all__ = [
    "OFF_ENV",
    "Returns",
    "RingInit",
    "SlotTable",
    "WorkerRing",
    "current",
    "enabled",
    "settle",
    "take",
    "take_storage",
]

OFF_ENV = "FASTLOAD_SHARED_RING"  # "0": every batch made anew, as torch makes it

# A worker's storages in flight: its batches in torch's queue (its prefetch), those with the
# consumer, one spare; times the images of a batch where each sample's image has a storage of
# its own (detection's lists). A storage is made only when no free one will do.
SLOTS = 16
_TAIL = 16  # bytes past the batch: the table's id, then the storage's number, worker and slot
_ALIGN = 64
_FREE, _OUT, _DROPPED = 0, 1, 2  # _DROPPED: free, and the worker no longer keeps its storage
_RECEIVING: weakref.WeakValueDictionary[int, Returns] = weakref.WeakValueDictionary()
_use_count = compat.storage_use_count()  # None: nothing is reused
_RING: WorkerRing | None = None  # this worker process's ring, once installed


class SlotTable:
    """The states of every worker's slots, in shared memory, and the id that tags them.

    Attributes:
        states: Each slot's state, written by its worker (out, dropped) and by the main
            process (free).
        mapped: The number of the storage the main process maps in each slot (0: none),
            written by the main process: a worker may name a slot's storage instead of sending
            it only while its number is there.
        ring_id: The id in every storage's tag.
        pinning_thread: Whether torch's pin-memory thread receives the batches (pinning
            each), not the iterator's own thread: then each batch goes as an
            :class:`Arriving`.

    Args:
        workers: Worker processes.
        slots: Slots per worker.
        pinning_thread: As the attribute.
    """

    def __init__(self, workers: int, slots: int = SLOTS, *, pinning_thread: bool = False) -> None:
        self.states = torch.zeros(workers, slots, dtype=torch.int32).share_memory_()
        self.mapped = torch.zeros(workers, slots, dtype=torch.int64).share_memory_()
        self.ring_id = secrets.randbits(62) + 1  # never 0, the value of fresh memory
        self.pinning_thread = pinning_thread


class WorkerRing:
    """A worker's storages of shared memory, each handed out again once the main process has
    let go of it.

    Args:
        table: The iterator's :class:`SlotTable`.
        worker: This worker's id.
    """

    def __init__(self, table: SlotTable, worker: int) -> None:
        self.ring_id, self.worker = table.ring_id, worker
        self.pinning_thread = table.pinning_thread
        self._states = table.states[worker].numpy()
        self._mapped = table.mapped[worker].numpy()
        self._kept: list[torch.UntypedStorage | None] = [None] * len(self._states)
        self._numbers = [0] * len(self._states)  # each kept storage's number (in its tag)
        self._made = 0
        # the worker's own thread takes slots for the batches it makes, the queue's feeder
        # thread for the tensors it sends (copy_in)
        self._lock = threading.Lock()
        self._taken = 0
        self._last = [0] * len(self._states)  # when (in takes handed out) each was last taken
        # the slots taken since the last settle, and those it found still referred to here
        self._this_batch: set[int] = set()

    def take(self, nbytes: int) -> torch.UntypedStorage | None:
        """A shared storage of at least ``nbytes`` (and the tag after them), marked out; ``None``
        when every slot is out."""
        with self._lock:
            slot = self._take(nbytes)
            if slot is None:
                return None
            self._this_batch.add(slot)
            return self._kept[slot]

    def copy_in(self, storage: torch.UntypedStorage) -> torch.UntypedStorage | None:
        """A slot's storage holding a copy of ``storage``'s bytes, marked out until the main
        process lets go of it; ``None`` when every slot is out. For a tensor on its way to the
        main process: the copy torch would make into fresh shared memory, made into memory
        kept instead (no new pages faulted in), which the main process may already map."""
        nbytes = storage.nbytes()
        with self._lock:
            slot = self._take(nbytes)  # not this batch's: settle never frees it
            kept = None if slot is None else self._kept[slot]
        if kept is None:
            return None
        into = torch.empty(0, dtype=torch.uint8).set_(kept, 0, (nbytes,))  # type: ignore[call-overload]
        into.copy_(torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,)))  # type: ignore[call-overload]
        return kept

    def _take(self, nbytes: int) -> int | None:
        self._drop_idle()
        slot, fits = self._choose(nbytes)
        if slot is None:
            return None
        if self._kept[slot] is None or not fits:
            self._kept[slot] = self._new(nbytes, slot)
        self._taken += 1
        self._states[slot], self._last[slot] = _OUT, self._taken
        return slot

    def keeps(self, storage: torch.UntypedStorage) -> bool:
        """Whether ``storage`` is one of this ring's slots."""
        pointer = storage.data_ptr()
        with self._lock:
            return any(kept is not None and kept.data_ptr() == pointer for kept in self._kept)

    def mapped_slot(self, storage: torch.UntypedStorage) -> int | None:
        """The slot holding ``storage``, if the main process maps it (it received a batch in
        this very storage, and still keeps it); ``None`` otherwise: then it has to be sent."""
        pointer = storage.data_ptr()
        with self._lock:
            for slot, kept in enumerate(self._kept):
                if kept is not None and kept.data_ptr() == pointer:
                    number = self._numbers[slot]
                    return slot if number and self._mapped[slot] == number else None
        return None

    def settle(self, sent: Any) -> None:
        """Free again the slots taken for the batch just made that ``sent`` (what goes to the
        main process) does not hold and nothing in this process still refers to: an op's
        intermediate result (a normalized batch that a later op such as ``MixUp`` replaced, a
        batch decoded into one tensor whose samples were then collated anew). The main
        process never sees those, so they would stay out for the ring's life. One that this
        process still refers to (the samples the collate function was handed, until it
        returns) is looked at again at the next settle."""
        with self._lock:
            self._settle(sent)

    def _settle(self, sent: Any) -> None:
        held = {storage.data_ptr() for storage in _shared_storages(sent)}
        pending: set[int] = set()
        for slot in self._this_batch:
            storage = self._kept[slot]
            if storage is None or self._states[slot] != _OUT or storage.data_ptr() in held:
                continue
            if _local_only(storage):
                self._states[slot] = _FREE
            else:
                pending.add(slot)
        self._this_batch = pending

    def _choose(self, nbytes: int) -> tuple[int | None, bool]:
        """The free slot to write ``nbytes`` in, and whether its storage fits them: one whose
        storage holds them with at most as much again to spare; else one whose storage does
        not (it is made anew, at this size: a slot never grows to the largest image seen);
        else one with no storage yet."""
        replace = empty = None
        for slot, state in enumerate(self._states):
            if state == _OUT:
                continue
            storage = self._kept[slot]
            if storage is None:
                empty = slot if empty is None else empty
                continue
            if not _local_only(storage):
                continue  # still held in this process (its send not finished)
            if nbytes <= storage.nbytes() - _TAIL <= 2 * nbytes + _ALIGN:
                return slot, True
            replace = slot if replace is None else replace
        return (replace, False) if replace is not None else (empty, False)

    def _drop_idle(self) -> None:
        """Let go of the storages of free slots not taken lately: they were made while the
        consumer held many batches, and would otherwise stay for the iterator's life."""
        idle = len(self._states)
        for slot, storage in enumerate(self._kept):
            if storage is None or self._states[slot] != _FREE:
                continue
            if self._taken - self._last[slot] > idle and _local_only(storage):
                self._kept[slot] = None
                self._states[slot] = _DROPPED  # the main process lets go of its mapping too

    def _new(self, nbytes: int, slot: int) -> torch.UntypedStorage:
        payload = -(-nbytes // _ALIGN) * _ALIGN
        storage = compat.new_shared_storage(payload + _TAIL)
        # shared memory, not malloc's: the samples a batch is made from would not be kept
        keep_freed_heap(nbytes)
        self._made += 1
        self._numbers[slot] = self._made
        tag = _tag_of(storage)
        tag[0], tag[1] = self.ring_id, _where(self._made, self.worker, slot)
        return storage


def _where(number: int, worker: int, slot: int) -> int:
    """A tag's second int64: the storage's number (from 1), its worker and its slot."""
    return (number << 32) | (worker << 20) | slot


def _parts(where: int) -> tuple[int, int, int]:
    return where >> 32, (where >> 20) & 0xFFF, where & 0xFFFFF


def _tag_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """The two int64 past a ring storage's batch (garbage for any other storage)."""
    offset = (storage.nbytes() - _TAIL) // 8
    return torch.empty(0, dtype=torch.int64).set_(storage, offset, (2,))  # type: ignore[call-overload]


def _local_only(storage: torch.UntypedStorage, owners: int = 1) -> bool:
    """Whether nothing but ``owners`` storage objects in this process refer to ``storage``."""
    if _use_count is None:
        return False
    return bool(_use_count(compat.storage_handle(storage)) <= owners)


def enabled() -> bool:
    """Whether worker processes keep their batch memory (``FASTLOAD_SHARED_RING`` is not
    ``"0"``): the memory it keeps beside the batches in flight may matter more than its
    speed."""
    return os.environ.get(OFF_ENV, "1").strip() != "0"


def take_storage(nbytes: int) -> torch.UntypedStorage | None:
    """A storage of at least ``nbytes`` in this worker's ring (uninitialised), or ``None``
    where there is no ring (not a worker process of a fastload loader) or no free slot."""
    return _RING.take(nbytes) if _RING is not None else None


def take(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor | None:
    """A contiguous tensor of ``shape`` and ``dtype`` in this worker's ring (uninitialised), or
    ``None`` as for :func:`take_storage`."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    storage = take_storage(math.prod(shape) * itemsize)
    if storage is None:
        return None
    flat = torch.empty(0, dtype=dtype).set_(storage, 0, (math.prod(shape),))  # type: ignore[call-overload]
    return flat.view(shape)


def settle(sent: Any) -> None:
    """In a worker process with a ring, free the slots the batch just made took but does not
    hold (see :meth:`WorkerRing.settle`); elsewhere nothing."""
    if _RING is not None:
        _RING.settle(sent)


def current() -> WorkerRing | None:
    """This process's ring, if it is a worker process of a fastload loader with one."""
    return _RING


class Arriving:
    """A worker's batch on its way through torch's pin-memory thread, where the batches are
    received when that thread pins them: :meth:`pin_memory`, which that thread calls, notes
    the kept storages the batch came in (:meth:`Returns.received`, as the iterator's thread
    does without that thread, registering them with CUDA where its registry does), then pins
    it as torch would. Pinned by copying, the copy is what the loader hands out and the slots
    are free again once it is made; registered, a tensor in a slot is pinned already, so it is
    handed out as it is and its slot is free once nothing holds the batch.

    Args:
        batch: What the worker's collate function made.
        ring_id: The ring (its :class:`SlotTable`) the worker writes in.
    """

    __slots__ = ("batch", "ring_id")

    def __init__(self, batch: Any, ring_id: int) -> None:
        self.batch, self.ring_id = batch, ring_id

    def pin_memory(self) -> Any:
        returns = _RECEIVING.get(self.ring_id)
        if returns is not None:
            returns.received(self.batch)
        return compat.pin_memory(self.batch)


def arriving(batch: Any) -> Any:
    """``batch`` as this worker process sends it: an :class:`Arriving` where torch's
    pin-memory thread receives the batches, else as it is."""
    if _RING is None or not _RING.pinning_thread:
        return batch
    return Arriving(batch, _RING.ring_id)


class RingInit:
    """A ``worker_init_fn`` that gives the worker process its ring, then calls the user's.

    The iterator sets :attr:`table` before it starts its workers (they take it with them, as
    forked memory or pickled), so that two iterators of one loader never share slots.

    Args:
        then: The loader's own ``worker_init_fn``, or ``None``.
    """

    def __init__(self, then: Callable[[int], Any] | None) -> None:
        self.then = then
        self.table: SlotTable | None = None

    def __call__(self, worker_id: int) -> None:
        global _RING
        _RING = WorkerRing(self.table, worker_id) if self.table is not None else None
        if self.then is not None:
            self.then(worker_id)


class Returns:
    """The main process's side: which ring storages the consumer still holds, and the slots
    marked free once it lets go of them.

    Args:
        table: The iterator's :class:`SlotTable`.
        registry: Registers each kept storage with CUDA, and unregisters it before it is let
            go of (:class:`fastload.gpu.registered.HostRegistry`); ``None``: nothing is.
    """

    def __init__(self, table: SlotTable, registry: Any = None) -> None:
        self.ring_id = table.ring_id
        self.pinning_thread = table.pinning_thread  # which thread calls received
        self._states = table.states.numpy()
        self._mapped = table.mapped.numpy()
        self._kept: dict[tuple[int, int], torch.UntypedStorage] = {}
        self._out: set[tuple[int, int]] = set()
        self._registry = registry
        _RECEIVING[self.ring_id] = self
        if registry is not None:  # unregistered before the storages it keeps are let go of
            weakref.finalize(self, registry.close)

    def close(self) -> None:
        """Unregister the kept storages (the iterator is done); nothing without a registry."""
        if self._registry is not None:
            self._registry.close()

    @staticmethod
    def kept(ring_id: int, worker: int, slot: int) -> torch.UntypedStorage:
        """The storage the main process keeps in ``worker``'s ``slot`` of the ring ``ring_id``,
        where a worker named it instead of sending it.

        Raises:
            RuntimeError: No such storage is kept here (the worker's bookkeeping and this
                process's disagree: a fault of fastload's).
        """
        returns = _RECEIVING.get(ring_id)
        storage = None if returns is None else returns._kept.get((worker, slot))
        if storage is None:
            raise RuntimeError(
                f"worker {worker} named slot {slot} of its kept batch memory, which this "
                f"process does not keep (ring {ring_id}); FASTLOAD_SHARED_RING=0 works around "
                "it: please report it"
            )
        return storage

    def received(self, data: Any) -> None:
        """Free the slots let go of since the last call, then note the ring storages in
        ``data`` (what a worker sent: tensors, possibly inside tuples, lists, dicts or an
        object's ``batch``)."""
        for key in [key for key in self._out if _local_only(self._kept[key])]:
            self._out.discard(key)
            self._states[key] = _FREE
        for key in [key for key in self._kept if key not in self._out]:
            if self._states[key] == _DROPPED:
                self._let_go(key)
        for storage in _shared_storages(data):
            nbytes = storage.nbytes()
            if nbytes < _TAIL or nbytes % 8:
                continue
            ring_id, where = _tag_of(storage).tolist()
            if ring_id != self.ring_id:
                continue
            number, worker, slot = _parts(where)
            key = (worker, slot)
            if key[0] < self._states.shape[0] and key[1] < self._states.shape[1]:
                old = self._kept.get(key)
                if old is not None and old.data_ptr() != storage.data_ptr():
                    self._let_go(key)  # the slot's smaller storage, made again larger
                self._kept[key] = storage
                self._mapped[key] = number
                self._out.add(key)
                if self._registry is not None:
                    self._registry.register(storage)

    def _let_go(self, key: tuple[int, int]) -> None:
        self._mapped[key] = 0
        storage = self._kept.pop(key)
        if self._registry is not None:
            self._registry.unregister(storage)


def _shared_storages(data: Any, depth: int = 0) -> list[torch.UntypedStorage]:
    if isinstance(data, torch.Tensor):
        storage = data.untyped_storage()
        return [storage] if data.device.type == "cpu" and storage.is_shared() else []
    if depth > 4:
        return []
    if isinstance(data, (list, tuple)):
        items: Any = data
    elif isinstance(data, dict):
        items = data.values()
    elif hasattr(data, "batch"):
        items = [data.batch]
    else:
        return []
    return [s for item in items for s in _shared_storages(item, depth + 1)]
