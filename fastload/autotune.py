"""Choose ``num_workers`` by measuring throughput, not by formula, and remember the answer.

The search (:func:`search`) is pure logic over a ``measure(num_workers) -> images/s`` function:
a coarse pass over 0, 1, 2, 4, 8, ... up to twice the core count, stopping once more workers
stop helping, then a fine pass between the best coarse value and its neighbours, all within a
time budget. Workers that spend most of their time waiting (on network storage, a slow disk)
rather than computing are found from their CPU time against the wall time: then the cores can
keep about ``cores / busy share`` of them busy, and the coarse pass jumps there (past twice the
core count) while more of them still help. The choice is the
*smallest* setting within ``tolerance`` of the best measured throughput, or, given the training
step's time, the smallest that keeps the step fed with a margin: fewer workers mean less CPU and
RAM for the same speed.

:func:`autotune` measures a real loader for each candidate (warm-up excluded) and caches the
result on disk, keyed by everything that changes the answer. A candidate's measurement ends as
soon as its rate is known well enough, or is clearly on one side of the rate at which it would
change the answer (racing), so clear losers and clear gains cost a second or so each. Where the
chosen workers wait, it also doubles ``prefetch_factor`` while that gains beyond the noise
(:func:`search_prefetch`).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import math
import os
import platform
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from fastload.iteration import endless
from fastload.options import DEPRECATED, NAMES
from fastload.system import children_cpu_seconds, cpu_cores, load_average
from fastload.version import __version__

__all__ = [
    "AutotuneResult",
    "Measurement",
    "autotune",
    "cache_dir",
    "prefer_larger",
    "search",
    "search_prefetch",
]

log = logging.getLogger("fastload")
CACHE_VERSION = 3
# A candidate's measurement ends early once its mean rate is known to 2 % (relative standard
# error of the mean over windows of WINDOW seconds): finer than the 3 % within which the fewest
# workers are preferred to the best, and far coarser noise than this would take the whole time.
PRECISION = 0.02
TOLERANCE = 0.03  # throughputs this close to the best count as equally good
WINDOW = 0.25
# It also ends once the search's question about it is answered (racing): its rate is clearly
# (Z standard errors) below the bar it must pass to matter, or clearly above it and known to
# GAIN_PRECISION. On a busy machine a rate known to 2 % can take longer than the whole budget.
Z = 2.0
GAIN_PRECISION = 0.05
# Workers busy (CPU time over wall time) less than this share of the time are waiting, not
# computing: more of them than cores can still help. GROW_LIMIT caps how far the search goes.
WAITING = 0.5
GROW_LIMIT = 64
# Waiting workers whose batches take uneven times stall in-order delivery: the next batch due
# is late while the others have filled their prefetch_factor slots and idle. Doubling torch's
# default of 2 while it gains, up to PREFETCH_LIMIT, with the batches then in flight held to
# a quarter of /dev/shm's free space, measured: 547 -> 635 -> 681 images/s at 2, 4, 8 for 16
# workers, batches of 4, log-normal (sigma 1) 20 ms waits; no change for batches of 32 at
# sigma 0.5, where a batch's wait is the mean of 32.
PREFETCH = 2
PREFETCH_LIMIT = 8


@dataclass(frozen=True)
class Measurement:
    """One measured candidate."""

    num_workers: int
    images_per_sec: float
    seconds: float
    busy: float | None = None  # the workers' CPU time over their wall time, when known
    prefetch_factor: int | None = None  # None: the loader's own (torch's default, 2)


@dataclass
class AutotuneResult:
    """The choice and what it rests on.

    Attributes:
        num_workers: The chosen worker count.
        images_per_sec: The throughput measured for it (with its ``prefetch_factor``; the
            mean, where it was measured more than once).
        table: Every candidate measured, in the order measured.
        reason: Why this candidate was chosen.
        cached: Whether this came from the cache (nothing measured now).
        key: The cache key.
        load: The load average before measuring (``None`` where the system has none).
        noise: Under load or with waiting workers, how far apart two measurements of the same
            candidate came (the largest relative difference); ``None`` when nothing was
            measured twice.
        prefetch_factor: The ``prefetch_factor`` to use with it, when one was searched and
            beat torch's default (waiting workers only); ``None``: leave it as given.
    """

    num_workers: int
    images_per_sec: float
    table: list[Measurement] = field(default_factory=list)
    reason: str = ""
    cached: bool = False
    key: str = ""
    load: float | None = None
    noise: float | None = None
    prefetch_factor: int | None = None

    @property
    def loaded(self) -> bool:
        """Whether it was measured on a machine with more runnable processes than cores."""
        return self.load is not None and self.load > cpu_cores()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["table"] = [asdict(m) for m in self.table]
        return out


def _coarse(max_workers: int) -> list[int]:
    values, w = [0, 1], 2
    while w < max_workers:
        values.append(w)
        w *= 2
    if max_workers not in values:
        values.append(max_workers)
    return [v for v in values if v <= max_workers]


def search(
    measure: Callable[[int, float | None], float],
    *,
    max_workers: int,
    budget: float = 30.0,
    tolerance: float = TOLERANCE,
    required: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[int, int], None] | None = None,
    grow_to: int | None = None,
    saturates_at: Callable[[int], int | None] | None = None,
) -> tuple[int, list[Measurement], str]:
    """Find the worker count to use, measuring as few candidates as the curve allows.

    Args:
        measure: Called as ``measure(num_workers, bar)``; returns the images/s measured with
            that many workers. ``bar`` is the rate at which the candidate would change the
            answer (``None`` for the first): a real gain over the best so far, a fine candidate
            as good as the best, or the step's demand. The measurer may stop as soon as it
            knows on which side of ``bar`` the rate lies.
        max_workers: The largest candidate (e.g. twice the core count).
        budget: Seconds of measuring allowed; the first candidate is always measured.
        tolerance: Throughputs within this fraction of the best count as equally good.
        required: Images/s the training step needs (with margin): if some candidate with
            workers reaches it, the smallest such is chosen. 0 workers never counts: it loads
            in the training process, between steps, so it cannot keep a step fed.
        clock: Time source (a fake one in tests).
        progress: Called as ``progress(measured, planned)``.
        grow_to: The most workers to try when they wait rather than compute.
        saturates_at: For a measured candidate whose workers mostly wait, about how many such
            workers the cores could keep busy (``None``: they compute). While candidates gain,
            the coarse pass jumps to that count (at most ``grow_to``), past ``max_workers`` if
            need be.

    Returns:
        (chosen num_workers, measurements in order, the reason for the choice).
    """
    run = _Search(measure, required, clock, progress)
    coarse = _coarse(max_workers)
    run.coarse(coarse, budget, tolerance, grow_to=grow_to, saturates_at=saturates_at)
    run.fine(budget, tolerance)
    return run.choice(budget, tolerance, len(coarse))


class _Search:
    """The state of one :func:`search`: what was measured, in what order, and when."""

    def __init__(
        self,
        measure: Callable[[int, float | None], float],
        required: float | None,
        clock: Callable[[], float],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.measure, self.required, self.clock, self.progress = measure, required, clock, progress
        self.start = clock()
        self.table: list[Measurement] = []
        self.rates: dict[int, float] = {}
        self.grew = False  # the coarse pass went past its planned candidates

    def run(self, w: int, bar: float | None, still_planned: int = 0) -> None:
        t0 = self.clock()
        self.rates[w] = self.measure(w, self.matters_at(w, bar))
        self.table.append(Measurement(w, self.rates[w], self.clock() - t0))
        if self.progress is not None:
            self.progress(len(self.table), len(self.table) + still_planned)

    def matters_at(self, w: int, bar: float | None) -> float | None:
        """The bar for candidate ``w``: a candidate with workers also matters once it feeds
        the step."""
        if self.required is None or w == 0:
            return bar
        return self.required if bar is None else min(bar, self.required)

    def over_budget(self, budget: float) -> bool:
        return bool(self.table) and self.clock() - self.start >= budget

    def coarse(
        self,
        candidates: list[int],
        budget: float,
        tolerance: float,
        *,
        grow_to: int | None = None,
        saturates_at: Callable[[int], int | None] | None = None,
    ) -> None:
        """0, 1, 2, 4, ... until more workers stop helping, the step is fed, or time is up;
        for waiting workers, straight to where they would saturate the cores (up to
        ``grow_to``), while they still gain."""
        pending = list(candidates)
        stalls = 0
        while pending and not self.over_budget(budget):
            w = pending.pop(0)
            best_before = max(self.rates.values(), default=0.0)
            self.run(w, best_before * (1 + tolerance) if self.rates else None, len(pending))
            if self.required is not None and w > 0 and self.rates[w] >= self.required:
                return  # enough for the step: more workers would only cost CPU and RAM
            # more workers stopped helping: two coarse steps in a row without a real gain
            stalls = stalls + 1 if self.rates[w] <= best_before * (1 + tolerance) else 0
            if stalls >= 2:
                return
            if stalls or w == 0 or grow_to is None or saturates_at is None or w >= grow_to:
                continue
            estimate = saturates_at(w)
            if estimate is None:
                continue  # computing workers: the planned candidates
            jump = min(estimate, grow_to)
            if jump > (pending[0] if pending else w):
                # waiting workers, still gaining: the doubling in between is left to the fine
                # pass, which halves the gap below the best
                pending = [jump]
                self.grew = self.grew or jump > candidates[-1]

    def fine(self, budget: float, tolerance: float) -> None:
        """Halve the gap below the fewest workers as good as the best (fewer might do), and the
        gap above it only when throughput falls after it (a peak may hide there)."""
        rates = self.rates
        while not self.over_budget(budget):
            top = max(rates.values())
            target = min(w for w, r in rates.items() if r >= top * (1 - tolerance))
            below = max((w for w in rates if w < target), default=None)
            above = min((w for w in rates if w > target), default=None)
            gaps = []
            if below is not None and target - below > 1:
                gaps.append((below, target))
            if (
                above is not None
                and above - target > 1
                and rates[above] < rates[target] * (1 - tolerance)
            ):
                gaps.append((target, above))
            if not gaps:
                return
            a, b = gaps[0]
            # below the target it matters whether the candidate is as good as the best; above
            # it, whether it beats the best
            self.run((a + b) // 2, top * (1 - tolerance) if b == target else top * (1 + tolerance))

    def choice(
        self, budget: float, tolerance: float, planned: int
    ) -> tuple[int, list[Measurement], str]:
        rates, required = self.rates, self.required
        if required is not None:
            enough = sorted(w for w, r in rates.items() if w > 0 and r >= required)
            if enough:
                return (
                    enough[0],
                    self.table,
                    f"the fewest workers measured to keep the step fed ({required:,.0f} "
                    "images/s with margin)",
                )
        best_rate = max(rates.values())
        good = sorted(w for w, r in rates.items() if r >= best_rate * (1 - tolerance))
        reason = f"the fewest workers within {tolerance:.0%} of the best throughput measured"
        if self.grew:
            reason += " (the workers wait rather than compute: candidates past 2x the cores)"
        if required is not None:
            reason = f"no candidate reached {required:,.0f} images/s; {reason}"
        if self.over_budget(budget) and len(self.table) < planned:
            reason += f" (the {budget:g} s budget ended the search early)"
        return good[0], self.table, reason


# ---------------------------------------------------------------- measuring real loaders


def _batch_size_of(batch: Any) -> int:
    if isinstance(batch, int):
        return batch
    if isinstance(batch, torch.Tensor):
        return len(batch)
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_size_of(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_size_of(next(iter(batch.values())))
    raise TypeError(f"cannot tell how many samples a {type(batch).__name__} batch holds")


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
            clearly above it and known to ``GAIN_PRECISION`` (see :func:`search`).

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
        seen, start = 0, time.perf_counter()
        cpu_start = children_cpu_seconds() if num_workers > 0 else None
        window_start, window_seen, window_batches = start, 0, 0
        rates: list[float] = []

        def result(elapsed: float) -> tuple[float, float | None]:
            cpu_end = children_cpu_seconds() if cpu_start is not None else None
            busy = None
            if cpu_start is not None and cpu_end is not None:
                busy = round((cpu_end - cpu_start) / (elapsed * num_workers), 3)
            return seen / elapsed, busy

        while True:
            size = _batch_size_of(next(batches))
            now = time.perf_counter()
            seen, window_seen, window_batches = seen + size, window_seen + size, window_batches + 1
            elapsed = now - start
            if elapsed >= seconds and seen:
                return result(elapsed)
            if now - window_start >= WINDOW and window_batches >= num_workers:
                rates.append(window_seen / (now - window_start))
                window_start, window_seen, window_batches = now, 0, 0
                if precision is not None and _settled(rates, precision, bar):
                    return result(elapsed)
    finally:
        batches.close()
        del batches, loader
        # The loader's cycles would otherwise be collected during the next candidate's first
        # second, stalling it by a tenth of a second (measured): a bias against it.
        gc.collect()


def _settled(
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


def cache_dir() -> Path:
    """Where fastload caches results: ``$FASTLOAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/fastload``,
    else ``~/.cache/fastload``."""
    if os.environ.get("FASTLOAD_CACHE_DIR"):
        return Path(os.environ["FASTLOAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "fastload"


def _fingerprint(dataset: Any) -> dict[str, Any]:
    """What identifies a dataset for the cache: its kind, size, files and transforms."""
    info: dict[str, Any] = {"type": type(dataset).__qualname__}
    try:
        info["len"] = len(dataset)
    except TypeError:
        info["len"] = None
    for name in ("root", "backend", "transform", "max_pixels"):
        if hasattr(dataset, name):
            info[name] = repr(getattr(dataset, name))
    path = getattr(dataset, "path", None)
    if callable(path) and info["len"]:
        info["paths"] = [path(0), path(info["len"] - 1)]
    return info


def _key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()[:24]


def _read_cache(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warnings.warn(
            f"ignoring the autotune cache {file}: unreadable ({exc}); measuring again", stacklevel=3
        )
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or not isinstance(data.get("entries"), dict)
    ):
        warnings.warn(
            f"ignoring the autotune cache {file}: written by another version; measuring again",
            stacklevel=3,
        )
        return {}
    return data["entries"]


def _write_cache(file: Path, entries: dict[str, Any]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))
    tmp.replace(file)  # atomic: a reader never sees half a file


def _check_arguments(
    dataset: Any, batch_size: int, budget: float, step_time: float | None
) -> int | None:
    """Refuse bad arguments; return the dataset's length (``None`` without one)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive int")
    if not budget > 0:
        raise ValueError(f"budget={budget!r} must be a positive number of seconds")
    if step_time is not None and not step_time > 0:
        raise ValueError(f"step_time={step_time!r} must be a positive number of seconds")
    try:
        size = len(dataset)
    except TypeError:
        return None
    if size == 0:
        raise ValueError("the dataset is empty: there is nothing to measure")
    return size


