"""Helpers of the batch-memory tests: a dataset whose batches show where they came from, and
this test process as a worker process of a fastload loader."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.data import Dataset

from fastload.memory import shared_buffers


class Ramps(Dataset):
    """uint8 images whose every pixel depends on the index, and int labels."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        base = torch.arange(3 * 16 * 16, dtype=torch.int64).view(3, 16, 16)
        return ((base * 7 + i * 31) % 256).to(torch.uint8), i


@contextmanager
def as_worker(slots: int) -> Iterator[shared_buffers.SlotTable]:
    """This process as worker 0 of a loader's ring of ``slots`` slots (its table), no ring
    again after."""
    init = shared_buffers.RingInit(None)
    init.table = shared_buffers.SlotTable(1, slots=slots)
    init(0)
    try:
        yield init.table
    finally:
        init.table = None
        init(0)
