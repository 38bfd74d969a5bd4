"""Measured starting points: a learning-rate range test and a batch-size finder."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fastload.autotune.rates import endless
from fastload.train.optim import scale_lr

__all__ = ["BatchSizeResult", "LRFinderResult", "find_batch_size", "find_lr"]


@dataclass(frozen=True)
class LRFinderResult:
    """What the range test measured.

    Attributes:
        lrs: The learning rates tried, one per step (growing geometrically).
        losses: The smoothed loss after each step.
        suggestion: Where the smoothed loss fell fastest (steepest negative slope against
            log LR), before it started to diverge.
        plot: The plot's path, when one was written.
    """

    lrs: list[float]
    losses: list[float]
    suggestion: float
    plot: Path | None = None


def find_lr(
    trainer: Any,
    loader: Iterable[Any],
    *,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    steps: int = 100,
    smoothing: float = 0.05,
    diverge: float = 4.0,
    plot: str | Path | None = None,
) -> LRFinderResult:
    """The learning-rate range test: raise the LR every step and watch the loss.

    The model, optimizer, scaler and schedule are restored afterwards: the test does not train
    the model. The loader is cycled if it has fewer than ``steps`` batches.

    Args:
        trainer: A :class:`fastload.train.Trainer`.
        loader: Training batches.
        start_lr: The first learning rate.
        end_lr: The last.
        steps: Optimizer steps, one batch each (``Trainer.train_step``: no accumulation).
        smoothing: Weight of the newest loss in the exponential moving average.
        diverge: Stop once the smoothed loss exceeds this many times its best.
        plot: Write a PNG of loss against log LR to this path.

    Raises:
        ValueError: Bad bounds or step count, or not a single finite loss.
    """
    if not 0 < start_lr < end_lr:
        raise ValueError(f"need 0 < start_lr < end_lr, got {start_lr} and {end_lr}")
    if steps < 2:
        raise ValueError(f"steps={steps} must be at least 2")
    saved = _snapshot(trainer)
    factor = (end_lr / start_lr) ** (1 / (steps - 1))
    lrs: list[float] = []
    losses: list[float] = []
    average, best = None, math.inf
    try:
        trainer.scheduler = None
        trainer.on_nonfinite = "skip"
        batches = endless(loader)
        for k in range(steps):
            lr = start_lr * factor**k
            for group in trainer.optimizer.param_groups:
                group["lr"] = lr
            value = trainer.train_step(next(batches)).loss
            if not math.isfinite(value):
                break
            average = value if average is None else smoothing * value + (1 - smoothing) * average
            lrs.append(lr)
            losses.append(average)
            best = min(best, average)
            if average > diverge * best:
                break
    finally:
        _restore(trainer, saved)
    if not losses:
        raise ValueError("the range test saw no finite loss: lower start_lr")
    suggestion = _steepest(lrs, losses)
    path = _plot(lrs, losses, suggestion, plot) if plot is not None else None
    return LRFinderResult(lrs, losses, suggestion, path)


def _snapshot(trainer: Any) -> dict[str, Any]:
    return {
        "model": copy.deepcopy(trainer.model.state_dict()),
        "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        "scaler": trainer.precision.state_dict(),
        "scheduler": trainer.scheduler,
        "on_nonfinite": trainer.on_nonfinite,
        "step": trainer.step,
        "rng": torch.get_rng_state(),
    }


def _restore(trainer: Any, saved: dict[str, Any]) -> None:
    trainer.model.load_state_dict(saved["model"])
    trainer.optimizer.load_state_dict(saved["optimizer"])
    trainer.precision.load_state_dict(saved["scaler"])
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.scheduler = saved["scheduler"]
    trainer.on_nonfinite = saved["on_nonfinite"]
    trainer.step = saved["step"]
    torch.set_rng_state(saved["rng"])


def _steepest(lrs: list[float], losses: list[float]) -> float:
    """The LR where the loss falls fastest against log LR, up to the lowest loss."""
    end = min(range(len(losses)), key=losses.__getitem__)
    if end < 2:
        return lrs[end]
    slopes = [
        (losses[k + 1] - losses[k - 1]) / (math.log(lrs[k + 1]) - math.log(lrs[k - 1]))
        for k in range(1, end)
    ]
    return lrs[1 + min(range(len(slopes)), key=slopes.__getitem__)]


def _log_range(lrs: list[float]) -> tuple[float, float]:
    """The plot's x range in log10 units: the LRs tried, or one decade from a single one."""
    lo = math.log10(lrs[0])
    return lo, math.log10(lrs[-1]) if len(lrs) > 1 else lo + 1