def prefer_larger(
    first: dict[int, float],
    again: dict[int, float],
    choice: int,
    larger: int,
    tolerance: float,
    *,
    why: str = "under load",
) -> tuple[int, float, str]:
    """Between the choice and the next larger count, each measured twice: the larger one
    unless it is slower beyond the noise the repeats show (or ``tolerance``, if more).

    Under load one window can favour either candidate: a first measurement had 1 worker at
    295 images/s against 240 for 2. Workers that wait on I/O are as noisy: on a plateau of
    16-32 such workers one measurement varies by about 8 %. More workers cost memory, too
    few cost the whole run, so within the noise the larger count is the safer answer.

    Args:
        first: The first measurement of each count (images/s).
        again: The second measurement of ``choice`` and ``larger``.
        choice: The search's choice.
        larger: The next larger count measured.
        tolerance: The least slack, as a fraction.
        why: Why both were measured again, for the reason (``"under load"``).

    Returns:
        (chosen count, noise: the largest relative difference between two measurements of
        the same count, the reason's ending).
    """
    noise = max(_spread([first[w], again[w]]) for w in (choice, larger))
    slack = max(noise, tolerance)
    mean = {w: (first[w] + again[w]) / 2 for w in (choice, larger)}
    if mean[larger] >= mean[choice] * (1 - slack):
        return (
            larger,
            noise,
            f"; {why}, {larger} workers were within the noise ({slack:.0%}) of {choice} "
            "when both were measured again, and more workers is the safer side",
        )
    return choice, noise, f"; confirmed when measured again {why} (noise {noise:.0%})"


