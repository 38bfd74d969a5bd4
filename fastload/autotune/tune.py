"""``autotune()``: measure real loaders with the search, and remember the answer.

The steps, in order: check the arguments, look the answer up in the cache, search the worker
counts (:func:`~fastload.autotune.search.search`) on loaders built as training will build them,
measure the top two again where one reading can mislead (under load, or with waiting
workers), search ``prefetch_factor`` where the chosen workers wait, measure threads against
processes at the chosen count where ``worker_type="auto"`` asks for it, then cache the result.
:func:`choose_worker_type` is that last step alone, for a count that is given.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from fastload.autotune import measuring
from fastload.autotune.cache import cache_dir, fingerprint, key_of
from fastload.autotune.cache import read as read_cache
from fastload.autotune.cache import write as write_cache
from fastload.autotune.search import (
    GROW_LIMIT,
    PREFETCH,
    TOLERANCE,
    WAITING,
    AutotuneResult,
    Measurement,
    coarse_candidates,
    compare_worker_types,
    prefer_larger,
    search,
    search_prefetch,
)
from fastload.checks import check_int
from fastload.options import DEPRECATED, NAMES
from fastload.system import cpu_cores, load_average
from fastload.version import __version__

__all__ = ["autotune", "choose_worker_type"]

log = logging.getLogger("fastload")


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
            ``fastload.DataLoader``. With ``worker_type="auto"`` in ``loader_kwargs``, the
            counts are searched with worker processes, then threads and processes are
            measured in turns at the chosen count, and the result's ``worker_type`` is the
            faster (threads only beyond the noise; processes where threads cannot run).
        remeasure_loaded: Measure again when the cached answer was taken under load (the
            load average above the core count), instead of returning it.

    Returns:
        The choice, the measurements and the reason; ``cached=True`` when nothing was measured.

    Raises:
        ValueError: Bad arguments, or a dataset with no batch to measure.
    """
    size = _check_arguments(dataset, batch_size, budget, step_time)
    trials = _Trials(dataset, batch_size, loader_kwargs or {}, loader)
    cores = cpu_cores()
    grow_to = GROW_LIMIT if max_workers is None else max_workers
    max_workers = min(2 * cores, grow_to)
    key = cache_key(trials, step_time, margin, max_workers, grow_to)
    file = cache_dir() / "autotune.json"
    cached = read_cache(file, key) if cache else None
    if cached is not None and not (remeasure_loaded and cached.loaded):
        return cached
    load = load_average()
    if size is not None and size < batch_size * 4:
        warnings.warn(
            f"the dataset has {size} samples, fewer than 4 batches of {batch_size}: measuring over "
            "repeated epochs, so the figures include epoch starts",
            stacklevel=2,
        )
    trials.seconds = max(0.5, budget / (len(coarse_candidates(max_workers)) + 2) - 0.5)
    required = None if step_time is None else margin * batch_size / step_time
    # Measuring draws from torch's global stream (sampler seeds, worker seeds): on a fork of it,
    # so that a measured and a cached run train on the same random numbers.
    with torch.random.fork_rng(devices=[]):
        choice, table, reason, noise = _worker_counts(
            trials, max_workers, grow_to, budget, required, load, progress
        )
        prefetch, rate, reason = _prefetch_step(trials, choice, table, reason, noise, required)
        kind, rate, reason = _worker_type_step(trials, choice, prefetch, table, rate, reason)
    result = AutotuneResult(choice, rate, table, reason, False, key, load, noise, prefetch, kind)
    if cache:
        write_cache(file, result)
    # DEBUG: num_workers="auto" logs the choice itself, once, at INFO
    log.debug("autotune chose num_workers=%d (%.0f images/s): %s", choice, rate, reason)
    return result


