"""``doctor()``: measure the user's step and loader, run the checks and the trials, rank."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from fastload._progress import Progress
from fastload.checks import check_int
from fastload.devices import DeviceLike, resolve_device
from fastload.diagnosis.checks import Context, run_checks
from fastload.diagnosis.measuring import (
    Step,
    Ticks,
    loader_alone,
    measure_steps,
    median,
    restore,
    save,
)
from fastload.diagnosis.report import DoctorReport, Finding, rank
from fastload.diagnosis.trials import TrialContext, run_trials
from fastload.memory.tensors import batch_size_of

__all__ = ["doctor"]


def doctor(
    model: torch.nn.Module,
    loader: Iterable[Any],
    optimizer: torch.optim.Optimizer | None = None,
    *,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    steps: int = 20,
    warmup: int = 3,
    device: DeviceLike | None = None,
    autocast: torch.dtype | None = None,
    try_changes: bool = True,
    progress: bool | None = None,
    train_step: Callable[[Any], Any] | None = None,
    eval_step: Callable[[Any], Any] | None = None,
) -> DoctorReport:
    """Measure the user's step and loader, and say what to change, ranked by the gain.

    Args:
        model: The model, on ``device`` already or moved there for the measurement (and back).
        loader: Batches ``(inputs, targets, ...)`` or ``inputs``; the model is called on the
            inputs as they come (as ``fastload.train.Trainer`` calls it).
        optimizer: The optimizer (``None``: backward only).
        loss_fn: ``loss_fn(outputs, targets)``; cross-entropy by default.
        steps: Steps to measure, after ``warmup`` unmeasured ones.
        warmup: Steps run first and not counted (cuDNN autotuning, worker start-up).
        device: Where to run (the model's device when ``None``).
        autocast: The dtype the user's forward pass runs under (``torch.bfloat16``...), if any.
        try_changes: Also time the cheap changes (channels_last, bf16 autocast, a fused
            optimizer, a batch twice as large) on a copy of the model, and, when the loader is
            the wall, the worker count :func:`~fastload.autotune.autotune` finds for it (10 s
            at most).
        progress: Show a progress bar (by default when standard error is a terminal).
        train_step: The user's own training step, called with a batch already on the device
            (forward, loss, backward, ``optimizer.step()``, ``zero_grad``): checked for
            gradients zeroed with ``set_to_none=False`` (timed against ``None``) and, on CUDA,
            for host syncs (``.item()``, ``.cpu()``...) inside it.
        eval_step: The user's evaluation step, called with such a batch: checked for a forward
            pass run with autograd on (timed against ``torch.no_grad()``).

    A loader with ``state_dict`` (``fastload.DataLoader``) is put back where it was, so the
    training that follows sees the epochs it would have seen without the measurement.

    Returns:
        The report.

    Raises:
        ValueError: ``steps`` or ``warmup`` is out of range, or the loader is empty.
    """
    check_int("steps", steps, minimum=1)
    check_int("warmup", warmup, minimum=0)
    parameter = next(model.parameters(), None)
    home = parameter.device if parameter is not None else torch.device("cpu")
    target = resolve_device(device) or home
    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    saved = save(model, optimizer)
    stateful = callable(getattr(loader, "state_dict", None))
    place = loader.state_dict() if stateful else None  # type: ignore[attr-defined]
    bar = Progress("fastload doctor", enabled=progress, rate=False)
    tick = Ticks(bar, 2 * (warmup + steps) + (5 * (steps + 1) if try_changes else 0))
    try:
        model.to(target)
        model.train()
        step = Step(model, optimizer, loss_fn, target, autocast=autocast)
        report, times = _measured(step, loader, warmup, steps, tick)
        trials = TrialContext(
            model, optimizer, loss_fn, target, times.first, steps, autocast, tick, loader,
            report, try_changes=try_changes,
        )  # fmt: skip
        findings = _findings(trials, frozenset(times.shapes), step, train_step, eval_step)
        report.findings = sorted(findings, key=rank)
        return report
    finally:
        bar.close()
        model.to(home)
        restore(model, optimizer, saved)
        if place is not None:
            loader.load_state_dict(place)  # type: ignore[attr-defined]


def _findings(
    trials: TrialContext,
    shapes: frozenset[tuple[int, ...]],
    step: Step,
    train_step: Callable[[Any], Any] | None,
    eval_step: Callable[[Any], Any] | None,
) -> list[Finding]:
    """The checks' findings, then the trials': the changes on a copy of the model, then the
    user's own step functions (on a batch of their own, as they would get it)."""
    ctx = Context(
        trials.model, trials.loader, trials.optimizer, trials.device, trials.batch,
        trials.report, shapes,
    )  # fmt: skip
    findings = run_trials(trials, run_checks(ctx))
    if train_step is not None or eval_step is not None:
        mine = dataclasses.replace(
            trials,
            batch=step.copy(next(iter(trials.loader))),
            train_step=train_step,
            eval_step=eval_step,
            try_changes=False,
        )
        findings = run_trials(mine, findings)
    return findings


def _measured(
    step: Step, loader: Iterable[Any], warmup: int, steps: int, tick: Callable[[], Any]
) -> tuple[DoctorReport, Any]:
    """The step fed by the loader, then the loader alone: the report's figures."""
    device = step.device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times = measure_steps(step, loader, warmup, steps, tick)
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
    loader_rate = loader_alone(loader, warmup, steps, tick)
    batch_size = batch_size_of(times.first)
    wait, copied, compute = median(times.waits), median(times.copies), median(times.computes)
    step_rate = batch_size / (copied + compute) if copied + compute > 0 else float("inf")
    report = DoctorReport(
        device=str(device),
        steps=steps,
        batch_size=batch_size,
        step_s=median(times.totals),
        data_wait_s=wait,
        copy_s=copied,
        compute_s=compute,
        loader_rate=loader_rate,
        step_rate=step_rate,
        bound="loader" if loader_rate < step_rate else "model",
        peak_memory_bytes=peak,
    )
    return report, times
