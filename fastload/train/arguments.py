"""The Trainer's and ``fit``'s arguments refused where they could not train as asked, with the
bad value and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from fastload.checks import check_int

__all__ = ["check_fit", "check_optimizer_holds", "check_options", "is_stateful"]

NONFINITE = ("raise", "skip")  # on_nonfinite=


def is_stateful(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(
        getattr(loader, "load_state_dict", None)
    )


def check_options(
    accumulate: int, clip_grad_norm: float | None, on_nonfinite: str, label_smoothing: float
) -> None:
    """Refuse ``Trainer`` options that could not train as asked."""
    check_int("accumulate", accumulate, minimum=1)
    if clip_grad_norm is not None and not clip_grad_norm > 0:
        raise ValueError(f"clip_grad_norm={clip_grad_norm!r} must be positive")
    if on_nonfinite not in NONFINITE:
        raise ValueError(f"on_nonfinite={on_nonfinite!r} is not valid; valid: raise, skip")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be within [0, 1)")


def check_optimizer_holds(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Refuse an optimizer that does not hold the model's trainable parameters."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    trainable = [p for p in model.parameters() if p.requires_grad]
    missing = sum(id(p) not in held for p in trainable)
    if missing:
        raise ValueError(
            f"the optimizer does not hold {missing} of the model's {len(trainable)} trainable "
            "parameters (an optimizer made for another model?); make it from this model's "
            "parameters, and freeze what should not train with requires_grad_(False)"
        )


def check_fit(
    train_loader: Iterable[Any],
    epochs: int,
    checkpoint: str | Path | None,
    checkpoint_every: int | None,
) -> None:
    """Refuse ``fit`` arguments that could not train as asked (see ``Trainer.fit``)."""
    check_int("epochs", epochs, minimum=0, what="the total, resumes included")
    if checkpoint_every is None:
        return
    check_int("checkpoint_every", checkpoint_every, minimum=1)
    if checkpoint is None:
        raise ValueError("checkpoint_every needs a checkpoint= file to write")
    if not is_stateful(train_loader):
        raise ValueError(
            f"checkpoint_every: {type(train_loader).__name__} has no state_dict(), so a "
            "mid-epoch checkpoint could not resume where it was; use fastload.DataLoader"
        )