class _Trials:
    """Builds and measures the trial loaders, as training will build them; remembers how busy
    each worker count's workers were."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        loader_kwargs: dict[str, Any],
        loader: Callable[..., Any] | None,
    ) -> None:
        self.dataset, self.batch_size = dataset, batch_size
        self.loader_class = _loader_class(loader, dataset, loader_kwargs)
        self.kwargs = {
            k: v for k, v in loader_kwargs.items() if k not in ("num_workers", "persistent_workers")
        }
        # worker_type="auto": the counts are searched with processes, then both kinds compared
        self.both_kinds = self.kwargs.get("worker_type") == "auto"
        self.seconds = 1.0  # per candidate, at most
        self.busy: dict[int, float | None] = {}

    def make_loader(
        self, workers: int, prefetch: int | None = None, kind: str | None = None
    ) -> Any:
        options = dict(self.kwargs)
        if self.both_kinds:
            options["worker_type"] = kind or "process"
        if prefetch is not None:
            options["prefetch_factor"] = prefetch
        if workers == 0:  # torch refuses prefetch_factor without worker processes
            options.pop("prefetch_factor", None)
        if isinstance(options.get("generator"), torch.Generator):
            # the trial loaders draw from a copy: the user's loader starts where it would have
            options["generator"] = torch.Generator().set_state(options["generator"].get_state())
        return self.loader_class(
            self.dataset,
            batch_size=self.batch_size,
            num_workers=workers,
            persistent_workers=workers > 0,
            **options,
        )

    def measure(self, workers: int, bar: float | None) -> float:
        """Images/s with ``workers`` (how busy they were is kept in :attr:`busy`)."""
        rate, self.busy[workers] = self.measure_with(workers, bar)
        return rate

    def measure_with(
        self, workers: int, bar: float | None, prefetch: int | None = None, kind: str | None = None
    ) -> tuple[float, float | None]:
        """Images/s with ``workers``, ``prefetch_factor`` (``None``: the loader's own) and the
        kind of worker (``None``: processes, or as given), and how busy the workers were."""
        return measuring.measure_usage(
            lambda w: self.make_loader(w, prefetch, kind),
            workers,
            self.seconds,
            precision=measuring.PRECISION,
            bar=bar,
        )

    def saturates_at(self, workers: int, cores: int) -> int | None:
        """About how many workers the cores could keep busy, when these mostly wait."""
        share = self.busy.get(workers)
        if share is None or share >= WAITING:
            return None
        return math.ceil(cores / max(share, 1e-3))


def cache_key(
    trials: _Trials,
    step_time: float | None,
    margin: float,
    max_workers: int,
    grow_to: int,
    question: str = "num_workers",
) -> str:
    """Everything that changes the answer, as the cache's key (``question``: which search
    answered it, ``"num_workers"`` or ``"worker_type"``)."""
    parts: dict[str, Any] = {} if question == "num_workers" else {"question": question}
    return key_of(
        {
            **parts,
            "fastload": __version__,
            "torch": torch.__version__,
            "machine": [platform.machine(), platform.processor(), cpu_cores()],
            "dataset": fingerprint(trials.dataset),
            "batch_size": trials.batch_size,
            "loader": {k: repr(v) for k, v in sorted(trials.kwargs.items())},
            "step_time": step_time,
            "margin": margin,
            "max_workers": max_workers,
            "grow_to": grow_to,
        }
    )


def _worker_counts(
    trials: _Trials,
    max_workers: int,
    grow_to: int,
    budget: float,
    required: float | None,
    load: float | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, list[Measurement], str, float | None]:
    """The search over worker counts, and the top two measured again where one reading can
    mislead; each measurement with how busy its workers were.

    Returns:
        The choice, the table, the reason, and the noise the repeats showed (``None``: none).
    """
    cores = cpu_cores()
    choice, table, reason = search(
        trials.measure,
        max_workers=max_workers,
        budget=budget,
        required=required,
        progress=progress,
        grow_to=grow_to,
        saturates_at=lambda workers: trials.saturates_at(workers, cores),
    )
    why = _why_measure_again(trials.busy.get(choice), load, cores)
    choice, table, reason, noise = _measured_again(trials, choice, table, reason, why, required)
    table = [dataclasses.replace(m, busy=trials.busy.get(m.num_workers)) for m in table]
    return choice, table, reason, noise


def _why_measure_again(share: float | None, load: float | None, cores: int) -> str | None:
    """Why one reading of the choice may mislead: the machine is loaded, or its workers wait."""
    if load is not None and load > cores:
        return "under load"
    if share is not None and share < WAITING:
        return "as the workers wait (their rate is noisy)"
    return None


def _measured_again(
    trials: _Trials,
    choice: int,
    table: list[Measurement],
    reason: str,
    why: str | None,
    required: float | None,
) -> tuple[int, list[Measurement], str, float | None]:
    """The choice and the next larger count measured again, interleaved, when one reading can
    mislead (:func:`~fastload.autotune.search.prefer_larger` settles between them).

    Returns:
        The choice, the table, the reason, and the noise the repeats showed (``None``: none).
    """
    larger = min((m.num_workers for m in table if m.num_workers > choice), default=None)
    if why is None or larger is None or required is not None:
        return choice, table, reason, None
    first = {m.num_workers: m.images_per_sec for m in table}
    again = {w: trials.measure(w, None) for w in (choice, larger)}
    table = table + [Measurement(w, again[w], trials.seconds) for w in (choice, larger)]
    choice, noise, note = prefer_larger(first, again, choice, larger, TOLERANCE, why=why)
    return choice, table, reason + note, noise


def _prefetch_step(
    trials: _Trials,
    choice: int,
    table: list[Measurement],
    reason: str,
    noise: float | None,
    required: float | None,
) -> tuple[int | None, float, str]:
    """Search ``prefetch_factor`` when the chosen workers wait, the user gave none, and the
    step is not fed already; ``table`` gains its measurements.

    Returns:
        The ``prefetch_factor`` to use (``None``: the loader's own), the choice's images/s with
        it (the mean of its readings), and the reason.
    """
    rate = statistics.fmean(m.images_per_sec for m in table if m.num_workers == choice)
    share = trials.busy.get(choice)
    if (
        choice == 0
        or trials.kwargs.get("prefetch_factor") is not None
        or share is None
        or share >= WAITING
        or (required is not None and rate >= required)
    ):
        return None, rate, reason
    base = [m.images_per_sec for m in table if m.num_workers == choice]

    def measure(factor: int, bar: float | None) -> float:
        given = None if factor == PREFETCH else factor  # None: the loader's default
        began = time.monotonic()
        got, used = trials.measure_with(choice, bar, given)
        table.append(Measurement(choice, got, time.monotonic() - began, used, given))
        return got

    limit = measuring.prefetch_limit(trials.dataset, trials.batch_size, choice)
    # the noise the worker counts' repeats showed is the least gain worth believing: readings
    # taken later drift from those as much as the repeats did
    floor = max(TOLERANCE, noise or 0.0)
    factor, _, note = search_prefetch(measure, base, tolerance=floor, limit=limit)
    prefetch = None if factor == PREFETCH else factor
    rate = statistics.fmean(
        m.images_per_sec for m in table if m.num_workers == choice and m.prefetch_factor == prefetch
    )
    return prefetch, rate, reason + note


def _worker_type_step(
    trials: _Trials,
    workers: int,
    prefetch: int | None,
    table: list[Measurement],
    rate: float,
    reason: str,
) -> tuple[str | None, float, str]:
    """With ``worker_type="auto"``: threads and processes measured in turns at ``workers``
    (``table`` gains the readings), and the faster kept; processes, unmeasured, where there
    are no workers or threads cannot run the loader.

    Returns:
        The kind (``None`` unless asked for), the images/s to report, and the reason.
    """
    if not trials.both_kinds:
        return None, rate, reason
    unmeasured = _processes_unmeasured(trials, workers, prefetch)
    if unmeasured is not None:
        return "process", rate, f"{reason}; processes, since {unmeasured}"
    return _compare_worker_types(trials, workers, prefetch, table, reason)


def _compare_worker_types(
    trials: _Trials, workers: int, prefetch: int | None, table: list[Measurement], reason: str
) -> tuple[str, float, str]:
    """Threads and processes measured in turns at ``workers``; ``table`` gains the readings.

    Returns:
        The faster kind, its images/s (the mean of its readings), and the reason.
    """

    def measure(kind: str) -> float:
        began = time.monotonic()
        got, used = trials.measure_with(workers, None, prefetch, kind)
        table.append(Measurement(workers, got, time.monotonic() - began, used, prefetch, kind))
        return got

    kind, readings, note = compare_worker_types(measure, tolerance=TOLERANCE)
    return kind, statistics.fmean(readings[kind]), reason + note


def choose_worker_type(
    dataset: Any,
    *,
    batch_size: int | None,
    num_workers: int,
    loader: Callable[..., Any],
    loader_kwargs: dict[str, Any] | None = None,
    budget: float = 12.0,
    cache: bool = True,
) -> AutotuneResult:
    """Measure worker processes against worker threads at a given count; keep the faster.

    What ``fastload.DataLoader(num_workers=N, worker_type="auto")`` runs: both kinds
    measured in turns, twice each, threads kept only when faster beyond the noise; processes,
    unmeasured, with no workers, where threads cannot run the loader or where the dataset is
    empty (the reason says why), as torch's loader would run it.

    Args:
        dataset: What the loader will read.
        batch_size: The training batch size (``None``, samples one at a time, cannot be
            measured: it is refused where measuring is needed).
        num_workers: The worker count.
        loader: The loader class (``fastload.DataLoader``).
        loader_kwargs: Its other arguments, as training will use them.
        budget: Seconds of measuring, about.
        cache: Read and write the on-disk cache, as :func:`autotune` does.

    Returns:
        The result, its ``worker_type`` the choice.

    Raises:
        ValueError: A bad argument, or ``batch_size=None`` where both kinds would be measured.
    """
    check_int("num_workers", num_workers, minimum=0)
    _check_budget(budget)
    kwargs = {**(loader_kwargs or {}), "worker_type": "auto"}
    # whether threads are refused does not hang on the batch size; None is refused below,
    # where measuring needs one
    trials = _Trials(dataset, 1 if batch_size is None else batch_size, kwargs, loader)
    given = f"num_workers={num_workers} was given"
    unmeasured = _processes_unmeasured(trials, num_workers, None)
    if unmeasured is not None:
        reason = f"{given}; processes, since {unmeasured}"
        return AutotuneResult(num_workers, 0.0, [], reason, worker_type="process")
    if batch_size is None:
        raise ValueError("worker_type='auto' needs a batch_size to measure with")
    _check_arguments(dataset, batch_size, budget, None)
    key = cache_key(trials, None, 1.0, num_workers, num_workers, question="worker_type")
    file = cache_dir() / "autotune.json"
    cached = read_cache(file, key) if cache else None
    if cached is not None:
        return cached
    load = load_average()
    trials.seconds = max(0.5, budget / 4 - 0.5)
    table: list[Measurement] = []
    with torch.random.fork_rng(devices=[]):  # as autotune: the user's streams are not moved
        kind, rate, reason = _compare_worker_types(trials, num_workers, None, table, given)
    result = AutotuneResult(num_workers, rate, table, reason, False, key, load, None, None, kind)
    if cache:
        write_cache(file, result)
    return result


def _processes_unmeasured(trials: _Trials, workers: int, prefetch: int | None) -> str | None:
    """Why ``worker_type="auto"`` keeps processes without measuring (``None``: it measures):
    no workers, the loader's own refusal of threads, or nothing to read."""
    if workers == 0:
        return "no workers, so no kind of worker to choose"
    try:
        trials.make_loader(workers, prefetch, "thread")
    except ValueError as exc:  # the loader's own refusal, which names why
        return str(exc)
    try:
        empty = len(trials.dataset) == 0
    except TypeError:  # no length: an IterableDataset, which threads refuse above
        empty = False
    return "the dataset is empty, so there is nothing to measure" if empty else None


def _check_arguments(
    dataset: Any, batch_size: int, budget: float, step_time: float | None
) -> int | None:
    """Refuse bad arguments; return the dataset's length (``None`` without one)."""
    check_int("batch_size", batch_size, minimum=1)
    _check_budget(budget)
    if step_time is not None and not step_time > 0:
        raise ValueError(f"step_time={step_time!r} must be a positive number of seconds")
    try:
        size = len(dataset)
    except TypeError:
        return None
    if size == 0:
        raise ValueError("the dataset is empty: there is nothing to measure")
    return size


def _check_budget(budget: float) -> None:
    if not budget > 0:
        raise ValueError(f"budget={budget!r} must be a positive number of seconds")


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
    return torch.utils.data.dataloader.DataLoader
