"""``fastload.doctor``: the speed checklist, measured on the user's own step and loader.

It runs a short, bounded measurement of one training step as the user wrote it (their model,
optimizer and loss; forward, backward, step) fed by their loader, and splits each step's time
into waiting for data, the host-to-device copy and compute. It measures the loader alone
against what the step consumes, tries the cheap changes (channels_last, bf16 autocast, a fused
optimizer) on a copy of the model, and checks what can be read off the objects (a bias before a
BatchNorm, ``num_workers=0``, unpinned memory, float32 batches, ``cudnn.benchmark``). Each
finding carries its cost, measured where it was tried, and the fix in one line; they are
ranked by the gain expected.

The model, its buffers (BatchNorm statistics), the optimizer's state and torch's random
streams are put back as they were: as far as the user's objects are concerned, nothing trained.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from fastload._progress import Progress
from fastload.autotune import autotune
from fastload.devices import DeviceLike, resolve_device
from fastload.iteration import endless
from fastload.loader import DataLoader
from fastload.tensors import map_tensors

__all__ = ["DoctorReport", "Finding", "doctor", "static_findings"]

_CONV = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)
_NORM = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
_FUSABLE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


@dataclass(frozen=True)
class Finding:
    """One thing the run is missing, what it costs and the fix.

    Attributes:
        key: A stable name for the finding (``"num_workers_0"``, ``"conv_bias_before_bn"``...).
        what: What was found, in one line.
        fix: The fastload option or torch call that fixes it, in one line.
        cost: What it costs: the measured figure, or the stated reason.
        gain: The step's expected speedup with the fix (1.25: a quarter faster), when known.
        measured: Whether ``gain`` was measured here (else it is a bound or unknown).
    """

    key: str
    what: str
    fix: str
    cost: str
    gain: float | None = None
    measured: bool = False


@dataclass
class DoctorReport:
    """What :func:`doctor` measured: print it for a table, ``to_dict()`` for JSON.

    Attributes:
        device: Where the step ran.
        steps: Steps measured (after the warm-up ones).
        batch_size: Samples per batch.
        step_s: Median seconds per step, all included.
        data_wait_s: Median seconds per step spent waiting for the loader.
        copy_s: Median seconds per step copying the batch to the device.
        compute_s: Median seconds per step in forward, backward and the optimizer step.
        loader_rate: Samples per second the loader gives alone.
        step_rate: Samples per second the step consumes when data is ready.
        bound: ``"loader"`` or ``"model"``: which one sets the pace.
        peak_memory_bytes: Peak CUDA memory allocated during the step (``None`` on the CPU).
        tried: Each change timed on a copy of the model, and its compute speedup (below 1:
            slower here), whether or not it made a finding.
        findings: Ranked, largest expected gain first.
    """

    device: str
    steps: int
    batch_size: int
    step_s: float
    data_wait_s: float
    copy_s: float
    compute_s: float
    loader_rate: float
    step_rate: float
    bound: str
    peak_memory_bytes: int | None
    tried: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def data_wait_share(self) -> float:
        """The share of each step spent waiting for data."""
        total = self.data_wait_s + self.copy_s + self.compute_s
        return self.data_wait_s / total if total > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (its keys do not change between runs)."""
        out = asdict(self)
        out["data_wait_share"] = round(self.data_wait_share, 4)
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON, keys sorted."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    def __str__(self) -> str:
        ms = 1000.0
        lines = [
            f"fastload doctor: {self.steps} steps of batch {self.batch_size} on {self.device}",
            f"  step {self.step_s * ms:.1f} ms = waiting for data {self.data_wait_s * ms:.1f} ms"
            f" ({self.data_wait_share:.0%}) + copy {self.copy_s * ms:.1f} ms"
            f" + compute {self.compute_s * ms:.1f} ms",
            f"  the loader alone gives {self.loader_rate:,.0f} samples/s; the step takes "
            f"{self.step_rate:,.0f}/s: the {self.bound} sets the pace",
        ]
        if self.peak_memory_bytes is not None:
            lines.append(f"  peak memory {self.peak_memory_bytes / 2**20:,.0f} MiB")
        on_model = {k: g for k, g in self.tried.items() if k != "more_workers"}
        if on_model:
            timed = ", ".join(f"{name} x{gain:.2f}" for name, gain in on_model.items())
            lines.append(f"  tried on a copy of the model (compute speedup): {timed}")
        if "more_workers" in self.tried:
            lines.append(
                f"  tried the workers autotune finds (step speedup): "
                f"x{self.tried['more_workers']:.2f}"
            )
        if not self.findings:
            lines.append("  nothing to fix found")
            return "\n".join(lines)
        lines.append("")
        lines.append(
            "  findings, largest expected gain first (xN: the step's speedup, measured; ^: at most)"
        )
        for k, f in enumerate(self.findings, 1):
            gain = (
                "   ?    " if f.gain is None else f"x{f.gain:<5.2f}" + ("  " if f.measured else "^")
            )
            lines.append(f"  {k:>2}. {gain} {f.what}")
            lines.append(f"      {' ' * 9}cost: {f.cost}")
            lines.append(f"      {' ' * 9}fix:  {f.fix}")
        return "\n".join(lines)