def _spread(readings: list[float]) -> float:
    """How far apart readings of the same candidate came: (largest - smallest) / largest."""
    return (max(readings) - min(readings)) / max(max(readings), 1e-9)


def search_prefetch(
    measure: Callable[[int, float | None], float],
    base: list[float],
    *,
    tolerance: float,
    limit: int,
) -> tuple[int, list[tuple[int, float]], str]:
    """Double ``prefetch_factor`` from torch's default of 2 while each doubling gains.

    One measurement can mislead on waiting workers (about +-13 % apart for the same loader on
    2 busy cores), and more batches in flight cost shared memory. So a doubling must first read
    faster than ``tolerance`` over the factor it would replace. It is kept at once when that
    factor was measured twice and the reading beats their mean by twice the noise they show
    (or ``tolerance``, if more). Otherwise it is measured again (and that factor too, if it has
    only one reading), and kept only when its mean beats that factor's by more than the noise
    the repeats show. The first doubling not kept ends the search.

    Args:
        measure: Called as ``measure(prefetch_factor, bar)``; returns the images/s measured
            with it. ``bar`` is the rate it must beat (``None`` for a repeat of the factor in
            use): the measurer may stop once its side of it is clear.
        base: The images/s measured so far with the default of 2 (one or more).
        tolerance: The least gain, as a fraction, that a doubling must beat.
        limit: The largest ``prefetch_factor`` to try (below 4: nothing is tried).

    Returns:
        (the chosen ``prefetch_factor``, each measurement in order as (factor, images/s), the
        reason's ending).
    """
    rates: dict[int, list[float]] = {PREFETCH: list(base)}
    tried: list[tuple[int, float]] = []

    def run(factor: int, bar: float | None) -> None:
        rates.setdefault(factor, []).append(measure(factor, bar))
        tried.append((factor, rates[factor][-1]))

    chosen, factor, slack = PREFETCH, 2 * PREFETCH, tolerance
    while factor <= limit:
        now = statistics.fmean(rates[chosen])
        bar = now * (1 + tolerance)
        run(factor, bar)
        if rates[factor][0] <= bar:
            break  # not even one reading clearly faster
        slack = max(tolerance, _spread(rates[chosen]))
        if len(rates[chosen]) < 2 or rates[factor][0] <= now * (1 + 2 * slack):
            if len(rates[chosen]) < 2:
                run(chosen, None)
            run(factor, bar)
            slack = max(tolerance, _spread(rates[chosen]), _spread(rates[factor]))
            if statistics.fmean(rates[factor]) <= statistics.fmean(rates[chosen]) * (1 + slack):
                break
        chosen, factor = factor, 2 * factor
    if not tried:
        return chosen, tried, ""
    mean = {f: statistics.fmean(r) for f, r in rates.items()}
    if chosen == PREFETCH:
        return (
            chosen,
            tried,
            f"; prefetch_factor {tried[0][0]} was not faster than the default {PREFETCH} beyond "
            f"the noise ({slack:.0%}), so it stays",
        )
    return (
        chosen,
        tried,
        f"; prefetch_factor {chosen}: {mean[chosen] / mean[PREFETCH] - 1:.0%} faster than the "
        f"default {PREFETCH} (the waiting workers' batches take uneven times)",
    )


