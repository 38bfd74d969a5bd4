"""Measuring real loaders for autotune: images/s, how busy the workers were, and what fits.

A candidate's measurement ends as soon as its rate is known well enough, or is clearly on one
side of the rate at which it would change the answer (racing), so clear losers and clear gains
cost a second or so each.
"""

from __future__ import annotations

import gc
import math
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from fastload.autotune.rates import endless, read_rate
from fastload.autotune.search import PREFETCH, PREFETCH_LIMIT
from fastload.system import children_cpu_seconds

__all__ = [
    "GAIN_PRECISION",
    "PRECISION",
    "WINDOW",
    "Z",
    "measure_loader",
    "measure_usage",
    "prefetch_limit",
    "settled",
]

# A candidate's measurement ends early once its mean rate is known to 2 % (relative standard
# error of the mean over windows of WINDOW seconds): finer than the 3 % within which the fewest
# workers are preferred to the best, and far coarser noise than this would take the whole time.
PRECISION = 0.02
WINDOW = 0.25
# It also ends once the search's question about it is answered (racing): its rate is clearly
# (Z standard errors) below the bar it must pass to matter, or clearly above it and known to
# GAIN_PRECISION. On a busy machine a rate known to 2 % can take longer than the whole budget.
Z = 2.0
GAIN_PRECISION = 0.05


def measure_loader(
    make_loader: Callable[[int], Any],
    num_workers: int,
    seconds: float,
    *,
    precision: float | None = None,
    bar: float | None = None,
) -> float:
    """Images/s of ``make_loader(num_workers)``: warm-up excluded, epochs chained as needed.

    The arguments are :func:`measure_usage`'s; it also says how busy the workers were.
    """
    return measure_usage(make_loader, num_workers, seconds, precision=precision, bar=bar)[0]


def measure_usage(
    make_loader: Callable[[int], Any],
    num_workers: int,
    seconds: float,
    *,
    precision: float | None = None,
    bar: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu: Callable[[], float | None] = children_cpu_seconds,
) -> tuple[float, float | None]:
    """Images/s of ``make_loader(num_workers)``, and how busy its workers were.

    Args:
        make_loader: Builds the loader for a worker count.
        num_workers: The worker count to measure.
        seconds: How long to measure (at most, with ``precision``).
        precision: Stop early once the rate is known this well: the relative standard error
            of the mean rate over windows of at least ``WINDOW`` seconds and ``num_workers``
            batches (workers deliver in bursts), with at least four windows. ``None``
            measures for ``seconds``.
        bar: With ``precision``, also stop once the rate is clearly below ``bar``, or
            clearly above it and known to ``GAIN_PRECISION`` (see :func:`settled`).
        clock: Seconds, monotonic (a fake one in tests).
        cpu: The CPU seconds this process's children used so far.

    Returns:
        The images/s, and the workers' CPU seconds over their wall seconds while measured
        (``None`` without workers, or where ``/proc`` cannot be read).
    """
    with warnings.catch_warnings():
        # trying more workers than cores is the point here; torch's advice against it is noise
        warnings.filterwarnings(
            "ignore", message=".*worker processes in total", category=UserWarning
        )
        loader = make_loader(num_workers)
        batches = endless(loader)
        next(batches)
    try:
        for _ in range(max(1, num_workers)):  # every worker has started and delivered
            next(batches)
        cpu_start = cpu() if num_workers > 0 else None
        windows = _Windows(num_workers, precision, bar)
        reading = read_rate(batches, seconds=seconds, stop=windows, clock=clock)
        cpu_end = cpu() if cpu_start is not None else None
        busy = None
        if cpu_start is not None and cpu_end is not None:
            busy = round((cpu_end - cpu_start) / (reading.seconds * num_workers), 3)
        return reading.rate, busy
    finally:
        batches.close()
        del batches, loader
        # The loader's cycles would otherwise be collected during the next candidate's first
        # second, stalling it by a tenth of a second (measured): a bias against it.
        gc.collect()


class _Windows:
    """The early stop of :func:`measure_usage`: the rate over windows of at least ``WINDOW``
    seconds and ``num_workers`` batches, until :func:`settled` says it is known."""

    def __init__(self, num_workers: int, precision: float | None, bar: float | None) -> None:
        self.num_workers, self.precision, self.bar = num_workers, precision, bar
        self.rates: list[float] = []
        self.start, self.samples, self.batches = 0.0, 0, 0  # where the window began

    def __call__(self, samples: int, batches: int, elapsed: float) -> bool:
        if elapsed - self.start < WINDOW or batches - self.batches < self.num_workers:
            return False
        self.rates.append((samples - self.samples) / (elapsed - self.start))
        self.start, self.samples, self.batches = elapsed, samples, batches
        return self.precision is not None and settled(self.rates, self.precision, self.bar)


def settled(
    rates: list[float], precision: float, bar: float | None = None, min_rounds: int = 4
) -> bool:
    """Whether the window ``rates`` answer the question: their mean is known to ``precision``
    (relative standard error), or it lies clearly below ``bar``, or clearly above it and is known
    to ``GAIN_PRECISION``."""
    if len(rates) < min_rounds:
        return False
    mean = statistics.fmean(rates)
    if mean <= 0:
        return False
    error = statistics.stdev(rates) / math.sqrt(len(rates))
    if error / mean <= precision:
        return True
    if bar is None:
        return False
    return mean + Z * error < bar or (mean - Z * error > bar and error / mean <= GAIN_PRECISION)


def prefetch_limit(dataset: Any, batch_size: int, num_workers: int) -> int:
    """The largest ``prefetch_factor`` (up to ``PREFETCH_LIMIT``) whose batches in flight fit in
    a quarter of /dev/shm's free space, from one sample's size; ``PREFETCH`` (nothing to try)
    when that cannot be told."""
    try:
        per_batch = nbytes(dataset[0]) * batch_size
        free = shutil.disk_usage("/dev/shm").free
    except Exception:  # a sample that cannot be read here: do not search it
        return PREFETCH
    factor = PREFETCH
    while 2 * factor <= PREFETCH_LIMIT and 2 * factor * num_workers * per_batch <= free / 4:
        factor *= 2
    return factor


def nbytes(sample: Any) -> int:
    """About how many bytes a sample takes (tensors, arrays, PIL images, and containers)."""
    if isinstance(sample, torch.Tensor):
        return sample.element_size() * sample.nelement()
    if isinstance(getattr(sample, "nbytes", None), int):  # numpy arrays
        return int(sample.nbytes)
    if hasattr(sample, "getbands") and hasattr(sample, "size"):  # PIL images
        width, height = sample.size
        return width * height * len(sample.getbands())
    if isinstance(sample, (list, tuple)):
        return sum(nbytes(x) for x in sample)
    if isinstance(sample, dict):
        return sum(nbytes(x) for x in sample.values())
    return 8
