"""What doctor times: one list of trials, each a change measured against the step as it is.

A :class:`Trial` has a key, when it ``applies`` to a run, and how it ``run``s (returning a
measured :class:`~fastload.diagnosis.report.Finding`, or ``None`` when there is nothing to
say). The cheap changes run on a copy of the model; ``more_workers`` asks autotune;
``thread_workers`` measures a fastload loader with its workers as threads; the user's
own step functions are timed as written and as they should be. A new timed change is one
function here and one entry in :data:`TRIALS`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from fastload.autotune import autotune
from fastload.autotune.measuring import measure_loader
from fastload.diagnosis.checks import FUSABLE, has_conv
from fastload.diagnosis.measuring import Step, timed
from fastload.diagnosis.report import DoctorReport, Finding
from fastload.memory.tensors import batch_size_of, inputs_of
from fastload.options import NAMES

__all__ = ["TRIALS", "WORTH", "Trial", "TrialContext"]

WORTH = 1.05  # a change below this speedup is not worth a finding (it stays in report.tried)
_TUNE_BUDGET = 10.0  # seconds autotune may take inside doctor
_THREADS_SECONDS = 5.0  # seconds measuring the loader with thread workers
# a torch DataLoader's settings that a trial loader must share with it (a fastload loader's
# attributes are what it was given, so its collate_fn is the user's, or torch's default)
_LOADER_SETTINGS = ("collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn")


@dataclass
class TrialContext:
    """What a trial reads: the run, a batch on the device, and the step as measured."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    loss_fn: Callable[..., torch.Tensor]
    device: torch.device
    batch: Any
    steps: int
    autocast: torch.dtype | None
    tick: Callable[[], Any]
    loader: Any
    report: DoctorReport
    train_step: Callable[[Any], Any] | None = None
    eval_step: Callable[[Any], Any] | None = None
    try_changes: bool = True

    @functools.cached_property
    def clone(self) -> torch.nn.Module:
        """A copy of the model the changes are tried on."""
        return copy.deepcopy(self.model)

    @functools.cached_property
    def base(self) -> float:
        """Seconds of a step on the copy, unchanged."""
        return self.time(self.step_with({}))

    def step_with(self, changes: dict[str, Any], **options: Any) -> Step:
        """The step on the copy, its optimizer made again with ``changes``."""
        options.setdefault("autocast", self.autocast)
        tuned = None
        if self.optimizer is not None:
            kind = type(self.optimizer)
            accepted = inspect.signature(kind).parameters
            given = {k: v for k, v in self.optimizer.defaults.items() if k in accepted}
            tuned = kind(self.clone.parameters(), **{**given, **changes})
        return Step(self.clone, tuned, self.loss_fn, self.device, **options)

    def time(self, step: Step, on: Any = None) -> float:
        batch = self.batch if on is None else on
        return timed(lambda: step(batch), self.device, repeats=self.steps, tick=self.tick)

    @property
    def four_d_conv(self) -> bool:
        inputs = inputs_of(self.batch)
        return has_conv(self.model) and isinstance(inputs, torch.Tensor) and inputs.ndim == 4


@dataclass(frozen=True)
class Trial:
    """One timed change.

    Attributes:
        key: Its name in ``DoctorReport.tried``.
        applies: Whether it is tried on this run.
        run: Times it; a measured finding, or ``None``.
        threshold: Its finding is kept only at a gain of :data:`WORTH` or more (the cheap
            changes); the user's own mistakes are reported whatever they cost here.
        replaces: The stated findings its measured one replaces.
    """

    key: str
    applies: Callable[[TrialContext], bool]
    run: Callable[[TrialContext], Finding | None]
    threshold: bool = True
    replaces: tuple[str, ...] = ()


def _fusable(ctx: TrialContext) -> bool:
    optimizer = ctx.optimizer
    return (
        ctx.try_changes
        and ctx.device.type == "cuda"
        and isinstance(optimizer, FUSABLE)
        and not optimizer.defaults.get("fused")
    )


