"""How a worker process's batch travels to the main process.

torch sends every storage of a batch as a file descriptor of shared memory. Each descriptor
costs a round trip the main process waits on: it connects to the worker's resource-sharer
thread, both sides prove they know the pool's key (an HMAC challenge each way), then the
descriptor comes over the socket. That is one to a few milliseconds of the main process's
time a storage when the worker is busy, and a batch of images and labels has two (a detection
batch, one for every image's boxes and labels). In fastload's worker processes:

* a storage of the worker's kept batch memory that the main process already maps
  (:mod:`fastload.memory.shared_buffers`) goes by its slot's name: the main process takes its
  own mapping of it, with no descriptor;
* a small storage that is not shared memory yet (labels, boxes: at most :data:`INLINE_BYTES`)
  goes by value, in the message itself, as a copy. Unlike torch's, such a tensor is not in
  shared memory on the main process's side (``is_shared()`` is ``False``); its values are the
  same;
* a larger one that is not shared memory yet (an image made by the user's own transforms and
  collate, a detection batch's images) is copied into a free slot of the kept memory, where
  torch would copy it into fresh shared memory, and goes as that slot (by name once mapped);
  the tensor the main process gets is a view of the slot's storage, which is larger than the
  tensor's own (``untyped_storage().nbytes()`` differs from torch's);
* everything else goes as torch sends it (a storage already in shared memory, a storage
  while every slot is out).

torch's ``default_collate`` makes every tensor of a worker's batch in fresh shared memory: the
labels when they are tensors, a caption's tokens, a dict sample's small fields. Where fastload
collates in place of it (``loader.collate.RingCollate``), those it just made and that would go
by value if they were not shared are copied out of shared memory (:func:`lighten`), so that they
do: one descriptor's round trip a field and batch the fewer.

It applies to what the worker process pickles for other processes through
``multiprocessing``'s pickler, which in a loader's worker is its batches. A dataset that itself
sends large tensors to a process of its own from a worker would have them copied into slots
that only the main process frees (the worker then makes new ones, as torch does, once every
slot is out); set ``FASTLOAD_SHARED_RING=0`` for such a dataset, or to send every batch as
torch does.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from torch.multiprocessing import reductions

from fastload.memory import shared_buffers
from fastload.memory.tensors import map_tensors

__all__ = ["INLINE_BYTES", "install", "lighten", "reduce_storage"]

# Past this size a copy through the pipe costs about as much as the descriptor's round trip.
INLINE_BYTES = 64 * 1024


def install() -> None:
    """In a worker process: send storages as the module's notes say, from now on."""
    ForkingPickler.register(torch.UntypedStorage, reduce_storage)


def reduce_storage(storage: torch.UntypedStorage) -> tuple[Any, tuple[Any, ...]]:
    """How ``storage`` is pickled on its way to the main process (see the module's notes)."""
    ring = shared_buffers.current()
    if storage.device.type != "cpu":
        return reductions.reduce_storage(storage)
    slot = None if ring is None else ring.mapped_slot(storage)
    if ring is not None and slot is not None:
        return _kept, (ring.ring_id, ring.worker, slot)
    if not storage.is_shared():
        if storage.nbytes() <= INLINE_BYTES:
            as_bytes = torch.empty(0, dtype=torch.uint8).set_(storage)
            return _copied, (as_bytes.numpy().tobytes(),)
        kept = None if ring is None else ring.copy_in(storage)
        if kept is not None:  # where torch would copy it into fresh shared memory
            return reduce_storage(kept)
    return reductions.reduce_storage(storage)


def lighten(batch: Any) -> Any:
    """In a worker process, ``batch`` with each small tensor in shared memory that is not one
    of the worker's kept slots copied out of it, so that it goes by value.

    Only for a batch whose tensors were all made for it by the collate function (torch's
    ``default_collate`` stacks each field anew): a tensor the dataset itself keeps in shared
    memory, to share it with the main process, must stay there.
    """
    ring = shared_buffers.current()
    if ring is None:
        return batch

    def unshared(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if (
            tensor.device.type != "cpu"
            or not storage.is_shared()
            or storage.nbytes() > INLINE_BYTES
            or ring.keeps(storage)
        ):
            return tensor
        return tensor.clone()

    return map_tensors(unshared, batch)


def _kept(ring_id: int, worker: int, slot: int) -> torch.UntypedStorage:
    return shared_buffers.Returns.kept(ring_id, worker, slot)


def _copied(data: bytes) -> torch.UntypedStorage:
    return torch.UntypedStorage.from_buffer(data, dtype=torch.uint8)
