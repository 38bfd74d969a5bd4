"""The measuring harness behind ``fastload bench``: every configuration's loader kept between
rounds, rounds interleaved, each row the median of its rounds against the stock round beside it
(:func:`run`), and the notes on what the figures mean (:func:`notes`)."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Collection, Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from fastload import backends
from fastload.autotune import autotune
from fastload.autotune.rates import endless, read_rate
from fastload.bench.pipelines import (
    ACCELERATED,
    PIPELINES,
    STOCK,
    THREADS,
    count,
    fastload_dataset,
    stock_dataset,
)
from fastload.bench.usage import GpuSampler, Spent, counted, settle
from fastload.checks import check_int, choice_error
from fastload.devices import resolve_device
from fastload.diagnosis import scan
from fastload.errors import one_line
from fastload.loader import DataLoader
from fastload.shards.sources import is_shards

__all__ = ["BenchRow", "StockFailed", "notes", "run"]


@dataclass
class BenchRow:
    """One configuration's result; ``error`` says why a backend could not run here.

    ``images_per_sec`` and ``ratio_to_stock`` are medians over the rounds; ``rates`` holds each
    round's images/s and ``ratio_range`` the lowest and highest of the per-round ratios (each
    round against the stock round measured beside it). ``cores`` is the CPU this process and
    its workers used in the configuration's rounds (CPU seconds over wall seconds), and
    ``gpu_busy`` and ``jpeg_busy`` how busy, in percent, the CUDA device and its JPEG engines
    were in them (sampled through the driver's NVML; ``None`` where it could not say):
    :mod:`fastload.bench.usage`.
    """

    backend: str
    pipeline: str
    images_per_sec: float | None
    ratio_to_stock: float | None
    num_workers: int | None
    batch_size: int
    error: str | None = None
    rates: list[float] = field(default_factory=list)
    ratio_range: tuple[float, float] | None = None
    cores: float | None = None
    gpu_busy: float | None = None
    jpeg_busy: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unusable(name: str) -> str | None:
    if name not in backends.names():
        return f"no {name!r} backend; registered: {', '.join(backends.names())}"
    status = backends.check(name)
    return None if status.usable else f"{status.reason} (fix: {status.fix})"


def run(
    data: str | Path,
    *,
    names: tuple[str, ...] | None = None,
    pipeline: str = "train",
    batch_size: int = 64,
    num_workers: int | str = 2,
    device: str = "cpu",
    seconds: float = 20.0,
    rounds: int = 3,
    accelerated: bool = False,
    progress: Callable[..., None] | None = None,
    exclude: Collection[str] | None = None,
) -> list[BenchRow]:
    """Measure the stock pipeline and each backend in ``names`` on the images under ``data``.

    Args:
        data: A class-folder image set.
        names: Backends to measure (default: every registered one); unusable or unknown ones
            become rows with ``error``.
        pipeline: ``"train"``, ``"val"`` or ``"decode"``.
        batch_size: Images per batch.
        num_workers: Worker processes per loader, or ``"auto"`` (autotuned per loader).
        device: Where batches are delivered (``"cpu"`` or a CUDA device).
        seconds: Measuring time in all, shared by the configurations and rounds.
        rounds: Interleaved rounds per configuration (the median is reported).
        accelerated: Also measure the stock dataset, unchanged, through
            ``fastload.DataLoader(..., accelerate=True)`` (the row after stock).
        progress: Called as ``progress(done, total, what)``, ``what`` naming the configuration
            and round being measured; a :class:`~fastload._progress.Progress` with a ``log``
            attribute also gets a line saying what is measured and for about how long.
        exclude: Files to leave out on every side; by default
            :func:`fastload.diagnosis.scan.unreadable_files`.

    Returns:
        The stock row first, then the accelerated one if asked, then one row per backend,
        then, with workers, the first per-sample backend's again with
        ``worker_type="thread"`` (named ``"<backend> (threads)"``); a configuration that
        failed is a row with ``error``.

    Raises:
        ValueError: A bad pipeline, batch size, worker count or time; no images.
        StockFailed: The stock pipeline failed (the ratios need it).
    """
    _check_run(pipeline, batch_size, num_workers, seconds, rounds)
    names = tuple(backends.names()) if names is None else names
    root = Path(data)
    target = resolve_device(device) or torch.device("cpu")  # a bad device fails here, first
    if exclude is None:
        # shards' broken members are met as they are read: skipped, or stood in for (stock)
        exclude = [] if is_shards(root) else scan.unreadable_files(root)[1]
    datasets, rows = _datasets(root, pipeline, names, batch_size, exclude)
    if accelerated:
        if pipeline == "decode":
            raise ValueError("accelerated=True measures train or val: decode has no transform")
        datasets = {STOCK: datasets[STOCK], ACCELERATED: datasets[STOCK], **datasets}
    threaded = _threaded(names, datasets) if num_workers != 0 else None
    if threaded is not None:
        datasets[threaded + THREADS] = datasets[threaded]
    workers: dict[str, int] = {}
    streams: dict[str, Generator[Any, None, None]] = {}
    failed: dict[str, str] = {}
    spent = {label: Spent() for label in datasets}
    gpu = None
    if target.type == "cuda":
        index = target.index if target.index is not None else torch.cuda.current_device()
        gpu = GpuSampler.open(index)
    try:
        for label, ds in datasets.items():
            try:
                workers[label] = _workers(
                    label, ds, pipeline, batch_size, num_workers, device, seconds
                )
                streams[label] = _stream(label, ds, pipeline, batch_size, workers[label], target)
            except Exception as exc:  # one configuration that cannot run is a row, not a crash
                _failed(label, exc, failed)
            if label in failed:
                gc.collect()  # its loader, held in the error's frames, collected here (below)
        rates = _interleaved(streams, seconds, rounds, target, progress, failed, spent)
    finally:
        for batches in streams.values():
            batches.close()  # shuts the workers down
        if gpu is not None:
            gpu.close()
    labels = [STOCK, *([ACCELERATED] if accelerated else []), *names]
    labels += [threaded + THREADS] if threaded is not None else []
    out = _rows(labels, pipeline, batch_size, rates, workers, rows, failed)
    for row in out:
        if row.images_per_sec is not None:
            row.cores = spent[row.backend].cores
            busy = gpu.mean(spent[row.backend].windows) if gpu is not None else {}
            row.gpu_busy, row.jpeg_busy = busy.get("gpu"), busy.get("jpeg")
    return out


def _check_run(
    pipeline: str, batch_size: int, num_workers: int | str, seconds: float, rounds: int
) -> None:
    if pipeline not in PIPELINES:
        raise choice_error("pipeline", pipeline, PIPELINES)
    check_int("batch_size", batch_size, minimum=1)
    check_int("rounds", rounds, minimum=1)
    if not seconds > 0:
        raise ValueError(f"seconds={seconds!r} must be a positive number")
    if num_workers != "auto":
        check_int("num_workers", num_workers, minimum=0, what="or 'auto'")


def _rows(
    labels: list[str],
    pipeline: str,
    batch_size: int,
    rates: dict[str, list[float]],
    workers: dict[str, int],
    unrun: dict[str, BenchRow],
    failed: dict[str, str],
) -> list[BenchRow]:
    """One row per label, in order: measured (median rate, ratio to stock and its per-round
    range), not run (``unrun``: an unusable backend), or failed."""
    base = statistics.median(rates[STOCK])
    out = []
    for label in labels:
        if label in unrun:
            out.append(unrun[label])
        elif label in failed:
            error = failed[label]
            out.append(BenchRow(label, pipeline, None, None, workers.get(label), batch_size, error))
        else:
            rate = statistics.median(rates[label])
            ratios = [r / b for r, b in zip(rates[label], rates[STOCK], strict=False)]
            out.append(
                BenchRow(
                    label,
                    pipeline,
                    rate,
                    rate / base,
                    workers[label],
                    batch_size,
                    rates=rates[label],
                    ratio_range=(min(ratios), max(ratios)),
                )
            )
    return out


DISAGREE = 0.10  # rounds further apart than this (highest / lowest - 1) are worth a note


def notes(rows: list[BenchRow], *, load_before: float, cores: int) -> list[str]:
    """One-line remarks on how far to trust the figures: the machine was loaded before the
    run, or a configuration's rounds disagree by more than 10 %."""
    out = []
    if load_before > cores:
        out.append(
            f"the load average was {load_before:.1f} on {cores} cores before the run: other "
            "work competes with the measurement"
        )
    apart = [
        f"{r.backend} {min(r.rates):,.0f}-{max(r.rates):,.0f}"
        for r in rows
        if len(r.rates) > 1 and min(r.rates) > 0 and max(r.rates) / min(r.rates) - 1 > DISAGREE
    ]
    if apart:
        out.append(
            f"rounds disagree by more than {DISAGREE:.0%} ({'; '.join(apart)} images/s): the "
            "machine is busy or noisy, so the figures are less certain; more --seconds, or a "
            "quieter machine, narrows them"
        )
    return out


class _StandIn(torch.utils.data.Dataset[Any]):
    """The stock dataset, an unreadable sample replaced by the next readable one: stock
    torchvision has no way to skip a file, and a truncated one passes the header check."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        size = len(self.dataset)
        for k in range(size):
            try:
                return self.dataset[(index + k) % size]
            except (OSError, ValueError):  # PIL's decoding errors are OSErrors
                continue
        raise RuntimeError("no image of the set is readable")


class StockFailed(RuntimeError):
    """The stock pipeline failed, so no ratio can be measured; the message says why."""


def _failed(label: str, exc: Exception, failed: dict[str, str]) -> None:
    if label == STOCK:  # no baseline, no ratios
        raise StockFailed(f"the stock torchvision pipeline failed: {one_line(exc)}") from exc
    failed[label] = one_line(exc)


def _datasets(
    root: Path, pipeline: str, names: tuple[str, ...], batch_size: int, exclude: Collection[str]
) -> tuple[dict[str, Any], dict[str, BenchRow]]:
    """The datasets to measure (stock first), and a row for each backend that cannot run."""
    rows: dict[str, BenchRow] = {}
    try:
        datasets: dict[str, Any] = {STOCK: stock_dataset(root, pipeline, exclude=exclude)}
    except FileNotFoundError:  # every file of a class left out
        datasets = {STOCK: []}
    if len(datasets[STOCK]) < batch_size:
        left_out = f" ({len(exclude)} unreadable left out)" if exclude else ""
        raise ValueError(
            f"{root} has {len(datasets[STOCK])} readable images{left_out}, fewer than one batch "
            f"of {batch_size}: use a smaller batch size or more images"
        )
    for name in names:
        reason = _unusable(name)
        if reason is None and backends.kind(name) == "executor" and pipeline == "decode":
            reason = (
                "the decode pipeline counts images of every size without batching them; the "
                f"{name} backend delivers whole batches of one size: measure train or val"
            )
        if reason is None:
            try:
                datasets[name] = fastload_dataset(root, pipeline, name, exclude=exclude)
            except Exception as exc:  # a backend that cannot run here is a row, not a crash
                reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            rows[name] = BenchRow(name, pipeline, None, None, None, batch_size, reason)
    return datasets, rows


def _threaded(names: tuple[str, ...], datasets: dict[str, Any]) -> str | None:
    """The first per-sample backend measured, whose row with thread workers is added."""
    for name in names:
        if name in datasets and backends.kind(name) != "executor":
            return name
    return None


def _workers(
    label: str,
    ds: Any,
    pipeline: str,
    batch_size: int,
    num_workers: int | str,
    device: str,
    seconds: float,
) -> int:
    if num_workers != "auto":
        return int(num_workers)
    extra: dict[str, Any] = {"device": device} if label != STOCK else {}
    if label.endswith(THREADS):
        extra["worker_type"] = "thread"
    if label == ACCELERATED:
        extra["accelerate"] = True
    return autotune(
        ds,
        batch_size=batch_size,
        loader_kwargs={**_collate(pipeline), **extra},
        budget=min(10.0, seconds),
        loader=DataLoader,
    ).num_workers


def _collate(pipeline: str) -> dict[str, Any]:
    return {"collate_fn": count} if pipeline == "decode" else {}


def _stream(
    label: str, ds: Any, pipeline: str, batch_size: int, workers: int, target: torch.device
) -> Generator[Any, None, None]:
    """Endless batches of one configuration, its workers started and warm."""
    common: dict[str, Any] = dict(
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        drop_last=pipeline != "decode",
        **_collate(pipeline),
    )
    if label == STOCK:
        loader = torch.utils.data.dataloader.DataLoader(
            _StandIn(ds), pin_memory=target.type == "cuda", **common
        )
        stream = _to_device(endless(loader), target)
    elif label == ACCELERATED:
        stream = endless(DataLoader(ds, device=target, accelerate=True, **common))
    else:
        kind = "thread" if label.endswith(THREADS) else "process"
        stream = endless(DataLoader(ds, device=target, worker_type=kind, **common))
    try:
        for _ in range(max(2, workers)):  # warm-up: every worker started and delivered once
            next(stream)
    except BaseException:
        stream.close()  # its workers shut down now, not whenever the collector gets to it
        raise
    return stream


def _interleaved(
    streams: dict[str, Generator[Any, None, None]],
    seconds: float,
    rounds: int,
    target: torch.device,
    progress: Callable[..., None] | None,
    failed: dict[str, str],
    spent: dict[str, Spent],
) -> dict[str, list[float]]:
    """Images/s of each stream per round, the rounds interleaved so that load hits all alike,
    each started once the streams measured before are idle, its CPU and wall time counted in
    ``spent``; a stream that fails is noted in ``failed`` and left out of the later rounds."""
    slice_s = seconds / (rounds * len(streams))
    rates: dict[str, list[float]] = {label: [] for label in streams}
    total, done = rounds * len(streams), 0
    if progress is not None and hasattr(progress, "log"):
        progress.log = (
            f"fastload bench: measuring {len(streams)} loaders in {rounds} interleaved rounds, "
            f"about {seconds:.0f} s, each round once the loaders before it are idle"
        )
    for round_ in range(rounds):
        for label, batches in streams.items():
            if progress is not None:
                progress(done, total, f"{label}, round {round_ + 1} of {rounds}")
            if label not in failed:
                settle(limit=min(2.0, slice_s))
                try:
                    with counted(spent[label]):
                        rates[label].append(_measure(batches, slice_s, target))
                except Exception as exc:
                    _failed(label, exc, failed)
                    batches.close()
                if label in failed:
                    # its loader's iterator, held in the error's frames, collected now: left to
                    # the collector it can be collected inside a later fork, where it cannot
                    # stop its workers (Python prints "Exception ignored in ...__del__")
                    gc.collect()
            done += 1
            if progress is not None:
                progress(done, total)
    return rates


def _to_device(
    batches: Generator[Any, None, None], device: torch.device
) -> Generator[Any, None, None]:
    try:
        for batch in batches:
            if device.type == "cpu" or isinstance(batch, int):
                yield batch
            else:
                yield [t.to(device, non_blocking=True) for t in batch]
    finally:
        batches.close()


def _measure(batches: Iterator[Any], seconds: float, device: torch.device) -> float:
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    return read_rate(batches, seconds=seconds, sync=sync).rate