def _prefetch_limit(dataset: Any, batch_size: int, num_workers: int) -> int:
    """The largest ``prefetch_factor`` (up to ``PREFETCH_LIMIT``) whose batches in flight fit in
    a quarter of /dev/shm's free space, from one sample's size; ``PREFETCH`` (nothing to try)
    when that cannot be told."""
    try:
        per_batch = _nbytes(dataset[0]) * batch_size
        free = shutil.disk_usage("/dev/shm").free
    except Exception:  # a sample that cannot be read here: do not search it
        return PREFETCH
    factor = PREFETCH
    while 2 * factor <= PREFETCH_LIMIT and 2 * factor * num_workers * per_batch <= free / 4:
        factor *= 2
    return factor


def _nbytes(sample: Any) -> int:
    """About how many bytes a sample takes (tensors, arrays, PIL images, and containers)."""
    if isinstance(sample, torch.Tensor):
        return sample.element_size() * sample.nelement()
    if isinstance(getattr(sample, "nbytes", None), int):  # numpy arrays
        return int(sample.nbytes)
    if hasattr(sample, "getbands") and hasattr(sample, "size"):  # PIL images
        width, height = sample.size
        return width * height * len(sample.getbands())
    if isinstance(sample, (list, tuple)):
        return sum(_nbytes(x) for x in sample)
    if isinstance(sample, dict):
        return sum(_nbytes(x) for x in sample.values())
    return 8


