"""What the training loop reports: each optimizer step (:class:`StepRecord`), each epoch
(:class:`EpochStats`), a loss that became NaN (:class:`NonFiniteLossError`), and how many
optimizer steps an epoch takes (:func:`steps_per_epoch`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EpochStats", "NonFiniteLossError", "StepRecord", "steps_per_epoch"]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite (and ``on_nonfinite="raise"``)."""


@dataclass(frozen=True)
class EpochStats:
    """What one training epoch did.

    Attributes:
        epoch: The epoch's number (0-based).
        steps: Optimizer steps taken (skipped ones included).
        skipped_steps: Steps skipped for a non-finite loss or fp16 overflow.
        images: Samples seen (on this rank).
        seconds: Wall time of the epoch.
        data_seconds: Time spent waiting for the loader.
        loss: Mean training loss over the epoch's finite steps (all ranks).
        val: ``fit``'s evaluation after the epoch (``loss``, ``accuracy``, ``images``), when
            it was given a ``val_loader``.
    """

    epoch: int
    steps: int
    skipped_steps: int
    images: int
    seconds: float
    data_seconds: float
    loss: float
    val: dict[str, float] | None = None

    @property
    def images_per_sec(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0

    @property
    def data_wait_share(self) -> float:
        """The share of the epoch spent waiting for data: near 0 when the loader keeps up."""
        return self.data_seconds / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"epoch {self.epoch}: {self.images_per_sec:,.0f} images/s, waiting for data "
            f"{self.data_wait_share:.0%} of the time, loss {self.loss:.4f}, {self.steps} steps"
            + (f" ({self.skipped_steps} skipped)" if self.skipped_steps else "")
        )


@dataclass(frozen=True)
class StepRecord:
    """What one optimizer step did.

    Attributes:
        samples: The samples its gradient is over.
        loss: Their mean loss.
        taken: Whether the optimizer stepped (not for a non-finite loss, nor an fp16 overflow).
    """

    samples: int
    loss: float
    taken: bool


def steps_per_epoch(batches: int, accumulate: int = 1) -> int:
    """Optimizer steps an epoch of ``batches`` micro-batches takes: one per ``accumulate``,
    and one more for a leftover group (the Trainer steps on it too). Size schedules with it.

    Raises:
        ValueError: Negative ``batches`` or ``accumulate`` < 1.
    """
    if batches < 0 or accumulate < 1:
        raise ValueError(f"need batches >= 0 and accumulate >= 1, got {batches} and {accumulate}")
    return -(-batches // accumulate)
