"""The collate chain: what turns a batch's samples into the batch, in the worker that read them.

One function builds it, so its order is written once. Outermost first, as a batch's samples
meet the links:

0. ``KeepSubclasses`` (torch pins the batches: ``pin_memory=True``): a batch holding tensor
   subclasses (torchvision's ``BoundingBoxes``, ``Mask``, ...) travels as a
   :class:`~fastload.memory.tensors.Pinnable`, which keeps them when torch's pin-memory thread
   pins it (torch's pinning returns plain tensors); the iterator hands out the batch inside;
1. ``SeedTag`` (a CUDA device, and samples that carry seeds or per-sample draws, or a mixing
   op drawn per batch): the batch stage runs after the copy, in the main process, so the
   batch's seed, its samples' draws and its own (:mod:`fastload.gpu.deferred`) travel with the
   collated batch;
2. ``SkipCollate`` (``on_error="skip"``): the markers of unreadable files leave the batch before
   collating, and come back beside it, for the main process to report; the batch's seed stays
   with the samples that remain;
3. ``CollateThenStage`` (batch ops and no CUDA device): the batch ops run on the collated batch,
   in the worker, under the batch's seed and with its samples' draws;
4. the collate function itself: the loader's ``collate_fn`` (torch's default when none was
   given), or torch's ``default_collate`` when the loader's is provably ``default_collate``
   then one callable (:func:`fastload.callables.wrappers.collated_then`): that callable then
   ends the batch stage (``BatchStage.then``). torch's ``default_collate`` whose batch leaves the
   worker as it is (no batch ops there) is ``RingCollate``: the same batch, its images stacked
   into memory kept from batch to batch when some is free: a worker process's shared memory
   (:mod:`fastload.memory.shared_buffers`), or the ring of a worker thread or of the loader's
   own process (:mod:`fastload.memory.buffers`). A collate function of the user's own is
   ``OwnCollate``: what ``default_collate`` stacks inside it goes into the same kept memory.

The main process undoes 0 (``Counting``), then 1 and 2 in the reverse order
(``DeviceStage.untag``, then ``SkipReport``) before a batch is delivered.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import default_collate

from fastload import compat
from fastload.datasets.skipping import SkipCollate
from fastload.gpu.stage import BatchStage, CollateThenStage, SeedTag
from fastload.memory import buffers, handover, shared_buffers
from fastload.memory.stacked import Normalizing, StackedSamples, normalizes_stacked, takes_stacked
from fastload.memory.tensors import (
    Pinnable,
    collated_around,
    has_subclasses,
    plain_alike,
    stackable_fields,
)

__all__ = ["OwnCollate", "RingCollate", "collate_chain"]

_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def collate_chain(
    collate_fn: Callable[[Any], Any],
    *,
    stage: BatchStage | None,
    on_device: bool,
    skipping: bool,
    batched: bool,
    keyed: bool,
    drawn: bool = False,
    pinned: bool = False,
) -> Callable[[Any], Any]:
    """The loader's collate chain (see the module's notes for the order).

    Args:
        collate_fn: The collate function (the innermost link).
        stage: The batch stage, if there are batch ops (or ``channels_last``).
        on_device: The stage runs after the copy to a CUDA device, not in the workers.
        skipping: The dataset returns markers for unreadable files.
        batched: The loader makes batches (a batch sampler), not single samples.
        keyed: Samples carry their seeds (``seeding="sample"``).
        drawn: Samples carry draws for deferred batch ops, or the stage draws for the batch
            (:mod:`fastload.gpu.deferred`).
        pinned: torch pins the batches (the loader's ``pin_memory``).
    """
    chain = collate_fn
    if stage is None or on_device:  # else the batch ops' stage keeps the memory it makes
        chain = RingCollate() if collate_fn is default_collate else OwnCollate(collate_fn)
    if stage is not None and not on_device:
        chain = CollateThenStage(chain, stage)
    if skipping:
        chain = SkipCollate(chain, batched=batched)
    if stage is not None and on_device and (keyed or drawn):
        chain = SeedTag(chain, stage)
    if pinned:
        chain = KeepSubclasses(chain)
    return chain


class _Wrapping:
    """A link around ``collate_fn`` that passes stacked samples on to it as they are."""

    collate_fn: Callable[[Any], Any]

    @property
    def takes_stacked(self) -> bool:
        return takes_stacked(self.collate_fn)

    @property
    def normalizes_stacked(self) -> Normalizing | None:
        return normalizes_stacked(self.collate_fn)


class KeepSubclasses(_Wrapping):
    """Wraps a collate function for batches torch pins: a batch holding tensor subclasses
    comes out as a :class:`~fastload.memory.tensors.Pinnable`, for torch's pinning to keep
    them; in a worker process whose batches torch's pin-memory thread receives, each comes
    out as a :class:`~fastload.memory.shared_buffers.Arriving`, for that thread to note the
    kept memory it came in."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        return shared_buffers.arriving(Pinnable(batch) if has_subclasses(batch) else batch)


class RingCollate:
    """torch's ``default_collate``, with the images of ``(image, ...)`` tuples (or of plain
    dicts, the field with the largest tensors: :func:`~fastload.memory.tensors.stackable_fields`)
    stacked into memory kept from batch to batch: the worker process's ring
    (:mod:`fastload.memory.shared_buffers`) when it has a free slot, else the calling thread's
    :class:`~fastload.memory.buffers.BatchRing` (a worker thread's, or the loader's own with
    no workers). So is every other field of plain tensors whose batch is too large to go by
    value (a segmentation mask, a second view); in a worker process, those it stacks small are
    copied out of the shared memory ``default_collate`` made them in, to go by value
    (:func:`fastload.memory.handover.lighten`).

    ``default_collate`` stacks a worker's batch into new shared memory, faulted in page by
    page for every batch; a uint8 batch then costs that as the float32 batches did before the
    ring. In the loader's own process a batch made anew past glibc's largest mmap threshold
    (32 MiB: a float32 batch of 64 x 3 x 224 x 224) faults in fresh pages too, and where the
    ring is pinned (``FASTLOAD_PIN_IN_PLACE=1``) a batch stacked into it is copied to the
    device from there, not pinned by copying it first. Anything else, and every batch where
    there is no ring (torch's pinning) or no free slot, is ``default_collate``'s.
    Samples stacked as they were decoded (:class:`~fastload.memory.stacked.StackedSamples`)
    are that batch already: sent as they are where the dataset decoded them into the worker's
    shared memory, else copied into it.
    """

    takes_stacked = True

    def __call__(self, samples: Any) -> Any:
        # default_collate made the other fields in fresh shared memory: the small ones go by
        # value instead of a descriptor each
        batch = handover.lighten(self._collate(samples))
        # the shared memory the dataset decoded a batch into, when its samples came as a list
        # and were stacked anew (a skipped file among them): free again once they are dropped
        shared_buffers.settle(batch)
        return batch

    def _collate(self, samples: Any) -> Any:
        if isinstance(samples, StackedSamples):
            return self._stacked(samples)
        found = stackable_fields(samples)
        # a subclass (a tv_tensors.Image) is default_collate's to stack: it keeps the type
        if not found or set(map(type, found[0][1])) != {torch.Tensor}:
            return default_collate(samples)
        stacked: dict[Any, torch.Tensor] = {}
        # every field past the inline size, not the images alone: made anew, a batch past
        # glibc's largest mmap threshold (32 MiB, a float32 second view) is fresh pages faulted
        # in every batch, and a worker process's is fresh shared memory sent by descriptor
        with buffers.one_batch():  # a ring keeps as many buffers a batch as it has fields
            for field, column in found:
                first = column[0]
                if stacked and len(column) * first.nbytes <= handover.INLINE_BYTES:
                    continue  # default_collate's, then sent by value
                out = _kept(torch.Size((len(column), *first.shape)), first.dtype)
                if out is None:
                    break
                torch.stack(column, out=out)
                stacked[field] = out
        return collated_around(stacked, samples) if stacked else default_collate(samples)

    @staticmethod
    def _stacked(samples: StackedSamples) -> Any:
        images = samples.images
        if images.is_shared():  # decoded straight into this worker's shared memory
            return samples.collated()
        out = shared_buffers.take(images.shape, images.dtype)
        if out is None:
            return samples.collated()
        out.copy_(images)
        return StackedSamples(out, samples.targets, samples.seed).collated()


class OwnCollate(_Wrapping):
    """A collate function of the user's own (one that calls ``default_collate`` and changes
    its batch, say): the fields that torch's ``default_collate`` stacks inside it go into
    memory kept from batch to batch, where ``default_collate`` makes each anew.

    In a worker process that is the worker's shared slots, where ``default_collate`` makes
    each field in fresh shared memory, faulted in page by page and sent as a descriptor every
    batch; a field too small for a slot is made in the worker's own memory, and then goes by
    value (:mod:`fastload.memory.handover`). Slots it took for a batch the function then
    dropped (it returned a new one) are free again once it returns. In a worker thread, or
    the loader's own process with no workers, a field past that size goes into the thread's
    ring (:mod:`fastload.memory.buffers`): no fresh pages for a batch too large for malloc to
    reuse, and where the ring is pinned (``FASTLOAD_PIN_IN_PLACE=1``) no pinned copy of it.
    What ``default_collate`` does not stack into one tensor is torch's, as it is.

    Args:
        collate_fn: The user's collate function.
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        if shared_buffers.current() is not None:
            with compat.tensors_collated_by(stack_kept):
                batch = self.collate_fn(samples)
            shared_buffers.settle(batch)
            return batch
        if buffers.current() is not None:
            with buffers.one_batch(), compat.tensors_collated_by(stack_in_ring):
                return self.collate_fn(samples)
        return self.collate_fn(samples)


def stack_kept(tensors: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """torch's ``default_collate`` of one field's ``tensors`` in a worker process, into the
    worker's kept memory where they stack (plain tensors of one shape and dtype), else in its
    own memory where the batch would go by value; anything else (tensor subclasses, tensors
    that need grad, every slot out) as torch collates them."""
    if _plain_column(tensors):
        first = tensors[0]
        if len(tensors) * first.nbytes <= handover.INLINE_BYTES:
            return torch.stack(tensors)
        out = shared_buffers.take(torch.Size((len(tensors), *first.shape)), first.dtype)
        if out is not None:
            return torch.stack(tensors, out=out)
    return compat.collate_tensors(tensors, collate_fn_map=collate_fn_map)


def stack_in_ring(tensors: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """torch's ``default_collate`` of one field's ``tensors`` in a worker thread or the
    loader's own process, into the calling thread's ring where they stack and their batch is
    past :data:`~fastload.memory.handover.INLINE_BYTES`; anything else as torch collates it."""
    ring = buffers.current()
    if ring is not None and _plain_column(tensors):
        first = tensors[0]
        if len(tensors) * first.nbytes > handover.INLINE_BYTES:
            out = ring.take(torch.Size((len(tensors), *first.shape)), first.dtype)
            return torch.stack(tensors, out=out)
    return compat.collate_tensors(tensors, collate_fn_map=collate_fn_map)


def _plain_column(tensors: list[torch.Tensor]) -> bool:
    """Whether ``tensors`` stack into one plain CPU tensor (one shape and dtype, no subclass,
    none needing grad): what a kept buffer can hold as torch would have made it."""
    first = tensors[0]
    return (
        first.layout == torch.strided
        and first.device.type == "cpu"
        and not first.is_nested
        and plain_alike(tensors)
        and not any(map(_REQUIRES_GRAD, tensors))
    )


def _kept(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor | None:
    """A batch's worth of kept memory where the calling worker or thread has some free: its
    worker process's shared slots, else its thread's ring; ``None`` where it has neither."""
    if shared_buffers.current() is not None:
        return shared_buffers.take(shape, dtype)
    ring = buffers.current()
    return ring.take(shape, dtype) if ring is not None else None