def _plot(lrs: list[float], losses: list[float], suggestion: float, path: str | Path) -> Path:
    from PIL import Image, ImageDraw

    path = Path(path)
    width, height, margin = 720, 420, 60
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    lo_x, hi_x = _log_range(lrs)
    top = min(max(losses), 4 * min(losses))
    lo_y, hi_y = min(losses), top if top > min(losses) else min(losses) + 1

    def point(lr: float, loss: float) -> tuple[float, float]:
        x = margin + (width - 2 * margin) * (math.log10(lr) - lo_x) / max(hi_x - lo_x, 1e-12)
        y = height - margin - (height - 2 * margin) * (min(loss, hi_y) - lo_y) / (hi_y - lo_y)
        return x, y

    draw.rectangle([margin, margin, width - margin, height - margin], outline=(180, 180, 180))
    draw.line(
        [point(lr, loss) for lr, loss in zip(lrs, losses, strict=True)],
        fill=(40, 110, 200),
        width=2,
    )
    sx, _ = point(suggestion, lo_y)
    draw.line([(sx, margin), (sx, height - margin)], fill=(200, 60, 40), width=1)
    draw.text((margin, 20), f"learning-rate range test: suggestion {suggestion:.2e}", fill="black")
    for exponent in range(math.ceil(lo_x), math.floor(hi_x) + 1):
        x, _ = point(10.0**exponent, lo_y)
        draw.text((x - 12, height - margin + 8), f"1e{exponent}", fill="black")
    draw.text((8, margin - 4), f"{hi_y:.3g}", fill="black")
    draw.text((8, height - margin - 8), f"{lo_y:.3g}", fill="black")
    draw.text((width // 2 - 60, height - 24), "learning rate (log scale)", fill="black")
    draw.text((8, margin - 22), "smoothed loss", fill="black")
    if max(losses) > hi_y:  # the divergence at the end would flatten the rest: say it is cut
        draw.text(
            (width - margin - 230, margin + 6),
            f"losses above {hi_y:.3g} drawn at the top",
            fill=(200, 60, 40),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


@dataclass(frozen=True)
class BatchSizeResult:
    """What the batch-size finder found.

    Attributes:
        batch_size: The largest batch that fits, times the margin.
        largest_fitting: The largest batch size that ran.
        lr: ``base_lr`` scaled linearly to ``batch_size`` (when a base LR was given).
        tried: ``(batch_size, fitted)`` in the order tried.
    """

    batch_size: int
    largest_fitting: int
    lr: float | None
    tried: list[tuple[int, bool]]


# How the allocators say they ran out: CUDA's and MPS's "out of memory", the CPU allocator's
# "DefaultCPUAllocator: can't allocate memory" / "not enough memory".
_OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "not enough memory")


def _out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(s in text for s in _OUT_OF_MEMORY)


def find_batch_size(
    step: Callable[[int], Any],
    *,
    start: int = 8,
    limit: int = 65536,
    margin: float = 0.9,
    multiple: int = 8,
    base_lr: float | None = None,
    base_batch_size: int = 256,
) -> BatchSizeResult:
    """Grow the batch until a training step runs out of memory, then narrow it down.

    Args:
        step: Runs one full training step (forward, backward, optimizer) at a batch size;
            out of memory raises ``torch.OutOfMemoryError``. The finder frees the CUDA cache
            between tries.
        start: The first size tried.
        limit: The largest size tried.
        margin: The result is the largest fitting size times this, leaving room for
            fragmentation and bigger samples.
        multiple: Round the result down to a multiple of this (tensor-core friendly).
        base_lr: When given, also return it scaled to the result (:func:`scale_lr`).
        base_batch_size: The batch size ``base_lr`` belongs to.

    Raises:
        RuntimeError: Even ``start`` does not fit.
        ValueError: Bad arguments.
    """
    if not 1 <= start <= limit or not 0 < margin <= 1 or multiple < 1:
        raise ValueError("need 1 <= start <= limit, 0 < margin <= 1 and multiple >= 1")
    tried: list[tuple[int, bool]] = []

    def fits(size: int) -> bool:
        try:
            step(size)
            ok = True
        except Exception as exc:
            if not _out_of_memory(exc):
                raise
            ok = False
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        tried.append((size, ok))
        return ok

    if not fits(start):
        raise RuntimeError(f"a batch of {start} does not fit; start lower")
    good, bad = start, None
    while bad is None and good < limit:
        candidate = min(good * 2, limit)
        if fits(candidate):
            good = candidate
        else:
            bad = candidate
    while bad is not None and bad - good > max(1, good // 32):  # within about 3 %
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    chosen = max(1, int(good * margin))
    if chosen >= multiple:
        chosen -= chosen % multiple
    lr = scale_lr(base_lr, chosen, base_batch_size=base_batch_size) if base_lr is not None else None
    return BatchSizeResult(chosen, good, lr, tried)
