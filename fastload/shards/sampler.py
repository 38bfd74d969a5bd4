"""``ShardSampler``: an epoch's order that reads a few shards at a time, and resumes elastically.

The order of an epoch is a pure function of the seed, the epoch and the number of partitions
(:func:`epoch_order`):

1. the shards are shuffled, and their samples laid end to end in that order;
2. that sequence is cut into ``partitions`` spans of equal length (a shard at a cut is split
   between two spans);
3. within each span, the samples of each ``window`` consecutive shards are shuffled together;
4. the spans are interleaved, one sample of each in turn: this is the epoch's global order.

Rank ``r`` of ``W`` takes every ``W``-th sample of the global order from position ``r``. With
``partitions`` a multiple of ``W`` (by default they are equal), every rank reads whole spans:
whole shards but for two at the cuts, a window at a time. After ``k`` samples per rank, the
ranks have consumed exactly the first ``k * W`` samples of the global order, whatever ``W`` is,
so the state is a few numbers (epoch, samples consumed, seed, partitions), and the rest of the
epoch can be split among another number of ranks: every sample once, none repeated, none lost
(up to the padding every split needs when the rest is not a multiple of the ranks, as
``DistributedSampler`` pads). Nothing lives in shared memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from fastload.checks import differences

__all__ = ["ShardSampler", "epoch_order"]


def epoch_order(
    sizes: Sequence[int] | np.ndarray,
    *,
    seed: int,
    epoch: int,
    window: int,
    partitions: int,
    shuffle: bool = True,
) -> np.ndarray:
    """An epoch's global order of sample indices (see the module's notes).

    Args:
        sizes: Samples per shard; shard ``s``'s samples are numbered after those of the shards
            before it.
        seed: The seed shared by all ranks.
        epoch: The epoch.
        window: Shards whose samples are shuffled together.
        partitions: Spans the order is cut into (rank ``r`` of ``W`` reads spans
            ``r, r + W, ...`` when ``W`` divides ``partitions``).
        shuffle: Shuffle the shards and the samples within windows; ``False`` keeps the
            stored order within each span.

    Returns:
        Every sample index once, as an int64 array.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    total = int(sizes.sum())
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, epoch])
    shards = rng.permutation(len(sizes)) if shuffle else np.arange(len(sizes))
    counts = sizes[shards]
    piece = np.repeat(np.arange(len(shards)), counts)  # position of each sample's shard
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    sequence = starts[shards][piece] + within
    bounds = np.arange(partitions + 1) * total // partitions
    spans = []
    for p in range(partitions):
        span = sequence[bounds[p] : bounds[p + 1]]
        if shuffle and len(span):
            windows = piece[bounds[p] : bounds[p + 1]]
            windows = (windows - windows[0]) // window
            span = span[np.lexsort((rng.random(len(span)), windows))]
        spans.append(span)
    longest = max((len(s) for s in spans), default=0)
    grid = np.full((longest, partitions), -1, dtype=np.int64)
    for p, span in enumerate(spans):
        grid[: len(span), p] = span
    flat = grid.ravel()
    return flat[flat >= 0]


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class _Counted:
    """An iterator over a rank's indices that counts what it has handed out."""

    def __init__(self, indices: list[int]) -> None:
        self._indices = iter(indices)
        self.count = 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> int:
        index = next(self._indices)
        self.count += 1
        return index