# ---------------------------------------------------------------- reading the objects


def bias_before_norm(model: torch.nn.Module, example: Any) -> list[tuple[str, str]]:
    """Conv/Linear layers with a bias whose output goes straight into a BatchNorm.

    Found by running ``model(example)`` once with hooks (no gradients): a BatchNorm whose input
    is the very tensor a biased layer returned. The bias is wasted there: the norm subtracts
    the mean, bias included.

    Returns:
        ``(layer name, norm name)`` pairs.
    """
    made: dict[int, tuple[str, torch.Tensor]] = {}
    training = model.training
    found: list[tuple[str, str]] = []
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, _CONV) and module.bias is not None:

            def keep(mod: Any, args: Any, out: Any, name: str = name) -> None:
                if isinstance(out, torch.Tensor):
                    made[id(out)] = (name, out)  # the tensor is held: its id stays its own

            handles.append(module.register_forward_hook(keep))
        elif isinstance(module, _NORM):

            def check(mod: Any, args: Any, name: str = name) -> None:
                if args and isinstance(args[0], torch.Tensor) and id(args[0]) in made:
                    source, tensor = made[id(args[0])]
                    if tensor is args[0]:
                        found.append((source, name))

            handles.append(module.register_forward_pre_hook(check))
    try:
        model.eval()  # nothing learnt: BatchNorm statistics stay as they are
        with torch.no_grad():
            model(example)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
        made.clear()
    return found


