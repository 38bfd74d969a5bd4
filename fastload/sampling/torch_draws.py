"""torch's CPU generator's draws, reproduced without calling torch.

A thread worker's sample draws its crop and flip from a ``torch.Generator`` of its own. Each of
those torch calls (``uniform_``, ``random_``, ``item``, the generator's creation and seeding)
lets go of the GIL and takes it back; with many worker threads every one of those hand-overs
waits for the others, and on a 16-core machine the draws were the largest share of the time
the threads spent waiting for the GIL. The numbers themselves are cheap: torch's CPU generator
is a standard MT19937 seeded from the seed's low 32 bits, which numpy's legacy
``RandomState`` reproduces word for word, and the two distributions fastload's ops draw are
simple functions of one 32-bit word each. So :class:`TorchWords` makes the same numbers in a
few microseconds of Python that never lets go of the GIL.

What torch does with a word (``ATen/core/TransformationHelper.h``, ``DistributionsHelper.h``):

* ``random_(low, high)`` with ``high - low < 2**32``: ``word % (high - low) + low``;
* ``uniform_(low, high)`` on a float32 tensor: ``x = (word & (2**24 - 1)) * 2**-24``, then
  ``x * (high - low) + low`` in float32, with ``low`` and ``high`` rounded to float32 first.
  torch's CPU kernels are compiled per instruction set, and where the compiler fused the last
  multiply-add (one rounding instead of two) the results differ in the last bit now and then.
  Which of the two this torch does is measured once (:func:`words_for`), against torch itself;
  where neither matches, or torch's default dtype is not float32, nothing is reproduced and
  the caller draws from torch as before.
"""

from __future__ import annotations

import functools
import struct
import threading
from fractions import Fraction

import numpy as np
import torch

__all__ = ["INTEGER_SPAN", "TorchWords", "advance", "fused_uniform", "words_for"]

_MASK24 = (1 << 24) - 1
_UNIT = 2.0**-24
# a crop and a flip take 3-5 words (two more for each crop tried again)
_WORDS_AT_ONCE = 5
# torch draws one word for an integer range under this many values in every version seen (2.14
# draws two from 2**28 on, older versions from 2**32): wider ranges are left to torch.
INTEGER_SPAN = 1 << 24
_LOCAL = threading.local()


def _words(seed: int, count: int) -> list[int]:
    """The first ``count`` words of torch's generator seeded with ``seed``."""
    state = getattr(_LOCAL, "state", None)
    if state is None:  # one per thread: a fresh RandomState costs ~60 us, a reseed ~1
        bits = np.random.MT19937()
        state = _LOCAL.state = (np.random.RandomState(bits), bits.random_raw)
    seeder, raw = state
    seeder.seed(seed & 0xFFFFFFFF)  # torch seeds its MT19937 as numpy's legacy seed does
    # the generator's own words, a word at a time: numpy lets go of the GIL to fill an array (a
    # hand-over among the worker threads), not for one number; ~0.25 us a word, where
    # randint's checks of its range and dtype cost ~1.2
    return [raw() for _ in range(count)]


class TorchWords:
    """The words a ``torch.Generator`` seeded with ``seed`` hands out, and the draws made
    from them, in torch's order.

    Args:
        seed: The generator's seed (``torch.Generator().manual_seed(seed)``).
        fused: Whether this torch's float32 ``uniform_`` rounds its multiply-add once
            (measured against torch by :func:`words_for`).
    """

    def __init__(self, seed: int, *, fused: bool) -> None:
        self._seed = seed
        self._fused = fused
        self._words = _words(seed, _WORDS_AT_ONCE)
        self.used = 0  # words handed out so far

    def _word(self) -> int:
        if self.used == len(self._words):
            self._words = _words(self._seed, self.used + _WORDS_AT_ONCE)
        word = self._words[self.used]
        self.used += 1
        return word

    def integer(self, low: int, high: int) -> int | None:
        """``torch.empty(1, dtype=torch.int64).random_(low, high).item()``; ``None`` (nothing
        drawn) for a range of :data:`INTEGER_SPAN` values or more."""
        span = high - low
        if not 0 < span < INTEGER_SPAN:
            return None
        return self._word() % span + low

    def uniform(self, low: float, high: float) -> float:
        """``torch.empty(1).uniform_(low, high).item()`` with float32 as torch's default dtype."""
        return _uniform(self._word(), low, high, fused=self._fused)