def _fused_optimizer(ctx: TrialContext) -> Finding:
    name = type(ctx.optimizer).__name__
    tried = ctx.time(ctx.step_with({"fused": True, "foreach": None}))
    fix = f"torch.optim.{name}(..., fused=True)"
    return _change("optimizer_not_fused", f"fused {name}", ctx.base, tried, fix)


def _bf16_applies(ctx: TrialContext) -> bool:
    if not ctx.try_changes or ctx.autocast is not None:
        return False
    return ctx.device.type == "cpu" or torch.cuda.is_bf16_supported()


def _bf16(ctx: TrialContext) -> Finding:
    tried = ctx.time(ctx.step_with({}, autocast=torch.bfloat16))
    fix = "Trainer(..., precision='bf16'), or torch.autocast(device, dtype=torch.bfloat16)"
    return _change("bf16_autocast", "bf16 autocast", ctx.base, tried, fix)


def _larger_batch(ctx: TrialContext) -> Finding | None:
    doubled = _doubled(ctx.batch)
    if doubled is None:
        return None
    try:
        larger = ctx.time(ctx.step_with({}), on=doubled)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None  # it does not fit: nothing to say
    # twice the samples in `larger` seconds: the throughput's gain
    return _bigger(ctx.base, larger, batch_size_of(ctx.batch))


def _channels_last(ctx: TrialContext) -> Finding:
    ctx.clone.to(memory_format=torch.channels_last)  # the copy is converted in place: last
    tried = ctx.time(ctx.step_with({}, channels_last=True))
    fix = "model.to(memory_format=torch.channels_last); DataLoader(..., channels_last=True)"
    return _change("channels_last", "channels_last", ctx.base, tried, fix)


def _more_workers_applies(ctx: TrialContext) -> bool:
    loader = ctx.loader
    return (
        ctx.try_changes
        and ctx.report.bound == "loader"
        and getattr(loader, "dataset", None) is not None
        and isinstance(getattr(loader, "batch_size", None), int)
    )


