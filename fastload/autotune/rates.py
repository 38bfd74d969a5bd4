"""Measuring loaders: iterating past their epochs, and how fast a stream of batches arrives.

:func:`read_rate` is the one measuring loop: autotune's candidates, bench's contenders and
doctor's loader-alone reading all go through it, each with its own stopping rule, and tests give
it a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastload.memory.tensors import batch_size_of

__all__ = ["Reading", "endless", "read_rate"]


def endless(loader: Iterable[Any]) -> Generator[Any, None, None]:
    """Batches from ``loader``, epoch after epoch, without end.

    Raises:
        ValueError: An epoch yields no batch (an empty dataset).
    """
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the loader yields no batch: is the dataset empty?")


@dataclass(frozen=True)
class Reading:
    """What a stream of batches delivered while it was read.

    Attributes:
        samples: Samples in the batches read.
        batches: Batches read.
        seconds: The time they took.
    """

    samples: int
    batches: int
    seconds: float

    @property
    def rate(self) -> float:
        """Samples per second."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def read_rate(
    batches: Iterator[Any],
    *,
    seconds: float | None = None,
    count: int | None = None,
    stop: Callable[[int, int, float], bool] | None = None,
    sync: Callable[[], None] | None = None,
    each: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Reading:
    """Read batches until ``seconds`` have passed (and a sample arrived), ``count`` batches
    were read, or ``stop(samples, batches, seconds)`` says so after a batch.

    Args:
        batches: The stream (warmed up by the caller: its first batches are not special here).
        seconds: Read for this long.
        count: Read this many batches.
        stop: Asked after each batch.
        sync: Called before the last reading of the clock (a CUDA device's work finishing).
        each: Called after each batch (a progress tick).
        clock: Seconds, monotonic.

    Raises:
        ValueError: No way to stop was given.
    """
    if seconds is None and count is None and stop is None:
        raise ValueError("read_rate needs seconds, count or stop")
    samples = read = 0
    start = clock()
    while True:
        samples += batch_size_of(next(batches))
        read += 1
        if each is not None:
            each()
        elapsed = clock() - start
        if (
            (seconds is not None and elapsed >= seconds and samples)
            or (count is not None and read >= count)
            or (stop is not None and stop(samples, read, elapsed))
        ):
            if sync is not None:
                sync()
                elapsed = clock() - start
            return Reading(samples, read, elapsed)
