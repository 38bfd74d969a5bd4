"""What ``accelerate`` did to a loader's pipeline, in words: :class:`Acceleration` and
:func:`explain`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Acceleration", "explain"]


@dataclass(frozen=True)
class Acceleration:
    """What ``accelerate`` did to a loader's pipeline (``str()`` describes it).

    Attributes:
        accelerated: Whether fastload runs the pipeline its own way.
        reason: Why not (the op in the way), when it does not; else empty.
        dataset: The user's dataset's class.
        decoder: The per-sample decoder, when accelerated.
        decoding: Where decoding runs.
        fused: The user's ops run fused with decoding.
        batch: The user's ops run on whole batches.
        where: Where the batch ops run.
        dtype: The dtype of the images delivered (empty when the user's own ops decide it).
        rest: The user's ops run as written, per sample, after the fused part (accelerated
            in part).
        handed: What the first of ``rest`` is given.
        blockers: Every op in the way, with why, in the pipeline's order: what keeps the
            pipeline unchanged, or (accelerated in part) what keeps ``rest`` as written.
    """

    accelerated: bool
    reason: str = ""
    dataset: str = ""
    decoder: str | None = None
    decoding: str = ""
    fused: tuple[str, ...] = ()
    batch: tuple[str, ...] = ()
    where: str = ""
    dtype: str = ""
    rest: tuple[str, ...] = ()
    handed: str = ""
    blockers: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.accelerated and len(self.blockers) > 1:
            lines = [f"{self.dataset}: runs unchanged, as torch runs it; in the way:"]
            return "\n".join([*lines, *(f"  {b}" for b in self.blockers)])
        if not self.accelerated:
            return f"{self.dataset}: runs unchanged, as torch runs it ({self.reason})"
        if self.rest:
            lines = [f"{self.dataset}: accelerated in part (the rest runs as you wrote it)"]
        else:
            lines = [f"{self.dataset}: accelerated (images delivered as {self.dtype})"]
        lines.append(f"  fused with decoding ({self.decoder}, {self.decoding}):")
        lines += [f"    {op}" for op in self.fused] or ["    (nothing: whole images)"]
        if self.rest:
            lines.append(f"  as you wrote it, per sample, {self.decoding}, given {self.handed}:")
            lines += [f"    {op}" for op in self.rest]
        if self.batch or not self.rest:
            lines.append(f"  on whole uint8 batches ({self.where}):")
            lines += [f"    {op}" for op in self.batch] or ["    (nothing: uint8 batches)"]
        if self.blockers:
            lines.append("  why the rest is not fastload's:")
            lines += [f"    {b}" for b in self.blockers]
        return "\n".join(lines)


def explain(loader: Any) -> str:
    """Say what a ``fastload.DataLoader`` runs where: decoding, fused ops, batch ops, device.

    Args:
        loader: A ``fastload.DataLoader``.
    """
    plan = getattr(loader, "plan", None)
    if plan is None:
        raise ValueError(f"explain takes a fastload.DataLoader, got {type(loader).__name__}")
    device = plan.device
    workers = f"num_workers={loader.num_workers}"
    if getattr(plan, "threads", False):
        workers += " (threads of this process)"
    choice = getattr(loader, "worker_choice", None)
    if choice:
        workers += f" [{choice}]"
    head = (
        f"fastload.DataLoader: batch_size={loader.batch_size}, {workers}, "
        f"device={str(device) if device is not None else 'as torch yields'}, "
        f"backend={plan.backend or 'n/a'}"
    )
    reading = getattr(loader.dataset, "reading", None)  # shards: local, or remote and how
    if callable(reading):
        head += f"\n{type(loader.dataset).__name__} {reading(loader.sampler)}"
    return f"{head}\n{plan.acceleration}"