def _from_cache(file: Path, key: str) -> AutotuneResult | None:
    """The cached answer for ``key``, or ``None`` (a malformed entry is measured again)."""
    entries = _read_cache(file)
    if key not in entries:
        return None
    try:
        stored = entries[key]
        table = [Measurement(**m) for m in stored["table"]]
        return AutotuneResult(
            stored["num_workers"],
            stored["images_per_sec"],
            table,
            stored["reason"],
            True,
            key,
            stored.get("load"),
            stored.get("noise"),
            stored.get("prefetch_factor"),
        )
    except (KeyError, TypeError):
        warnings.warn(
            f"ignoring a malformed autotune cache entry in {file}; measuring again",
            stacklevel=3,
        )
        return None


def _to_cache(file: Path, result: AutotuneResult) -> None:
    entries = _read_cache(file) if file.exists() else {}
    entries[result.key] = {k: v for k, v in result.to_dict().items() if k not in ("cached", "key")}
    try:
        _write_cache(file, entries)
    except OSError as exc:
        warnings.warn(f"could not write the autotune cache {file}: {exc}", stacklevel=3)


def _loader_class(
    loader: Callable[..., Any] | None, dataset: Any, loader_kwargs: dict[str, Any]
) -> Callable[..., Any]:
    if loader is not None:
        return loader
    # what only fastload.DataLoader takes: measuring with them needs it as the loader
    needs = [k for k in (*NAMES, *DEPRECATED) if k in loader_kwargs]
    if getattr(dataset, "on_error", None) == "skip":
        needs.append("a dataset with on_error='skip'")
    if needs:
        raise ValueError(
            f"autotune measures with torch's DataLoader unless told otherwise, which cannot take "
            f"{', '.join(needs)}: pass loader=fastload.DataLoader"
        )
    return torch.utils.data.DataLoader


