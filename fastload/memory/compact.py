"""Many strings in two numpy arrays, with no Python object per string.

A dataset of a million samples keeps its paths or keys this way: reading an item of a Python
list in a forked DataLoader worker writes its reference count, which copies the page it sits on,
so over an epoch every worker would end up with a private copy of the whole list
(pytorch/pytorch issue 13246). Arrays have no per-item objects.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

__all__ = ["Strings"]


class Strings:
    """Strings stored as their UTF-8 (file system encoded) bytes plus offsets."""

    def __init__(self, strings: Iterable[str]) -> None:
        encoded = [os.fsencode(s) for s in strings]
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=self._offsets[1:])
        self._bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> str:
        start, end = self._offsets[index], self._offsets[index + 1]
        return os.fsdecode(self._bytes[start:end].tobytes())

    @property
    def nbytes(self) -> int:
        return self._offsets.nbytes + self._bytes.nbytes