def static_findings(
    model: torch.nn.Module,
    loader: Any,
    optimizer: torch.optim.Optimizer | None,
    *,
    device: torch.device,
    batch: Any = None,
) -> list[Finding]:
    """What can be read off the objects, without timing anything.

    Args:
        model: The model.
        loader: The loader (its ``num_workers`` and ``pin_memory`` are read, when it has them).
        optimizer: The optimizer, if any.
        device: Where the model trains.
        batch: A batch from the loader, on ``device`` (its first element is the input).
    """
    found: list[Finding] = []
    cuda = device.type == "cuda"
    workers = getattr(loader, "num_workers", None)
    if workers == 0:
        found.append(
            Finding(
                "num_workers_0",
                "the loader decodes in the training process (num_workers=0)",
                "fastload.DataLoader(..., num_workers='auto')",
                "decoding and the step take turns instead of overlapping",
            )
        )
    if cuda and getattr(loader, "pin_memory", None) is False and not _on_device(loader):
        found.append(
            Finding(
                "pin_memory_off",
                "batches are copied to the GPU from pageable memory (pin_memory=False)",
                "DataLoader(..., pin_memory=True), or fastload.DataLoader(..., device='cuda')",
                "a pageable copy is synchronous and about half the speed of a pinned one",
            )
        )
    inputs = _inputs(batch)
    host_floats = (
        isinstance(inputs, torch.Tensor)
        and inputs.ndim == 4
        and inputs.dtype == torch.float32
        and inputs.device.type == "cpu"
    )
    if cuda and host_floats:
        found.append(
            Finding(
                "float32_batches",
                "the loader hands over float32 images",
                "deliver uint8 and normalize on the device: "
                "batch_transforms=fastload.gpu.Normalize(mean, std)",
                "4x the bytes of uint8 to collate, share between processes and copy",
            )
        )
    if batch is not None and inputs is not None:
        pairs = bias_before_norm(model, inputs)
        if pairs:
            named = ", ".join(f"{a} -> {b}" for a, b in pairs[:4])
            more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
            found.append(
                Finding(
                    "conv_bias_before_bn",
                    f"{len(pairs)} layer(s) with a bias feed a BatchNorm: {named}{more}",
                    "build those layers with bias=False",
                    "the norm removes the bias: its parameters, gradients and adds are wasted",
                )
            )
    fusable = isinstance(optimizer, _FUSABLE) and not optimizer.defaults.get("fused")
    if cuda and fusable:
        name = type(optimizer).__name__
        found.append(
            Finding(
                "optimizer_not_fused",
                f"{name} without fused=True",
                f"torch.optim.{name}(..., fused=True)",
                "the update runs as several kernels per parameter group instead of one",
            )
        )
    return found


def _on_device(loader: Any) -> bool:
    """A fastload loader that delivers on a CUDA device pins for itself."""
    device = getattr(loader, "device", None)
    return isinstance(device, torch.device) and device.type == "cuda"