class ShardSampler(Sampler[int]):
    """Sample order for shards: a few shards at a time, split across ranks, resumable under
    another world size (see the module's notes).

    Deterministic from ``seed`` and the epoch (:meth:`set_epoch`), as ``DistributedSampler``
    is; every rank gets the same number of samples. :meth:`state_dict` after ``k`` samples
    per rank (ranks step together, as in DDP) and :meth:`load_state_dict` in a new job give the
    rest of that epoch to the new job's ranks, whatever their number. ``fastload.DataLoader``
    carries this state in its own ``state_dict``. Over remote shards, each iteration starts the
    dataset's read-ahead of this rank's shards, in this order (``ImageShards.read_ahead``).

    Args:
        dataset: A :class:`fastload.ImageShards`, a :class:`fastload.ImageTable` read a row
            group at a time (anything with ``shard_sizes``).
        shuffle: Shuffle the shards, and the samples within each window.
        seed: The seed, the same on every rank.
        window: How many shards' samples are shuffled together: more mixes better, and keeps
            more shards in use at once.
        num_replicas: The number of ranks (default: ``torch.distributed``'s world size, or 1).
        rank: This rank (default: ``torch.distributed``'s rank, or 0).
        drop_last: Drop the end of the order so that it splits evenly across ranks, instead of
            padding it with samples from its start.
        partitions: Spans each epoch's order is cut into (default: ``num_replicas``); each rank
            reads whole spans when its number divides this.

    Raises:
        TypeError: The dataset has no shards.
        ValueError: A bad option.
    """

    elastic = True  # fastload.DataLoader saves and loads its place itself (see state_dict)

    def __init__(
        self,
        dataset: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        window: int = 8,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        partitions: int | None = None,
    ) -> None:
        sizes = getattr(dataset, "shard_sizes", None)
        if sizes is None:
            raise TypeError(
                f"ShardSampler orders the samples of shards: the dataset must be a "
                f"fastload.ImageShards or a fastload.ImageTable with in_memory=False (its row "
                f"groups), got {type(dataset).__name__}"
            )
        world, here = _world()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = here if rank is None else rank
        self.partitions = self.num_replicas if partitions is None else partitions
        for name, value in (("num_replicas", self.num_replicas), ("window", window)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int of at least 1")
        if not isinstance(self.partitions, int) or self.partitions < 1:
            raise ValueError(f"partitions={self.partitions!r} must be an int of at least 1")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank={self.rank!r} must be in [0, {self.num_replicas - 1}]")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self._dataset = dataset
        self._ahead: Any = None  # the dataset's read-ahead of remote shards, this epoch
        self.shuffle, self.seed, self.window, self.drop_last = shuffle, seed, window, drop_last
        self.epoch = 0
        self._pending: tuple[int, int] | None = None  # (consumed, partitions) loaded
        self._current: tuple[int, int, int] | None = None  # (epoch, start, partitions)
        self._counted: _Counted | None = None

    @property
    def total(self) -> int:
        """Samples in the dataset."""
        return int(self.sizes.sum())

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives (a loaded state of another epoch is
        let go)."""
        if epoch != self.epoch:
            self._pending = None
        self.epoch = epoch

    def _length(self, start: int) -> int:
        """Samples per rank in an epoch whose first ``start`` samples were consumed."""
        rest = max(self.total - start, 0)
        if self.drop_last:
            return rest // self.num_replicas
        return -(-rest // self.num_replicas)

    def __len__(self) -> int:
        start = self._pending[0] if self._pending is not None else 0
        return self._length(start)

    def order(self, *, partitions: int | None = None) -> np.ndarray:
        """This epoch's global order (every rank's samples, interleaved)."""
        return epoch_order(
            self.sizes,
            seed=self.seed,
            epoch=self.epoch,
            window=self.window,
            partitions=self.partitions if partitions is None else partitions,
            shuffle=self.shuffle,
        )

    def __iter__(self) -> Iterator[int]:
        start, partitions = self._pending or (0, self.partitions)
        self._pending = None
        self._current = (self.epoch, start, partitions)
        order = self.order(partitions=partitions)
        length = self._length(start) * self.num_replicas
        if length > len(order) - start:  # padded with the order's first samples, as torch does
            order = np.resize(order, start + length)
        mine = order[start : start + length][self.rank :: self.num_replicas]
        counted = self._counted = _Counted(mine.tolist())
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        read_ahead = getattr(self._dataset, "read_ahead", None)
        if read_ahead is not None:
            self._ahead = read_ahead(mine, lambda: counted.count, window=self.window)
        return counted

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ahead": None}  # threads stay in the process that runs them

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """Where the epoch stands: the samples consumed by all ranks together.

        Args:
            consumed: The samples this rank has consumed since the current iteration began
                (each rank the same number); by default, the number this sampler has handed
                out, which is ahead of the consumer when a loader reads ahead.
                ``fastload.DataLoader`` passes the exact number.
        """
        if self._pending is not None:
            (start, partitions), epoch = self._pending, self.epoch
        elif self._current is not None:
            epoch, start, partitions = self._current
            done = self._counted.count if consumed is None and self._counted else consumed or 0
            start = min(start + done * self.num_replicas, self.total)
        else:
            epoch, start, partitions = self.epoch, 0, self.partitions
        return {
            "epoch": epoch,
            "consumed": start,
            "seed": self.seed,
            "partitions": partitions,
            "window": self.window,
            "shuffle": self.shuffle,
            "samples": self.total,
            "shards": len(self.sizes),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the next iteration gives this rank its share of
        the rest of that epoch, among this sampler's ``num_replicas`` ranks.

        Raises:
            ValueError: The state is of another dataset, seed, window or shuffle.
        """
        mine = {"seed": self.seed, "window": self.window, "shuffle": self.shuffle}
        mine |= {"samples": self.total, "shards": len(self.sizes)}
        differ = differences(state, mine, there="in the state")
        if differ:
            raise ValueError(
                "this ShardSampler state is of another order, so it cannot resume this one: "
                + "; ".join(differ)
            )
        self.epoch = int(state["epoch"])
        self._pending = (int(state["consumed"]), int(state["partitions"]))
        self._current, self._counted = None, None
