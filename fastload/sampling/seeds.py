"""The seeds of an epoch's samples and batches, and the keys that carry them to the dataset.

Each seed is derived, never drawn (SplitMix64's finaliser over the epoch's seed and a position),
so the same epoch gives the same seeds wherever a sample is loaded. :class:`SampleKey` is an
index that carries its sample's seed; :class:`KeyedBatch` a batch of them with the batch's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "KeyedBatch",
    "SampleKey",
    "SeededSamples",
    "Seeding",
    "batch_seed",
    "epoch_seed",
    "sample_seed",
    "sample_seeds",
]


Seeding = Literal["sample", "worker"]
_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    """SplitMix64's finaliser: nearby inputs give unrelated 64-bit outputs."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def sample_seed(epoch: int, position: int) -> int:
    """The seed of the sample at ``position`` (0-based, in sampler order) of an epoch."""
    return _mix(epoch ^ _mix(position)) >> 1  # 63 bits: any torch generator takes it


def sample_seeds(epoch: int, first: int, count: int) -> list[int]:
    """:func:`sample_seed` of the ``count`` samples from ``first`` on, computed together (a
    batch's: in numpy's wrapping uint64 arithmetic, half the time of one by one, in the loop
    that hands thread workers their batches)."""
    positions = np.arange(first, first + count, dtype=np.uint64)
    return (_mixed(np.uint64(epoch) ^ _mixed(positions)) >> np.uint64(1)).tolist()


def _mixed(values: np.ndarray) -> np.ndarray:
    """:func:`_mix` of each uint64 (the multiplications wrap as ``& _MASK`` does)."""
    values = values + np.uint64(0x9E3779B97F4A7C15)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def batch_seed(epoch: int, number: int) -> int:
    """The seed of batch ``number`` (0-based) of an epoch: its batch ops draw from it."""
    return _mix(epoch ^ _mix(number ^ 0xBA7C4 << 40)) >> 1


def epoch_seed(state: torch.Tensor, *, epoch: int, rank: int = 0) -> int:
    """An epoch's seed, from the random state its sampler starts from (read from a copy).

    Args:
        state: A CPU generator's state (``Generator.get_state()``).
        epoch: How many epochs the loader had started before this one.
        rank: The sampler's rank under ``DistributedSampler`` (0 otherwise).
    """
    copy = torch.Generator()
    copy.set_state(state)
    drawn = int(torch.randint(0, 1 << 62, (1,), generator=copy).item())
    return _mix(_mix(drawn) ^ _mix(epoch) ^ _mix(rank << 32 | 0x5EED)) >> 1


class SampleKey(int):
    """A dataset index that carries its sample's seed; an ``int`` to any code that indexes.

    fastload's datasets run each sample under :func:`seeded` with it. Other datasets see a
    plain index.
    """

    seed: int  # (an int subclass cannot have __slots__: the attribute lives in __dict__)

    def __new__(cls, index: int, seed: int) -> SampleKey:
        key = super().__new__(cls, index)
        key.seed = seed
        return key

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:  # the trip to a worker process
        return SampleKey, (int(self), self.seed)

    def __repr__(self) -> str:
        return f"SampleKey({int(self)}, seed={self.seed})"


def _keys(indices: list[int], seeds: list[int], seed: int) -> KeyedBatch:
    return KeyedBatch((SampleKey(i, s) for i, s in zip(indices, seeds, strict=True)), seed)


class KeyedBatch(list[SampleKey]):
    """A batch of :class:`SampleKey`, and the batch's own seed (:func:`batch_seed`).

    Sent to a worker as two lists of ints (5x faster to pickle than key by key).
    """

    def __init__(self, keys: Iterable[SampleKey], seed: int) -> None:
        super().__init__(keys)
        self.seed = seed

    def __reduce__(self) -> tuple[Any, tuple[list[int], list[int], int]]:
        return _keys, ([int(k) for k in self], [k.seed for k in self], self.seed)


class SeededSamples(list[Any]):
    """A batch's samples, with the batch's seed: what a fastload dataset's ``__getitems__``
    returns for a :class:`KeyedBatch`, so that the collate function can hand the seed on."""

    def __init__(self, samples: Iterable[Any], seed: int) -> None:
        super().__init__(samples)
        self.seed = seed
