"""A dataset whose batches show where they came from, for the tests of batch memory."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Ramps(Dataset):
    """uint8 images whose every pixel depends on the index, and int labels."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        base = torch.arange(3 * 16 * 16, dtype=torch.int64).view(3, 16, 16)
        return ((base * 7 + i * 31) % 256).to(torch.uint8), i
