"""AdamW set up as the field recommends, the linear LR-scaling rule, and per-step schedules."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["adamw", "one_cycle", "scale_lr", "warmup_cosine"]


def scale_lr(base_lr: float, batch_size: int, *, base_batch_size: int = 256) -> float:
    """The linear scaling rule: the learning rate grows with the (global) batch size.

    Args:
        base_lr: The learning rate known to work at ``base_batch_size``.
        batch_size: The batch size trained with (all ranks and accumulation steps together).
        base_batch_size: The batch size ``base_lr`` belongs to.
    """
    if batch_size < 1 or base_batch_size < 1:
        raise ValueError(f"batch sizes must be positive, got {batch_size} and {base_batch_size}")
    return base_lr * batch_size / base_batch_size


def adamw(
    model: torch.nn.Module | Iterable[torch.nn.Parameter],
    lr: float,
    *,
    weight_decay: float = 0.05,
    betas: tuple[float, float] = (0.9, 0.999),
    decay_1d: bool = False,
) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step when every parameter is on a CUDA device.

    Args:
        model: A module (its parameters that need gradients) or the parameters themselves.
        lr: Learning rate.
        weight_decay: Decoupled weight decay.
        betas: Adam's moment coefficients.
        decay_1d: Also decay 1-D parameters (biases, norm scales). Off by default, as is
            usual: decaying them hurts more than it regularises.
    """
    params = [
        p
        for p in (model.parameters() if isinstance(model, torch.nn.Module) else model)
        if p.requires_grad
    ]
    if not params:
        raise ValueError("no parameters that require gradients")
    decay = [p for p in params if decay_1d or p.ndim > 1]
    other = [p for p in params if not (decay_1d or p.ndim > 1)]
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if other:
        groups.append({"params": other, "weight_decay": 0.0})
    fused = all(p.device.type == "cuda" for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused or None)


def one_cycle(
    optimizer: torch.optim.Optimizer, *, max_lr: float, total_steps: int, pct_start: float = 0.3
) -> torch.optim.lr_scheduler.OneCycleLR:
    """torch's OneCycleLR, stepped once per optimizer step (not per batch or epoch)."""
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=max_lr, total_steps=total_steps, pct_start=pct_start
    )


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the optimizer's LR, then cosine annealing to ``min_lr_ratio``.

    The warm-up's first step runs at ``lr / warmup_steps`` (never at 0, which would waste a
    step) and its last at the full LR.

    Stepped once per optimizer step.
    """
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps={warmup_steps} must be >= 0 and below total_steps={total_steps}"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio={min_lr_ratio!r} must be within [0, 1]")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
