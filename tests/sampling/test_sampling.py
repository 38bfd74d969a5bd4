"""Seeded samples: a batch of them in streams_kept draws as each would alone, and leaves the
process's streams as it found them."""

from __future__ import annotations

import random

import numpy as np
import torch

from fastload.sampling import sample_seed, sample_seeds, seeded, streams_kept


def _draw() -> tuple[float, float, float]:
    return torch.rand(1).item(), random.random(), float(np.random.rand())


def _streams() -> tuple[object, ...]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _same_streams(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    numpy_a, numpy_b = a[2], b[2]
    return (
        torch.equal(a[0], b[0])
        and a[1] == b[1]
        and all(np.array_equal(x, y) for x, y in zip(numpy_a, numpy_b, strict=True))
    )


def test_a_kept_batch_draws_as_its_samples_alone_and_puts_the_streams_back() -> None:
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    seeds = [11, 12, 11, 2**40 + 5]
    alone = []
    for seed in seeds:
        with seeded(seed):
            alone.append(_draw())
    before = _streams()
    kept = []
    with streams_kept():
        for seed in seeds:
            with seeded(seed):
                kept.append(_draw())
                kept.append(_draw())  # a sample drawing twice leaves nothing to the next
    assert kept[::2] == alone
    assert _same_streams(_streams(), before)


def test_a_sample_with_no_seed_in_a_kept_batch_draws_from_the_processs_streams() -> None:
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    before = _streams()
    want = _draw()
    torch.set_rng_state(before[0]), random.setstate(before[1]), np.random.set_state(before[2])
    with streams_kept():
        with seeded(7):
            _draw()
        with seeded(None):
            got = _draw()
        with seeded(8):
            _draw()
    assert got == want
    after = _streams()  # the process's streams, one draw on: the unseeded sample's
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    _draw()
    assert _same_streams(after, _streams())


def test_a_batchs_seeds_are_each_samples_seed() -> None:
    rng = random.Random(3)
    for epoch, first in [
        (0, 0),
        ((1 << 63) - 1, (1 << 64) - 70),
        *[(rng.getrandbits(63), rng.getrandbits(rng.choice([8, 40, 63]))) for _ in range(50)],
    ]:
        seeds = sample_seeds(epoch, first, 64)
        assert seeds == [sample_seed(epoch, first + k) for k in range(64)]
        assert all(type(seed) is int and 0 <= seed < 1 << 63 for seed in seeds)
    assert sample_seeds(5, 7, 0) == []
