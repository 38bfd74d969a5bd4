"""The search for ``num_workers`` and ``prefetch_factor``: pure logic over a measuring function.

:func:`search` takes a ``measure(num_workers, bar) -> images/s`` function: a coarse pass over
0, 1, 2, 4, 8, ... up to twice the core count, stopping once more workers stop helping, then a
fine pass between the best coarse value and its neighbours, all within a time budget. Workers
that spend most of their time waiting (on network storage, a slow disk) rather than computing
are found from their CPU time against the wall time: then the cores can keep about
``cores / busy share`` of them busy, and the coarse pass jumps there (past twice the core
count) while more of them still help. The choice is the *smallest* setting within
``tolerance`` of the best measured throughput, or, given the training step's time, the
smallest that keeps the step fed with a margin: fewer workers mean less CPU and RAM for the
same speed. :func:`prefer_larger` settles a choice measured again; :func:`search_prefetch`
doubles ``prefetch_factor`` while that gains beyond the noise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from fastload.system import cpu_cores

__all__ = [
    "GROW_LIMIT",
    "PREFETCH",
    "PREFETCH_LIMIT",
    "TOLERANCE",
    "WAITING",
    "AutotuneResult",
    "Measurement",
    "coarse_candidates",
    "compare_worker_types",
    "prefer_larger",
    "search",
    "search_prefetch",
    "spread",
]

TOLERANCE = 0.03  # throughputs this close to the best count as equally good
# Workers busy (CPU time over wall time) less than this share of the time are waiting, not
# computing: more of them than cores can still help. GROW_LIMIT caps how far the search goes.
WAITING = 0.5
GROW_LIMIT = 64
# Waiting workers whose batches take uneven times stall in-order delivery: the next batch due
# is late while the others have filled their prefetch_factor slots and idle. So torch's default
# of 2 is doubled while that gains, up to PREFETCH_LIMIT (the README has the measurements).
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
    worker_type: str | None = None  # None: the loader's own (as given)


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
        worker_type: ``"process"`` or ``"thread"`` where both kinds of worker were measured
            (``worker_type="auto"``); ``None``: leave it as given.
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
    worker_type: str | None = None

    @property
    def loaded(self) -> bool:
        """Whether it was measured on a machine with more runnable processes than cores."""
        return self.load is not None and self.load > cpu_cores()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["table"] = [asdict(m) for m in self.table]
        return out


def coarse_candidates(max_workers: int) -> list[int]:
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
    coarse = coarse_candidates(max_workers)
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
    noise = max(spread([first[w], again[w]]) for w in (choice, larger))
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


def compare_worker_types(
    measure: Callable[[str], float], *, rounds: int = 2, tolerance: float = TOLERANCE
) -> tuple[str, dict[str, list[float]], str]:
    """Worker processes against worker threads at one count, measured in turns; the faster
    kept.

    Each round measures both kinds, the one measured first alternating, so that a drift in the
    machine's load falls on both. Threads are kept only when they are faster beyond the noise
    the repeats show (or ``tolerance``, if more): processes are torch's own workers, so a tie
    keeps them.

    Args:
        measure: ``measure(kind) -> images/s`` for ``"process"`` or ``"thread"``.
        rounds: Measurements of each kind.
        tolerance: The least gain that counts, as a fraction.

    Returns:
        (the kind kept, each kind's readings in the order taken, the reason's ending).
    """
    readings: dict[str, list[float]] = {"process": [], "thread": []}
    for k in range(rounds):
        for kind in ("process", "thread") if k % 2 == 0 else ("thread", "process"):
            readings[kind].append(measure(kind))
    noise = max(spread(r) for r in readings.values())
    slack = max(noise, tolerance)
    mean = {kind: statistics.fmean(r) for kind, r in readings.items()}
    ratio = mean["thread"] / max(mean["process"], 1e-9)
    if ratio > 1 + slack:
        return "thread", readings, f"; threads ran {ratio:.2f}x processes (noise {slack:.0%})"
    return (
        "process",
        readings,
        f"; threads ran {ratio:.2f}x processes, not faster beyond the noise ({slack:.0%}), "
        "so the workers stay processes",
    )


def spread(readings: list[float]) -> float:
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
        slack = max(tolerance, spread(rates[chosen]))
        if len(rates[chosen]) < 2 or rates[factor][0] <= now * (1 + 2 * slack):
            if len(rates[chosen]) < 2:
                run(chosen, None)
            run(factor, bar)
            slack = max(tolerance, spread(rates[chosen]), spread(rates[factor]))
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
