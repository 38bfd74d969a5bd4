"""How doctor measures: the user's step run and timed, the loader alone, and the user's objects
saved and put back.

Every reading of time goes through :func:`clock` (tests replace it with a fake one), and every
wait for the device through :func:`sync`.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from fastload._progress import Progress
from fastload.autotune.rates import endless, read_rate
from fastload.memory.tensors import inputs_of, map_tensors, targets_of

__all__ = [
    "Saved",
    "Step",
    "StepTimes",
    "Ticks",
    "clock",
    "loader_alone",
    "measure_steps",
    "median",
    "restore",
    "save",
    "sync",
    "timed",
]

REPEATS = 5  # timings of the user's own functions: a few calls each


def clock() -> float:
    """Seconds, monotonic: what every doctor timing reads."""
    return time.perf_counter()


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


class Step:
    """The user's step: forward, loss, backward, optimizer step."""

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

    def copy(self, batch: Any) -> Any:
        """The batch on the step's device."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(self.device, non_blocking=t.is_pinned())

        return map_tensors(move, batch)

    def __call__(self, batch: Any) -> None:
        inputs, targets = inputs_of(batch), targets_of(batch)
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


class Ticks:
    """Advances the progress bar one unit of work at a time."""

    def __init__(self, bar: Progress, total: int) -> None:
        self.bar, self.total, self.done = bar, total, 0

    def __call__(self) -> None:
        self.done += 1
        self.bar(min(self.done, self.total), self.total)


@dataclass
class StepTimes:
    """The measured steps: seconds each spent waiting, copying and computing."""

    waits: list[float] = field(default_factory=list)
    copies: list[float] = field(default_factory=list)
    computes: list[float] = field(default_factory=list)
    shapes: set[tuple[int, ...]] = field(default_factory=set)  # of the inputs
    first: Any = None  # the first batch, on the device

    @property
    def totals(self) -> list[float]:
        return [w + c + m for w, c, m in zip(self.waits, self.copies, self.computes, strict=True)]


def measure_steps(
    step: Step, loader: Iterable[Any], warmup: int, steps: int, tick: Callable[[], Any]
) -> StepTimes:
    """Run ``warmup + steps`` steps fed by the loader; time the last ``steps``."""
    times = StepTimes()
    batches = endless(loader)
    for k in range(warmup + steps):
        t0 = clock()
        host = next(batches)
        t1 = clock()
        batch = step.copy(host)
        sync(step.device)
        t2 = clock()
        step(batch)
        sync(step.device)
        t3 = clock()
        if times.first is None:
            times.first = batch
        if k >= warmup:
            times.waits.append(t1 - t0)
            times.copies.append(t2 - t1)
            times.computes.append(t3 - t2)
            inputs = inputs_of(batch)
            if isinstance(inputs, torch.Tensor):
                times.shapes.add(tuple(inputs.shape))
        tick()
    del batches  # the loader's workers are let go before it is measured alone
    return times


def loader_alone(loader: Iterable[Any], warmup: int, steps: int, tick: Callable[[], Any]) -> float:
    """Samples per second the loader gives with nothing else to do."""
    batches = endless(loader)
    for _ in range(warmup):
        next(batches)
        tick()
    reading = read_rate(batches, count=steps, each=tick, clock=clock)
    del batches
    return reading.rate if reading.seconds > 0 else float("inf")


def timed(
    call: Callable[[], Any],
    device: torch.device,
    *,
    repeats: int = REPEATS,
    tick: Callable[[], Any] = lambda: None,
) -> float:
    """Median seconds of ``call()`` over ``repeats`` calls after one warm-up call (kernels
    chosen, autocast caches filled), with the device synced; ``tick`` after each call."""
    call()
    sync(device)
    tick()
    times = []
    for _ in range(repeats):
        t0 = clock()
        call()
        sync(device)
        times.append(clock() - t0)
        tick()
    return median(times)


@dataclass
class Saved:
    """What doctor puts back: the model's and optimizer's state, gradients, random streams."""

    model: dict[str, Any]
    optimizer: dict[str, Any] | None
    training: bool
    cpu_rng: torch.Tensor
    cuda_rng: list[torch.Tensor] | None
    grads: dict[str, torch.Tensor | None]


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Saved:
    return Saved(
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


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, saved: Saved) -> None:
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