def _more_workers(ctx: TrialContext) -> Finding | None:
    """The loader with the worker count autotune finds, measured: the step's throughput then
    (the slower of loader and step) against now."""
    loader, report = ctx.loader, ctx.report
    settings = {k: getattr(loader, k) for k in _LOADER_SETTINGS if hasattr(loader, k)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small set's note: the figure is what matters here
        tuned = autotune(
            loader.dataset,
            batch_size=loader.batch_size,
            loader_kwargs=settings,
            budget=_TUNE_BUDGET,
            cache=False,
            loader=type(loader),
        )
    current = getattr(loader, "num_workers", 0)
    if tuned.num_workers == current and tuned.prefetch_factor is None:
        return None
    before = min(report.loader_rate, report.step_rate)
    after = min(tuned.images_per_sec, report.step_rate)
    gain = after / before if before > 0 else 1.0
    setting, prefetch = f"num_workers={tuned.num_workers}", ""
    if tuned.prefetch_factor is not None:
        setting += f", prefetch_factor={tuned.prefetch_factor}"
        prefetch = f" and prefetch_factor {tuned.prefetch_factor}"
    return Finding(
        "more_workers",
        f"num_workers={current}: the loader cannot keep up with the step",
        f"DataLoader(..., {setting}), or num_workers='auto' (fastload.DataLoader)",
        f"measured: the loader alone {report.loader_rate:,.0f} -> {tuned.images_per_sec:,.0f} "
        f"images/s with {tuned.num_workers} workers{prefetch} (autotune), the step takes "
        f"{report.step_rate:,.0f}",
        round(gain, 2),
        measured=True,
    )


def _thread_workers_applies(ctx: TrialContext) -> bool:
    loader = ctx.loader
    return (
        _more_workers_applies(ctx)
        and getattr(loader, "worker_type", None) == "process"
        and getattr(loader, "num_workers", 0) >= 1
    )


def _thread_workers(ctx: TrialContext) -> Finding | None:
    """The fastload loader as it is, its workers made threads (where they can run with the
    same meaning), measured: the step's throughput then against now."""
    loader, report = ctx.loader, ctx.report
    settings = {k: getattr(loader, k) for k in _LOADER_SETTINGS if hasattr(loader, k)}
    own = {name: getattr(loader, name) for name in NAMES if hasattr(loader, name)}

    def make(workers: int) -> Any:
        made = type(loader)(
            loader.dataset,
            batch_size=loader.batch_size,
            num_workers=workers,
            **settings,
            **{**own, "worker_type": "thread"},
        )
        _ = made.plan  # refused here when threads would not mean what processes do
        return made

    try:
        make(loader.num_workers)
    except ValueError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rate = measure_loader(make, loader.num_workers, _THREADS_SECONDS)
    before = min(report.loader_rate, report.step_rate)
    after = min(rate, report.step_rate)
    return Finding(
        "thread_workers",
        f"num_workers={loader.num_workers} worker processes: the loader cannot keep up with "
        "the step",
        "DataLoader(..., worker_type='thread'): the same batches, made on threads of this process",
        f"measured: the loader alone {report.loader_rate:,.0f} -> {rate:,.0f} images/s with "
        f"{loader.num_workers} worker threads, the step takes {report.step_rate:,.0f}",
        round(after / before if before > 0 else 1.0, 2),
        measured=True,
    )


def _zero_grad_to_zeros(ctx: TrialContext) -> Finding | None:
    train_step, batch, device = ctx.train_step, ctx.batch, ctx.device
    assert train_step is not None
    owners: list[Any] = [ctx.model, *([ctx.optimizer] if ctx.optimizer is not None else [])]
    seen: list[bool] = []
    with _zero_grad_seen(owners, seen):
        as_written = timed(lambda: train_step(batch), device)
    if False not in seen:
        return None
    with _zero_grad_seen(owners, [], force=True):
        freed = timed(lambda: train_step(batch), device)
    return Finding(
        "zero_grad_to_zeros",
        "gradients are zeroed with zero_grad(set_to_none=False): every step fills "
        "them with zeros, then adds into them",
        "optimizer.zero_grad() (set_to_none=True is torch's default)",
        f"measured: step {as_written * 1000:.1f} ms -> {freed * 1000:.1f} ms with set_to_none=True",
        round(as_written / freed if freed > 0 else 1.0, 2),
        measured=True,
    )


def _eval_with_grad(ctx: TrialContext) -> Finding | None:
    eval_step, batch, device = ctx.eval_step, ctx.batch, ctx.device
    assert eval_step is not None
    grad_on: list[bool] = []
    hook = ctx.model.register_forward_pre_hook(lambda *_: grad_on.append(torch.is_grad_enabled()))
    try:
        eval_step(batch)
    finally:
        hook.remove()
    if not any(grad_on):
        return None
    as_written = timed(lambda: eval_step(batch), device)

    def without_grad() -> None:
        with torch.no_grad():
            eval_step(batch)

    quiet = timed(without_grad, device)
    return Finding(
        "eval_with_grad",
        "evaluation runs the model with autograd on: it records every operation "
        "for a backward pass that never comes",
        "torch.inference_mode() (or torch.no_grad()) around evaluation",
        f"measured: eval step {as_written * 1000:.1f} ms -> {quiet * 1000:.1f} ms under no_grad",
        round(as_written / quiet if quiet > 0 else 1.0, 2),
        measured=True,
    )


def _host_syncs(ctx: TrialContext) -> Finding | None:
    """Host syncs inside one call of the user's step, found by torch's sync debug mode."""
    train_step, batch = ctx.train_step, ctx.batch
    assert train_step is not None
    train_step(batch)  # warm-up: cuDNN's first choices sync by themselves
    torch.cuda.synchronize()
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(1)  # warn on every synchronizing call
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train_step(batch)
    finally:
        torch.cuda.set_sync_debug_mode(before)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    if not syncs:
        return None
    return Finding(
        "host_syncs",
        f"{len(syncs)} host sync(s) per step (.item(), .cpu(), printing a tensor...): the "
        "CPU waits for the GPU and queues nothing meanwhile",
        "keep losses and metrics on the GPU; read them (.item()) once per log interval",
        "each sync drains the GPU's queue: the next step's launches wait for it",
    )


# every timed change, in the order tried (channels_last converts the copy: it comes last of
# the changes tried on it)
TRIALS: tuple[Trial, ...] = (
    Trial("fused_optimizer", _fusable, _fused_optimizer),
    Trial("bf16_autocast", _bf16_applies, _bf16),
    Trial("larger_batch", lambda c: c.try_changes and c.four_d_conv, _larger_batch),
    Trial("channels_last", lambda c: c.try_changes and c.four_d_conv, _channels_last),
    Trial("more_workers", _more_workers_applies, _more_workers, replaces=("num_workers_0",)),
    Trial("thread_workers", _thread_workers_applies, _thread_workers),
    Trial(
        "zero_grad_to_zeros",
        lambda c: c.train_step is not None,
        _zero_grad_to_zeros,
        threshold=False,
    ),
    Trial("eval_with_grad", lambda c: c.eval_step is not None, _eval_with_grad, threshold=False),
    Trial(
        "host_syncs",
        lambda c: c.train_step is not None and c.device.type == "cuda",
        _host_syncs,
        threshold=False,
    ),
)


def run_trials(ctx: TrialContext, findings: list[Finding]) -> list[Finding]:
    """Run every trial that applies; a measured finding replaces the stated one of its key
    (and those it ``replaces``). ``ctx.report.tried`` gains the gain of each change tried."""
    for trial in TRIALS:
        if not trial.applies(ctx):
            continue
        finding = trial.run(ctx)
        if finding is None:
            continue
        if trial.threshold:
            assert finding.gain is not None  # the cheap changes are always measured
            ctx.report.tried[trial.key] = finding.gain
            if finding.gain < WORTH:  # measured, and not worth it: the stated finding goes too
                findings = [f for f in findings if f.key != finding.key]
                continue
        gone = {finding.key, *trial.replaces}
        findings = [f for f in findings if f.key not in gone]
        findings.append(finding)
    return findings


def _doubled(batch: Any) -> Any:
    """The batch twice over (inputs and targets concatenated), or ``None`` for a batch that is
    not an (inputs, targets) pair of tensors."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        return None
    inputs, targets = batch[0], batch[1]
    if not (isinstance(inputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    return (torch.cat([inputs, inputs]), torch.cat([targets, targets]))


def _bigger(base: float, doubled: float, batch_size: int) -> Finding:
    if base <= 0 or doubled <= 0:  # too fast for the clock to tell: no gain shown
        gain, cost = 1.0, f"not measurable with a batch of {2 * batch_size}"
    else:
        gain = 2 * base / doubled
        cost = (
            f"measured: {batch_size / base:,.0f} -> {2 * batch_size / doubled:,.0f} samples/s "
            f"of compute with a batch of {2 * batch_size}"
        )
    return Finding(
        "larger_batch",
        f"a batch of {batch_size} leaves the device room to work faster per sample",
        "fastload.train.find_batch_size(...) for the largest batch that fits, and "
        "scale_lr(...) for its learning rate",
        cost,
        round(gain, 2),
        measured=True,
    )


@contextlib.contextmanager
def _zero_grad_seen(
    owners: list[Any], seen: list[bool], force: bool | None = None
) -> Iterator[None]:
    """Record the ``set_to_none`` each ``owner.zero_grad`` is called with (``force``: call it
    with that instead); the owners' own ``zero_grad`` is back afterwards."""
    previous = {id(o): o.__dict__.get("zero_grad") for o in owners}
    for owner in owners:
        method = owner.zero_grad

        def spy(set_to_none: bool = True, _method: Any = method) -> Any:
            seen.append(set_to_none)
            return _method(set_to_none=set_to_none if force is None else force)

        owner.zero_grad = spy
    try:
        yield
    finally:
        for owner in owners:
            if previous[id(owner)] is None:
                del owner.zero_grad
            else:
                owner.zero_grad = previous[id(owner)]


def _change(key: str, name: str, base: float, tried: float, fix: str) -> Finding:
    gain = base / tried if tried > 0 else 1.0
    if gain >= 1.0:
        cost = f"measured: compute {base * 1000:.1f} ms -> {tried * 1000:.1f} ms with {name}"
    else:
        cost = f"measured: {name} is slower here ({base * 1000:.1f} -> {tried * 1000:.1f} ms)"
    return Finding(key, f"{name} not used", fix, cost, round(gain, 2), measured=True)