def _inputs(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch:
        return batch[0]
    if isinstance(batch, dict) and batch:
        return next(iter(batch.values()))
    return None


def _targets(batch: Any) -> Any:
    if isinstance(batch, (list, tuple)) and len(batch) > 1:
        return batch[1]
    return None


def _batch_size(batch: Any) -> int:
    inputs = _inputs(batch)
    return int(inputs.shape[0]) if isinstance(inputs, torch.Tensor) and inputs.ndim else 1


# ---------------------------------------------------------------- the measured step


class _Step:
    """The user's step: forward, loss, backward, optimizer step; timed with device syncs."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss_fn: Callable[..., torch.Tensor],
        device: torch.device,
        *,
        autocast: torch.dtype | None = None,
        channels_last: bool = False,
    ) -> None:
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.device, self.autocast, self.channels_last = device, autocast, channels_last

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def copy(self, batch: Any) -> Any:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(self.device, non_blocking=t.is_pinned())

        return map_tensors(move, batch)

    def __call__(self, batch: Any) -> None:
        inputs, targets = _inputs(batch), _targets(batch)
        if self.channels_last and isinstance(inputs, torch.Tensor) and inputs.ndim == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        enabled = self.autocast is not None
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=enabled):
            outputs = self.model(inputs)
            loss = self.loss_fn(outputs, targets) if targets is not None else outputs.mean()
        loss.float().backward()
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.model.zero_grad(set_to_none=True)


@dataclass
class _Saved:
    model: dict[str, Any]
    optimizer: dict[str, Any] | None
    training: bool
    cpu_rng: torch.Tensor
    cuda_rng: list[torch.Tensor] | None
    grads: dict[str, torch.Tensor | None]


def _save(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> _Saved:
    return _Saved(
        model=copy.deepcopy(model.state_dict()),
        optimizer=None if optimizer is None else copy.deepcopy(optimizer.state_dict()),
        training=model.training,
        cpu_rng=torch.get_rng_state(),
        cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        grads={
            n: None if p.grad is None else p.grad.detach().clone()
            for n, p in model.named_parameters()
        },
    )


def _restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, saved: _Saved):
    model.load_state_dict(saved.model)
    if optimizer is not None and saved.optimizer is not None:
        optimizer.load_state_dict(saved.optimizer)
    model.train(saved.training)
    for name, parameter in model.named_parameters():
        grad = saved.grads.get(name)
        parameter.grad = None if grad is None else grad
    torch.set_rng_state(saved.cpu_rng)
    if saved.cuda_rng is not None:
        torch.cuda.set_rng_state_all(saved.cuda_rng)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


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
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an int >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be an int >= 0")
    parameter = next(model.parameters(), None)
    home = parameter.device if parameter is not None else torch.device("cpu")
    target = resolve_device(device) or home
    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    saved = _save(model, optimizer)
    stateful = callable(getattr(loader, "state_dict", None))
    place = loader.state_dict() if stateful else None  # type: ignore[attr-defined]
    bar = Progress("fastload doctor", enabled=progress, rate=False)
    try:
        model.to(target)
        model.train()
        report = _diagnose(
            model, loader, optimizer, loss_fn, target, steps, warmup, autocast, try_changes, bar
        )
        if train_step is not None or eval_step is not None:
            batch = _Step(model, optimizer, loss_fn, target).copy(next(iter(loader)))
            found = _user_steps(model, optimizer, target, batch, train_step, eval_step)
            report.findings = sorted([*report.findings, *found], key=_rank)
        return report
    finally:
        bar.close()
        model.to(home)
        _restore(model, optimizer, saved)
        if place is not None:
            loader.load_state_dict(place)  # type: ignore[attr-defined]


def _diagnose(
    model: torch.nn.Module,
    loader: Iterable[Any],
    optimizer: torch.optim.Optimizer | None,
    loss_fn: Callable[..., torch.Tensor],
    device: torch.device,
    steps: int,
    warmup: int,
    autocast: torch.dtype | None,
    try_changes: bool,
    bar: Progress,
) -> DoctorReport:
    cuda = device.type == "cuda"
    step = _Step(model, optimizer, loss_fn, device, autocast=autocast)
    tick = _Ticks(bar, 2 * (warmup + steps) + (5 * (steps + 1) if try_changes else 0))
    waits, copies, computes, shapes = [], [], [], set()
    first: Any = None
    batches = endless(loader)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    for k in range(warmup + steps):
        t0 = time.perf_counter()
        host = next(batches)
        t1 = time.perf_counter()
        batch = step.copy(host)
        step.sync()
        t2 = time.perf_counter()
        step(batch)
        step.sync()
        t3 = time.perf_counter()
        if first is None:
            first = batch
        if k >= warmup:
            waits.append(t1 - t0)
            copies.append(t2 - t1)
            computes.append(t3 - t2)
            inputs = _inputs(batch)
            if isinstance(inputs, torch.Tensor):
                shapes.add(tuple(inputs.shape))
        tick()
    del batches  # the loader's workers are let go before it is measured alone
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
    alone = _loader_alone(loader, warmup, steps, tick)
    batch_size = _batch_size(first)
    wait, copied, compute = _median(waits), _median(copies), _median(computes)
    loader_rate = batch_size / alone if alone > 0 else float("inf")
    step_rate = batch_size / (copied + compute) if copied + compute > 0 else float("inf")
    report = DoctorReport(
        device=str(device),
        steps=steps,
        batch_size=batch_size,
        step_s=_median([w + c + m for w, c, m in zip(waits, copies, computes, strict=True)]),
        data_wait_s=wait,
        copy_s=copied,
        compute_s=compute,
        loader_rate=loader_rate,
        step_rate=step_rate,
        bound="loader" if loader_rate < step_rate else "model",
        peak_memory_bytes=peak,
    )
    findings = static_findings(model, loader, optimizer, device=device, batch=first)
    findings = [_priced(f, report) for f in findings]
    findings += _pace_findings(report)
    if cuda and not torch.backends.cudnn.benchmark and len(shapes) == 1 and _has_conv(model):
        findings.append(
            Finding(
                "cudnn_benchmark_off",
                "cudnn.benchmark is off and every batch has the same shape",
                "torch.backends.cudnn.benchmark = True",
                "cuDNN uses its default convolution algorithms instead of the fastest measured",
            )
        )
    if try_changes:
        tried = _tried(model, optimizer, loss_fn, device, first, steps, autocast, tick)
        for key, finding in tried:
            assert finding.gain is not None
            report.tried[key] = finding.gain
            findings = [f for f in findings if f.key != finding.key]  # measured beats stated
            if finding.gain >= _WORTH:
                findings.append(finding)
    if try_changes and report.bound == "loader":
        more = _more_workers(loader, report)
        if more is not None:
            report.tried["more_workers"] = more.gain or 1.0
            if more.gain is not None and more.gain >= _WORTH:
                findings = [f for f in findings if f.key != "num_workers_0"]  # measured now
                findings.append(more)
    report.findings = sorted(findings, key=_rank)
    return report


_TUNE_BUDGET = 10.0  # seconds autotune may take inside doctor
# a torch DataLoader's settings that a trial loader must share with it
_LOADER_SETTINGS = ("collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn")


def _more_workers(loader: Any, report: DoctorReport) -> Finding | None:
    """The loader with the worker count autotune finds, measured: the step's throughput then
    (the slower of loader and step) against now. ``None`` for a loader autotune cannot rebuild
    (no ``dataset`` / ``batch_size``, or a batch sampler of its own)."""
    dataset, batch_size = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    if dataset is None or not isinstance(batch_size, int):
        return None
    settings = {k: getattr(loader, k) for k in _LOADER_SETTINGS if hasattr(loader, k)}
    if isinstance(loader, DataLoader):  # its collate_fn is its own wrapper: it makes it again
        settings.pop("collate_fn", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small set's note: the figure is what matters here
        tuned = autotune(
            dataset,
            batch_size=batch_size,
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


_WORTH = 1.05  # a tried change below this speedup is not worth a finding (it stays in .tried)


class _Ticks:
    """Advances the progress bar one unit of work at a time."""

    def __init__(self, bar: Progress, total: int) -> None:
        self.bar, self.total, self.done = bar, total, 0

    def __call__(self) -> None:
        self.done += 1
        self.bar(min(self.done, self.total), self.total)


def _loader_alone(loader: Iterable[Any], warmup: int, steps: int, tick: Callable[[], Any]) -> float:
    """Median seconds per batch of the loader with nothing else to do."""
    times = []
    batches = endless(loader)
    for k in range(warmup + steps):
        t0 = time.perf_counter()
        next(batches)
        if k >= warmup:
            times.append(time.perf_counter() - t0)
        tick()
    del batches
    return _median(times)


def _has_conv(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def _priced(finding: Finding, report: DoctorReport) -> Finding:
    """A loader finding costs at most the step's time on data (waiting, and copying for the
    copy-related ones): the bound on what fixing it gives."""
    total = report.data_wait_s + report.copy_s + report.compute_s
    if finding.key == "num_workers_0":
        spent = report.data_wait_s
    elif finding.key in ("pin_memory_off", "float32_batches"):
        spent = report.data_wait_s + report.copy_s
    else:
        return finding
    share = spent / total if total > 0 else 0.0
    if share < 0.02:
        return finding
    cost = f"{finding.cost}; {share:.0%} of each step is spent on it"
    gain = round(1.0 / max(1.0 - share, 0.05), 2)
    return Finding(finding.key, finding.what, finding.fix, cost, gain)


def _pace_findings(report: DoctorReport) -> list[Finding]:
    if report.bound != "loader" or report.data_wait_share < 0.1:
        return []
    gain = 1.0 / max(1.0 - report.data_wait_share, 0.05)
    return [
        Finding(
            "loader_bound",
            f"the step waits {report.data_wait_share:.0%} of its time for data: the loader "
            f"gives {report.loader_rate:,.0f} samples/s, the model takes {report.step_rate:,.0f}",
            "fastload autotune (num_workers, prefetch_factor), a faster backend "
            "(fastload bench), or decoding on the GPU (backend='nvimgcodec' / 'dali')",
            "measured: the data wait",
            round(gain, 2),
        )
    ]


def _tried(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    loss_fn: Callable[..., torch.Tensor],
    device: torch.device,
    batch: Any,
    steps: int,
    autocast: torch.dtype | None,
    tick: Callable[[], Any],
) -> Iterator[tuple[str, Finding]]:
    """Time the cheap changes on a copy of the model, on one batch already on the device."""
    clone = copy.deepcopy(model)

    def step_with(module: torch.nn.Module, changes: dict[str, Any], **options: Any) -> _Step:
        options.setdefault("autocast", autocast)
        tuned = None
        if optimizer is not None:
            kind = type(optimizer)
            accepted = inspect.signature(kind).parameters
            given = {k: v for k, v in optimizer.defaults.items() if k in accepted}
            tuned = kind(module.parameters(), **{**given, **changes})
        return _Step(module, tuned, loss_fn, device, **options)

    def timed(step: _Step, on: Any = batch) -> float:
        return _timed(lambda: step(on), device, repeats=steps, tick=tick)

    base = timed(step_with(clone, {}))
    fusable = isinstance(optimizer, _FUSABLE) and not optimizer.defaults.get("fused")
    if device.type == "cuda" and fusable:
        assert optimizer is not None
        name = type(optimizer).__name__
        tried = timed(step_with(clone, {"fused": True, "foreach": None}))
        fix = f"torch.optim.{name}(..., fused=True)"
        yield "fused_optimizer", _change("optimizer_not_fused", f"fused {name}", base, tried, fix)
    if autocast is None and (device.type == "cpu" or torch.cuda.is_bf16_supported()):
        tried = timed(step_with(clone, {}, autocast=torch.bfloat16))
        fix = "Trainer(..., precision='bf16'), or torch.autocast(device, dtype=torch.bfloat16)"
        yield "bf16_autocast", _change("bf16_autocast", "bf16 autocast", base, tried, fix)
    inputs = _inputs(batch)
    if _has_conv(model) and isinstance(inputs, torch.Tensor) and inputs.ndim == 4:
        doubled = _doubled(batch)
        if doubled is not None:
            larger = _larger_batch(lambda: timed(step_with(clone, {}), on=doubled))
            if larger is not None:
                # twice the samples in `larger` seconds: the throughput's gain
                yield "larger_batch", _bigger(base, larger, _batch_size(batch))
        clone.to(memory_format=torch.channels_last)  # last: the copy is converted in place
        tried = timed(step_with(clone, {}, channels_last=True))
        fix = "model.to(memory_format=torch.channels_last); DataLoader(..., channels_last=True)"
        yield "channels_last", _change("channels_last", "channels_last", base, tried, fix)


def _doubled(batch: Any) -> Any:
    """The batch twice over (inputs and targets concatenated), or ``None`` for a batch that is
    not an (inputs, targets) pair of tensors."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        return None
    inputs, targets = batch[0], batch[1]
    if not (isinstance(inputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    return (torch.cat([inputs, inputs]), torch.cat([targets, targets]))


def _larger_batch(time_it: Callable[[], float]) -> float | None:
    """Seconds a step takes on the doubled batch, ``None`` if it does not fit in memory."""
    try:
        return time_it()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def _bigger(base: float, doubled: float, batch_size: int) -> Finding:
    gain = 2 * base / doubled if doubled > 0 else 1.0
    cost = (
        f"measured: {batch_size / base:,.0f} -> {2 * batch_size / doubled:,.0f} samples/s of "
        f"compute with a batch of {2 * batch_size}"
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


_USER_REPEATS = 5  # timings of the user's own functions: a few calls each


def _timed(
    call: Callable[[], Any],
    device: torch.device,
    *,
    repeats: int = _USER_REPEATS,
    tick: Callable[[], Any] = lambda: None,
) -> float:
    """Median seconds of ``call()`` over ``repeats`` calls after one warm-up call (kernels
    chosen, autocast caches filled), with the device synced; ``tick`` after each call."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    call()
    sync()
    tick()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t0)
        tick()
    return _median(times)


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


def _user_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    device: torch.device,
    batch: Any,
    train_step: Callable[[Any], Any] | None,
    eval_step: Callable[[Any], Any] | None,
) -> list[Finding]:
    """What the user's own step functions do that costs time (doctor restores the model and
    optimizer they change)."""
    found = []
    if train_step is not None:
        owners: list[Any] = [model, *([optimizer] if optimizer is not None else [])]
        seen: list[bool] = []
        with _zero_grad_seen(owners, seen):
            as_written = _timed(lambda: train_step(batch), device)
        if False in seen:
            with _zero_grad_seen(owners, [], force=True):
                freed = _timed(lambda: train_step(batch), device)
            gain = as_written / freed if freed > 0 else 1.0
            found.append(
                Finding(
                    "zero_grad_to_zeros",
                    "gradients are zeroed with zero_grad(set_to_none=False): every step fills "
                    "them with zeros, then adds into them",
                    "optimizer.zero_grad() (set_to_none=True is torch's default)",
                    f"measured: step {as_written * 1000:.1f} ms -> {freed * 1000:.1f} ms with "
                    "set_to_none=True",
                    round(gain, 2),
                    measured=True,
                )
            )
        if device.type == "cuda":
            found += _host_syncs(train_step, batch)
    if eval_step is not None:
        grad_on: list[bool] = []
        hook = model.register_forward_pre_hook(lambda *_: grad_on.append(torch.is_grad_enabled()))
        try:
            eval_step(batch)
        finally:
            hook.remove()
        if any(grad_on):
            as_written = _timed(lambda: eval_step(batch), device)

            def without_grad() -> None:
                with torch.no_grad():
                    eval_step(batch)

            quiet = _timed(without_grad, device)
            found.append(
                Finding(
                    "eval_with_grad",
                    "evaluation runs the model with autograd on: it records every operation "
                    "for a backward pass that never comes",
                    "torch.inference_mode() (or torch.no_grad()) around evaluation",
                    f"measured: eval step {as_written * 1000:.1f} ms -> {quiet * 1000:.1f} ms "
                    "under no_grad",
                    round(as_written / quiet if quiet > 0 else 1.0, 2),
                    measured=True,
                )
            )
    return found


def _host_syncs(train_step: Callable[[Any], Any], batch: Any) -> list[Finding]:
    """Host syncs inside one call of the user's step, found by torch's sync debug mode."""
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
        return []
    return [
        Finding(
            "host_syncs",
            f"{len(syncs)} host sync(s) per step (.item(), .cpu(), printing a tensor...): the "
            "CPU waits for the GPU and queues nothing meanwhile",
            "keep losses and metrics on the GPU; read them (.item()) once per log interval",
            "each sync drains the GPU's queue: the next step's launches wait for it",
        )
    ]


def _change(key: str, name: str, base: float, tried: float, fix: str) -> Finding:
    gain = base / tried if tried > 0 else 1.0
    if gain >= 1.0:
        cost = f"measured: compute {base * 1000:.1f} ms -> {tried * 1000:.1f} ms with {name}"
    else:
        cost = f"measured: {name} is slower here ({base * 1000:.1f} -> {tried * 1000:.1f} ms)"
    return Finding(key, f"{name} not used", fix, cost, round(gain, 2), measured=True)


def _rank(finding: Finding) -> tuple[int, float]:
    """Measured gains first, largest first; then bounds; then what has no figure."""
    if finding.gain is None:
        return (2, 0.0)
    return (0 if finding.measured else 1, -finding.gain)
