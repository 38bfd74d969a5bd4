"""torch's CPU draws reproduced in Python (fastload.sampling.torch_draws), checked against torch
itself."""

from __future__ import annotations

import random
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch

from fastload.sampling import torch_draws
from fastload.sampling.drawing import SampleStreams
from fastload.sampling.torch_draws import INTEGER_SPAN, advance, words_for


def _torch_uniform(generator: torch.Generator, low: float, high: float) -> float:
    return torch.empty(1).uniform_(low, high, generator=generator).item()


def _torch_integer(generator: torch.Generator, low: int, high: int) -> int:
    return int(torch.empty(1, dtype=torch.int64).random_(low, high, generator=generator).item())


def test_this_torch_is_reproduced() -> None:
    # None would mean every thread worker's draw goes through torch again: a silent slowdown
    assert words_for(0) is not None


def test_draws_equal_torchs_in_any_order() -> None:
    rng = random.Random(0)
    for _ in range(1500):
        seed = rng.getrandbits(64)
        generator = torch.Generator().manual_seed(seed)
        words = words_for(seed)
        assert words is not None
        for _ in range(rng.randint(1, 40)):  # past the first block of words, sometimes
            if rng.random() < 0.5:
                low = rng.choice([0.08, 0.0, -0.2876820724517809, rng.uniform(-50, 50)])
                high = low + rng.choice([0.92, 1.0, 0.5753641449035618, rng.uniform(1e-4, 90)])
                assert words.uniform(low, high) == _torch_uniform(generator, low, high)
            else:
                low = rng.randint(-100, 100)
                high = low + rng.choice([1, 2, rng.randint(1, 5000), INTEGER_SPAN - 1])
                assert words.integer(low, high) == _torch_integer(generator, low, high)


def test_a_wide_integer_range_is_left_to_torch_and_draws_nothing() -> None:
    words = words_for(5)
    assert words is not None
    assert words.integer(0, INTEGER_SPAN) is None
    assert words.integer(3, 3) is None
    assert words.used == 0
    generator = torch.Generator().manual_seed(5)
    assert words.uniform(0.0, 1.0) == _torch_uniform(generator, 0.0, 1.0)


def test_advance_moves_a_generator_past_the_words_handed_out() -> None:
    words = words_for(11)
    assert words is not None
    drawn = [words.uniform(0.08, 1.0), words.integer(0, 400), words.uniform(0.0, 1.0)]
    generator = advance(torch.Generator().manual_seed(11), words.used)
    later = words_for(11)
    assert later is not None
    for _ in range(len(drawn)):
        later.integer(0, 2)  # moved past the same words
    assert _torch_uniform(generator, -2.0, 5.0) == later.uniform(-2.0, 5.0)
    assert _torch_integer(generator, 0, 1000) == later.integer(0, 1000)


def test_a_sample_hands_its_stream_to_torch_where_the_words_stopped() -> None:
    """A sample's fastload ops draw from the words; a transform run as written afterwards draws
    from its torch.Generator, which continues the same stream."""
    streams = SampleStreams(1234)
    words = streams.words()
    assert words is not None
    first = [words.uniform(0.08, 1.0), words.integer(0, 97)]
    generator = streams.torch
    assert streams.words() is None  # torch's generator is the stream from now on
    reference = torch.Generator().manual_seed(1234)
    assert first == [_torch_uniform(reference, 0.08, 1.0), _torch_integer(reference, 0, 97)]
    assert _torch_uniform(generator, 0.0, 1.0) == _torch_uniform(reference, 0.0, 1.0)


def test_nothing_is_reproduced_for_another_default_dtype() -> None:
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert words_for(1) is None
        assert SampleStreams(1).words() is None
    finally:
        torch.set_default_dtype(before)


def _float32(value: float) -> float:
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def _exact_fused(word: int, low: float, high: float) -> float:
    """x * span + low rounded once to float32, from exact fractions."""
    low32, high32 = _float32(low), _float32(high)
    span = _float32(high32 - low32)
    exact = Fraction(word & 0xFFFFFF, 1 << 24) * Fraction(span) + Fraction(low32)
    near = np.float32(float(exact))
    candidates = [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, -np.inf)]
    best = min(
        candidates,
        key=lambda c: (abs(Fraction(float(c)) - exact), int(np.float32(c).view(np.uint32)) & 1),
    )
    return float(best)


def test_both_roundings_of_torchs_uniform_against_references() -> None:
    """Whichever this torch does: the fused form is the exact value rounded once, the other is
    float32 arithmetic step by step (numpy's float32 operations)."""
    rng = random.Random(3)
    ranges = [(0.08, 1.0), (0.0, 1.0), (-3.5, 17.25), (1024.0, 1025.0), (2.0**-100, 1.5)]
    for _ in range(20000):
        low, high = rng.choice(ranges)
        word = rng.getrandbits(32)
        assert torch_draws._uniform(word, low, high, fused=True) == _exact_fused(word, low, high)
        x = np.float32(word & 0xFFFFFF) * np.float32(2.0**-24)
        span = np.float32(high) - np.float32(low)
        expected = float(x * span + np.float32(low))
        assert torch_draws._uniform(word, low, high, fused=False) == expected


def test_the_fused_form_where_rounding_twice_would_miss() -> None:
    """A float64 sum that lands exactly halfway between two float32 values while the exact sum
    does not: rounding the float64 sum again would pick the wrong neighbour."""
    word, low, high = 2512, 2.0**-100, 1.2272720336914062
    low32, span = _float32(low), _float32(_float32(high) - _float32(low))
    twice = _float32((word * 2.0**-24) * span + low32)
    once = torch_draws._uniform(word, low, high, fused=True)
    assert once == _exact_fused(word, low, high)
    assert once != twice


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 2**63 + 12345])
def test_seeds_past_32_bits_seed_as_torch_does(seed: int) -> None:
    words = words_for(seed)
    assert words is not None
    generator = torch.Generator().manual_seed(seed)
    assert [words.integer(0, 1000) for _ in range(20)] == [
        _torch_integer(generator, 0, 1000) for _ in range(20)
    ]
