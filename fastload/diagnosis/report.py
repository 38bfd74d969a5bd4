"""What doctor says: each :class:`Finding`, and the :class:`DoctorReport` that ranks them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DoctorReport", "Finding", "rank"]


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


def rank(finding: Finding) -> tuple[int, float]:
    """Measured gains first, largest first; then bounds; then what has no figure."""
    if finding.gain is None:
        return (2, 0.0)
    return (0 if finding.measured else 1, -finding.gain)