def autotune(
    dataset: Any,
    *,
    batch_size: int = 64,
    loader_kwargs: dict[str, Any] | None = None,
    budget: float = 30.0,
    max_workers: int | None = None,
    step_time: float | None = None,
    margin: float = 1.2,
    cache: bool = True,
    progress: Callable[[int, int], None] | None = None,
    loader: Callable[..., Any] | None = None,
    remeasure_loaded: bool = False,
) -> AutotuneResult:
    """Measure and choose ``num_workers`` for loading ``dataset`` in batches of ``batch_size``.

    Args:
        dataset: What the loader will read.
        batch_size: The training batch size.
        loader_kwargs: Other loader arguments (``collate_fn``, ``pin_memory``, and with
            ``loader=fastload.DataLoader`` its ``device``, ``batch_transforms``, ...), as
            training will use them.
        budget: Seconds the search may spend measuring (default 30; the first candidate is
            always measured). Under load or with waiting workers, up to 6 more measurements
            follow: the top two again, and ``prefetch_factor``'s doublings.
        max_workers: The largest candidate. Default: twice the usable cores, and past that, up
            to 64, while the workers are found waiting (their CPU time under half their wall
            time) and more of them still help.
        step_time: Seconds per training step, if known: then the smallest setting with workers
            that delivers ``margin`` times the step's demand is chosen.
        margin: How much faster than the step the loader must be.
        cache: Read and write the on-disk cache (in :func:`cache_dir`).
        progress: Called as ``progress(measured, planned)``.
        loader: The loader class to measure with (any callable taking torch DataLoader's
            arguments): ``fastload.DataLoader``, as ``num_workers="auto"``, ``fastload
            autotune`` and ``fastload bench`` pass it. Default: torch's ``DataLoader``, which
            is what ``fastload.DataLoader`` is without fastload's options; a dataset made with
            ``on_error="skip"`` or fastload's options in ``loader_kwargs`` need
            ``fastload.DataLoader``.
        remeasure_loaded: Measure again when the cached answer was taken under load (the
            load average above the core count), instead of returning it.

    Returns:
        The choice, the measurements and the reason; ``cached=True`` when nothing was measured.

    Raises:
        ValueError: Bad arguments, or a dataset with no batch to measure.
    """
    size = _check_arguments(dataset, batch_size, budget, step_time)
    loader_class = _loader_class(loader, dataset, loader_kwargs or {})
    cores = cpu_cores()
    grow_to = GROW_LIMIT if max_workers is None else max_workers
    max_workers = min(2 * cores, grow_to)
    kwargs = {
        k: v
        for k, v in (loader_kwargs or {}).items()
        if k not in ("num_workers", "persistent_workers")
    }
    key = _key(
        {
            "fastload": __version__,
            "torch": torch.__version__,
            "machine": [platform.machine(), platform.processor(), cores],
            "dataset": _fingerprint(dataset),
            "batch_size": batch_size,
            "loader": {k: repr(v) for k, v in sorted(kwargs.items())},
            "step_time": step_time,
            "margin": margin,
            "max_workers": max_workers,
            "grow_to": grow_to,
        }
    )  # everything that changes the answer
    file = cache_dir() / "autotune.json"
    cached = _from_cache(file, key) if cache else None
    if cached is not None and not (remeasure_loaded and cached.loaded):
        return cached
    load = load_average()
    if size is not None and size < batch_size * 4:
        warnings.warn(
            f"the dataset has {size} samples, fewer than 4 batches of {batch_size}: measuring over "
            "repeated epochs, so the figures include epoch starts",
            stacklevel=2,
        )
    per_candidate = max(0.5, budget / (len(_coarse(max_workers)) + 2) - 0.5)

    def make_loader(workers: int, prefetch: int | None = None) -> Any:
        options = dict(kwargs)
        if prefetch is not None:
            options["prefetch_factor"] = prefetch
        if workers == 0:  # torch refuses prefetch_factor without worker processes
            options.pop("prefetch_factor", None)
        if isinstance(options.get("generator"), torch.Generator):
            # the trial loaders draw from a copy: the user's loader starts where it would have
            options["generator"] = torch.Generator().set_state(options["generator"].get_state())
        return loader_class(
            dataset,
            batch_size=batch_size,
            num_workers=workers,
            persistent_workers=workers > 0,
            **options,
        )

    required = None if step_time is None else margin * batch_size / step_time
    # Measuring draws from torch's global stream (sampler seeds, worker seeds): on a fork of it,
    # so that a measured and a cached run train on the same random numbers.
    busy: dict[int, float | None] = {}

    def measure(workers: int, bar: float | None) -> float:
        rate, busy[workers] = measure_usage(
            make_loader, workers, per_candidate, precision=PRECISION, bar=bar
        )
        return rate

    def saturates_at(workers: int) -> int | None:
        share = busy.get(workers)
        if share is None or share >= WAITING:
            return None
        return math.ceil(cores / max(share, 1e-3))  # the workers the cores could keep busy

    with torch.random.fork_rng(devices=[]):
        choice, table, reason = search(
            measure,
            max_workers=max_workers,
            budget=budget,
            required=required,
            progress=progress,
            grow_to=grow_to,
            saturates_at=saturates_at,
        )
        noise = None
        larger = min((m.num_workers for m in table if m.num_workers > choice), default=None)
        share, why = busy.get(choice), None
        if load is not None and load > cores:
            why = "under load"
        elif share is not None and share < WAITING:
            why = "as the workers wait (their rate is noisy)"
        if why is not None and larger is not None and required is None:
            # one window can mislead: both contenders again, interleaved
            first = {m.num_workers: m.images_per_sec for m in table}
            again = {w: measure(w, None) for w in (choice, larger)}
            table += [Measurement(w, again[w], per_candidate) for w in (choice, larger)]
            choice, noise, note = prefer_larger(first, again, choice, larger, TOLERANCE, why=why)
            reason += note
        table = [dataclasses.replace(m, busy=busy.get(m.num_workers)) for m in table]
        base = [m.images_per_sec for m in table if m.num_workers == choice]
        rate = statistics.fmean(base)
        prefetch, share = None, busy.get(choice)
        if (
            choice > 0
            and kwargs.get("prefetch_factor") is None
            and share is not None
            and share < WAITING
            and (required is None or rate < required)
        ):
            # waiting workers: whether more batches in flight help too

            def measure_prefetch(factor: int, bar: float | None) -> float:
                given = None if factor == PREFETCH else factor  # None: the loader's default
                began = time.monotonic()
                got, used = measure_usage(
                    lambda w: make_loader(w, given),
                    choice,
                    per_candidate,
                    precision=PRECISION,
                    bar=bar,
                )
                table.append(Measurement(choice, got, time.monotonic() - began, used, given))
                return got

            limit = _prefetch_limit(dataset, batch_size, choice)
            # the noise the worker counts' repeats showed is the least gain worth believing:
            # readings taken later can drift from those (run 12 of autotune_sweep: a 5 %
            # "gain" over readings 9 % apart, none when both were measured again, interleaved)
            floor = max(TOLERANCE, noise or 0.0)
            factor, _, note = search_prefetch(measure_prefetch, base, tolerance=floor, limit=limit)
            reason += note
            prefetch = None if factor == PREFETCH else factor
            rate = statistics.fmean(
                m.images_per_sec
                for m in table
                if m.num_workers == choice and m.prefetch_factor == prefetch
            )
    result = AutotuneResult(choice, rate, table, reason, False, key, load, noise, prefetch)
    if cache:
        _to_cache(file, result)
    # DEBUG: num_workers="auto" logs the choice itself, once, at INFO
    log.debug("autotune chose num_workers=%d (%.0f images/s): %s", choice, rate, reason)
    return result