def advance(generator: torch.Generator, words: int) -> torch.Generator:
    """``generator`` moved past ``words`` words (one integer draw of a narrow range each)."""
    if words:
        torch.empty(words, dtype=torch.int64).random_(0, 1 << 16, generator=generator)
    return generator


def _uniform(word: int, low: float, high: float, *, fused: bool) -> float:
    """What torch's float32 ``uniform_`` makes of one word (in Python floats: every value
    below is exact in float64, and :func:`_float32` rounds as a C cast does)."""
    low32, span = _range32(low, high)
    x = (word & _MASK24) * _UNIT  # a 24-bit integer times a power of two
    product = x * span  # exact: 24 bits times 24 bits
    if not fused:
        # two float32 values: their float64 sum is exact, or the smaller is too small beside
        # the other to move its rounding
        return _float32(_float32(product) + low32)
    # one rounding of product + low32: rounded to float64 first, which changes the float32
    # result only where the float64 sum lies exactly halfway between two float32 values
    total = product + low32
    once = _float32(total)
    other = 2 * total - once  # the float32 neighbour on total's other side, when halfway
    if once != total and _float32(other) == other:
        exact = Fraction(product) + Fraction(low32)
        if exact != total:  # the float64 rounding moved it off the halfway point
            once = once if abs(Fraction(once) - exact) < abs(Fraction(other) - exact) else other
    return once


_FLOAT32 = struct.Struct("<f")


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (ties to even), as a Python float."""
    rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    return rounded


@functools.lru_cache(maxsize=64)
def _range32(low: float, high: float) -> tuple[float, float]:
    """torch's float32 ``low`` and ``high - low`` (computed in float32)."""
    low32, high32 = _float32(low), _float32(high)
    return low32, _float32(high32 - low32)


# Ranges the check draws from: RandomResizedCrop's scale and log-ratio ranges, a flip's [0, 1),
# and wide ones with negative ends.
_CHECKS = ((0.08, 1.0), (-0.2876820724517809, 0.2876820724517809), (0.0, 1.0), (-3.5, 17.25))
_CHECK_DRAWS = 1024  # about one in seven tells the two roundings apart


@functools.cache
def fused_uniform() -> bool | None:
    """Whether this torch's float32 ``uniform_`` rounds once (``True``) or twice (``False``),
    measured against torch; ``None`` when neither reproduces it."""
    generator = torch.Generator()
    answers = {True: True, False: True}
    for k, (low, high) in enumerate(_CHECKS):
        seed = 0x9E3779B97F4A7C15 + k
        drawn = torch.empty(_CHECK_DRAWS, dtype=torch.float32)
        drawn.uniform_(low, high, generator=generator.manual_seed(seed))
        words = _words(seed, _CHECK_DRAWS)
        for fused in answers:
            if answers[fused]:
                mine = [_uniform(w, low, high, fused=fused) for w in words]
                answers[fused] = mine == drawn.tolist()
    # integers, and a generator moved on by advance() where the words say
    integers = torch.empty(64, dtype=torch.int64)
    integers.random_(3, INTEGER_SPAN - 1, generator=advance(generator.manual_seed(7), 5))
    words = _words(7, 69)[5:]
    if [w % (INTEGER_SPAN - 4) + 3 for w in words] != integers.tolist():
        return None
    if answers[True] == answers[False]:  # neither, or (never seen) no word told them apart
        return None
    return answers[True]


def words_for(seed: int) -> TorchWords | None:
    """The draws of ``torch.Generator().manual_seed(seed)``, reproduced; ``None`` where they
    cannot be (torch's default dtype is not float32, or the check against torch failed)."""
    if torch.get_default_dtype() != torch.float32:
        return None
    fused = fused_uniform()
    return None if fused is None else TorchWords(seed, fused=fused)
