"""ShardSampler: a few shards at a time, equal shares across ranks, and the rest of an epoch
resumed exactly under another world size (here by the sampler alone and through the loader;
with real gloo ranks in test_ranks.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from shardsets import tar_of

import fastload
from fastload import transforms as T
from fastload.shards.sampler import ShardSampler, epoch_order

SIZES = [7, 9, 8, 10, 6, 9, 8, 7, 11, 9, 6, 10]  # 100 samples in 12 shards


class Sized:
    """Stands for a dataset: only its shard sizes matter to the sampler."""

    shard_sizes = np.array(SIZES)


def _shard_of(index: int) -> int:
    return int(np.searchsorted(np.cumsum(SIZES), index, side="right"))


def test_an_epoch_is_every_sample_once_and_a_function_of_seed_and_epoch() -> None:
    order = epoch_order(SIZES, seed=3, epoch=0, window=2, partitions=2)
    assert sorted(order.tolist()) == list(range(100))
    assert (order == epoch_order(SIZES, seed=3, epoch=0, window=2, partitions=2)).all()
    assert (order != epoch_order(SIZES, seed=3, epoch=1, window=2, partitions=2)).any()
    assert (order != epoch_order(SIZES, seed=4, epoch=0, window=2, partitions=2)).any()
    plain = epoch_order(SIZES, seed=3, epoch=0, window=2, partitions=1, shuffle=False)
    assert plain.tolist() == list(range(100))


@pytest.mark.parametrize("window", [1, 2, 4])
def test_a_shard_is_read_within_its_window(window: int) -> None:
    order = epoch_order(SIZES, seed=0, epoch=0, window=window, partitions=1).tolist()
    shards = [_shard_of(i) for i in order]
    span = window * max(SIZES)
    for shard in set(shards):
        positions = [p for p, s in enumerate(shards) if s == shard]
        assert positions[-1] - positions[0] < span
    # and the samples of a window are mixed, not shard after shard
    if window > 1:
        changes = sum(a != b for a, b in itertools.pairwise(shards))
        assert changes > len(SIZES) * 2


def test_ranks_read_their_own_shards_and_equal_shares() -> None:
    mine = [list(ShardSampler(Sized(), num_replicas=2, rank=r, window=2)) for r in range(2)]
    assert len(mine[0]) == len(mine[1]) == 50
    assert set(mine[0]).isdisjoint(mine[1]) and set(mine[0]) | set(mine[1]) == set(range(100))
    shards = [{_shard_of(i) for i in m} for m in mine]
    assert len(shards[0] & shards[1]) <= 1  # one cut between the two spans


def test_a_split_that_is_not_even_pads_or_drops_as_distributed_sampler_does() -> None:
    padded = [list(ShardSampler(Sized(), num_replicas=3, rank=r)) for r in range(3)]
    assert [len(m) for m in padded] == [34] * 3
    everything = [i for p in padded for i in p]
    assert set(everything) == set(range(100)) and len(everything) - len(set(everything)) == 2
    dropped = [
        list(ShardSampler(Sized(), num_replicas=3, rank=r, drop_last=True)) for r in range(3)
    ]
    assert [len(m) for m in dropped] == [33] * 3 and len({i for d in dropped for i in d}) == 99


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3), (3, 2), (2, 4)])
@pytest.mark.parametrize("k", [0, 5, 12])
def test_the_rest_of_an_epoch_under_another_world_size(before: int, after: int, k: int) -> None:
    old = [ShardSampler(Sized(), num_replicas=before, rank=r, seed=7) for r in range(before)]
    for sampler in old:
        sampler.set_epoch(3)
    taken = [list(s)[:k] for s in old]
    state = old[0].state_dict(consumed=k)
    assert state["consumed"] == k * before and state["epoch"] == 3
    new = [ShardSampler(Sized(), num_replicas=after, rank=r, seed=7) for r in range(after)]
    for sampler in new:
        sampler.load_state_dict(state)
        sampler.set_epoch(3)  # a training loop sets the epoch again: the place is kept
    rest = [list(s) for s in new]
    seen = [i for t in taken for i in t]
    remaining = 100 - len(seen)
    assert all(len(r) == -(-remaining // after) for r in rest)
    padding = -(-remaining // after) * after - remaining
    got = [i for r in rest for i in r]
    assert sorted(set(seen) | set(got)) == list(range(100))
    assert len(seen) + len(got) == 100 + padding  # only the padding repeats
    if after == before:  # the same world: exactly what the uninterrupted ranks had left
        whole = [ShardSampler(Sized(), num_replicas=before, rank=r, seed=7) for r in range(before)]
        for sampler in whole:
            sampler.set_epoch(3)
        assert rest == [list(s)[k:] for s in whole]


def test_the_next_epoch_after_a_resumed_one_is_whole_again() -> None:
    sampler = ShardSampler(Sized(), seed=1)
    sampler.load_state_dict({**sampler.state_dict(), "consumed": 40})
    assert len(sampler) == 60 and len(list(sampler)) == 60
    sampler.set_epoch(1)
    assert len(list(sampler)) == 100
    resumed = ShardSampler(Sized(), seed=1)
    resumed.load_state_dict({**resumed.state_dict(), "consumed": 40, "epoch": 5})
    resumed.set_epoch(6)  # another epoch lets the loaded place go
    assert len(list(resumed)) == 100


def test_bad_options_and_foreign_states_are_refused() -> None:
    with pytest.raises(TypeError, match=r"fastload\.ImageShards"):
        ShardSampler(list(range(10)))
    with pytest.raises(ValueError, match=r"rank=2 must be in \[0, 1\]"):
        ShardSampler(Sized(), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="window=0"):
        ShardSampler(Sized(), window=0)
    state = ShardSampler(Sized(), seed=1).state_dict()
    with pytest.raises(ValueError, match="seed 1 in the state, 2 here"):
        ShardSampler(Sized(), seed=2).load_state_dict(state)


def numbered_shards(folder: Path, sizes: list[int]) -> list[Path]:
    """Shards whose sample ``i`` (counted across shards) has label ``i``."""
    from images import jpeg_bytes, photo

    folder.mkdir(parents=True, exist_ok=True)
    shards, number = [], 0
    for k, size in enumerate(sizes):
        members = []
        for _ in range(size):
            members.append((f"{number:05d}.cls", str(number).encode()))
            members.append((f"{number:05d}.jpg", jpeg_bytes(photo(24, 20, seed=number))))
            number += 1
        shards.append(tar_of(folder / f"n{k:03d}.tar", members))
    return shards


def test_the_loader_carries_the_place_to_another_world_size(tmp_path: Path) -> None:
    numbered_shards(tmp_path / "s", [6, 5, 7, 6])  # 24 samples
    dataset = fastload.ImageShards(tmp_path / "s", T.CenterCrop(16))

    def loader(world: int, rank: int) -> fastload.DataLoader:
        sampler = ShardSampler(dataset, num_replicas=world, rank=rank, window=2, seed=9)
        return fastload.DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=1)

    ranks = [loader(2, r) for r in range(2)]
    iterators = [iter(r) for r in ranks]
    seen = [int(y) for it in iterators for _ in range(3) for y in next(it)[1]]
    state = ranks[0].state_dict()
    assert state["epochs"]["sampler_position"]["consumed"] == 12
    rest = []
    for rank in range(3):
        resumed = loader(3, rank)
        resumed.load_state_dict(state)
        rest += [int(y) for _, batch in resumed for y in batch]
    assert sorted(seen + rest) == list(range(24))
    again = loader(3, 0)
    again.load_state_dict(state)
    assert len(again) == 2  # 4 samples each: two batches


def test_the_loader_resumes_the_same_world_with_the_same_pixels(tmp_path: Path) -> None:
    numbered_shards(tmp_path / "s", [6, 5, 7, 6])
    dataset = fastload.ImageShards(tmp_path / "s", T.RandomResizedCrop(16))

    def loader() -> fastload.DataLoader:
        sampler = ShardSampler(dataset, num_replicas=2, rank=1, window=2, seed=9)
        return fastload.DataLoader(
            dataset,
            batch_size=2,
            sampler=sampler,
            num_workers=2,
            generator=torch.Generator().manual_seed(4),
        )

    whole = list(loader())
    first = loader()
    it = iter(first)
    next(it)
    next(it)
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(whole) - 2
    for (x, y), (xw, yw) in zip(rest, whole[2:], strict=True):
        assert torch.equal(y, yw) and torch.equal(x, xw)
