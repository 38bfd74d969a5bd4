"""A dataset that waits like network storage before each sample (:class:`SlowStorage`)."""

from __future__ import annotations

import math
import random
import time
from typing import Any

__all__ = ["SlowStorage"]


class SlowStorage:
    """A dataset whose every sample first waits, as on network storage: a log-normal latency
    of mean ``ms`` and shape ``sigma``, seeded by the sample's index, so every run and every
    loader waits the same for the same sample.

    Args:
        dataset: What to read after the wait (any map-style dataset).
        ms: The mean wait, in milliseconds.
        sigma: How uneven the waits are (the log-normal's sigma; 1 gives a long tail: about one
            sample in twenty waits three times the mean).
    """

    def __init__(self, dataset: Any, *, ms: float, sigma: float = 0.5) -> None:
        if not ms > 0:
            raise ValueError(f"ms={ms!r} must be a positive number of milliseconds")
        if not sigma >= 0:
            raise ValueError(f"sigma={sigma!r} must be >= 0 (0: every sample waits ms)")
        self.dataset, self.ms, self.sigma = dataset, ms, sigma
        self.mu = math.log(ms / 1000.0) - sigma**2 / 2  # the mean of exp(N(mu, sigma)) is ms

    def __len__(self) -> int:
        return len(self.dataset)

    def wait(self, index: int) -> float:
        """The seconds sample ``index`` waits."""
        return random.Random(int(index)).lognormvariate(self.mu, self.sigma)

    def __getitem__(self, index: int) -> Any:
        time.sleep(self.wait(index))
        return self.dataset[index]

    def __repr__(self) -> str:  # what autotune's cache key sees
        return f"SlowStorage({self.dataset!r}, ms={self.ms}, sigma={self.sigma})"
