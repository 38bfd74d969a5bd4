"""BatchRing: a buffer is handed out again only once nothing refers to it."""

from __future__ import annotations

import resource
from collections import deque

import torch
from heap import PAGES, faults_a_batch, glibc_only

from fastload.memory import buffers
from fastload.memory.buffers import BatchRing


def test_a_buffer_comes_back_once_let_go_and_never_while_held() -> None:
    ring = BatchRing(2)
    first = ring.take((4, 3), torch.float32)
    address = first.data_ptr()
    view = first[1:]  # a view the consumer keeps holds the memory as well
    del first
    second = ring.take((4, 3), torch.float32)
    assert second.data_ptr() != address
    del view
    assert ring.take((4, 3), torch.float32).data_ptr() == address  # let go of: written again


def test_past_its_size_the_ring_makes_batches_anew_and_keeps_none_held() -> None:
    ring = BatchRing(2)
    held = [ring.take((8,), torch.uint8) for _ in range(5)]
    assert len({t.data_ptr() for t in held}) == 5
    for t in held:
        t.fill_(7)
    fresh = ring.take((8,), torch.uint8)
    assert all(t.data_ptr() != fresh.data_ptr() for t in held)
    del held[:2]  # the two the ring kept
    assert ring.take((8,), torch.uint8).data_ptr() not in {t.data_ptr() for t in held}


def test_another_shape_takes_the_place_of_a_free_buffer() -> None:
    ring = BatchRing(1)
    ring.take((2, 2), torch.float32)  # dropped at once
    small = ring.take((3,), torch.float32)
    address = small.data_ptr()
    del small
    assert ring.take((3,), torch.float32).data_ptr() == address


@glibc_only
def test_the_samples_a_kept_batch_is_made_from_are_kept_by_malloc() -> None:
    """A kept batch is never freed, which would have raised malloc's thresholds to its size:
    the ring raises them as it makes the buffer, so its samples are not faulted in again
    batch after batch (``fastload.system.keep_freed_heap``)."""
    assert faults_a_batch("BatchRing(2).take((64, 3, 224, 224), torch.uint8)") < PAGES / 20


def test_batches_of_two_fields_are_kept_as_whole_batches() -> None:
    """A ring of three batches whose batches take two buffers each (two float32 views), the
    consumer holding the last two: the third is written into kept buffers, where a ring of
    three buffers made fields anew every batch, each faulted in page by page (past 32 MiB,
    glibc maps every such block afresh)."""
    ring = BatchRing(3)
    shape, pages = (64, 3, 224, 224), 64 * 3 * 224 * 224 * 4 // 4096
    held: deque[tuple[torch.Tensor, ...]] = deque(maxlen=2)

    def batch() -> None:
        with buffers.using(ring), buffers.one_batch():  # as the collate functions mark one
            views = ring.take(shape, torch.float32), ring.take(shape, torch.float32)
        for view in views:
            view.fill_(1.0)  # as a stack writes it: every page
        held.append(views)

    for _ in range(3):
        batch()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        batch()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4
    assert faults < pages / 10
