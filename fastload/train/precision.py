"""Mixed precision as one object: the autocast the forward pass runs under, and the loss scaling.

The loop and the finders call :meth:`Precision.backward`, :meth:`Precision.unscale_` and
:meth:`Precision.step`; whether a ``GradScaler`` is behind them is the precision's business.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from fastload.checks import check_choice

__all__ = ["PRECISIONS", "Precision"]

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


class Precision:
    """How the training step computes, and the loss scaler that goes with it.

    ``bf16`` autocasts to bfloat16 (no loss scaling needed: its range is float32's); ``fp16``
    autocasts to float16 and scales the loss with a ``GradScaler`` so small gradients do not
    flush to zero, skipping steps whose gradients overflow; ``fp32`` does neither.

    Args:
        name: ``"bf16"``, ``"fp16"`` or ``"fp32"``.
        device_type: ``"cuda"`` or ``"cpu"``.
    """

    def __init__(self, name: str, device_type: str, *, reason: str = "asked for") -> None:
        check_choice("name", name, tuple(_DTYPES))
        self.name, self.device_type, self.reason = name, device_type, reason
        self._scaler = torch.amp.GradScaler(device_type, enabled=name == "fp16")

    @classmethod
    def resolve(cls, precision: str = "auto", device: torch.device | str = "cpu") -> Precision:
        """The precision to train with on ``device``.

        ``"auto"`` chooses what is fast on the device: on CUDA, bf16 where the device supports
        it and fp16 on older ones; on the CPU, bf16 only where bf16 autocast measures faster
        than fp32 (CPUs with bf16 hardware), else fp32 (measured once per process, about 0.1
        s). The choice and why are in :attr:`reason`.

        Raises:
            ValueError: An unknown name, or fp16 on the CPU (autocast to float16 is a GPU
                technique; the CPU's is bf16).
        """
        check_choice("precision", precision, PRECISIONS)
        device_type = torch.device(device).type
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"device={device!r}: fastload.train runs on 'cpu' or 'cuda' devices")
        reason = "asked for"
        if precision == "auto":
            precision, reason = _auto(device_type)
        if precision == "fp16" and device_type == "cpu":
            raise ValueError(
                "precision='fp16' needs a CUDA device (float16 autocast with loss scaling is a "
                "GPU technique); on the CPU use 'bf16' or 'fp32'"
            )
        return cls(precision, device_type, reason=reason)

    def __repr__(self) -> str:
        return f"Precision(name={self.name!r}, device_type={self.device_type!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Precision):
            return NotImplemented
        return (self.name, self.device_type) == (other.name, other.device_type)

    def __hash__(self) -> int:
        return hash((self.name, self.device_type))

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, ``None`` for fp32."""
        return _DTYPES[self.name]

    @property
    def scales_loss(self) -> bool:
        """Whether the loss is scaled (fp16): steps can then be skipped for overflow."""
        return self._scaler.is_enabled()

    def autocast(self) -> Any:
        """The context to run the forward pass and the loss under."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss`` (scaled, for fp16)."""
        self._scaler.scale(loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring the gradients back to their true size (fp16), before clipping or reading them."""
        self._scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step the optimizer, unless fp16's gradients overflowed; update the loss scale.

        Returns:
            Whether the optimizer stepped. With fp16 this reads the loss scale before and
            after the step: two host reads (each waits for the device) on top of the loop's
            one read of the loss.
        """
        if not self.scales_loss:
            optimizer.step()
            return True
        scale = self._scaler.get_scale()
        self._scaler.step(optimizer)
        self._scaler.update()
        return self._scaler.get_scale() >= scale  # the scaler lowers its scale when it skips

    def state_dict(self) -> dict[str, Any]:
        """The loss scaler's state (empty without one)."""
        return self._scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._scaler.load_state_dict(state)

    def scaler(self) -> torch.amp.GradScaler:
        """The ``GradScaler`` this precision owns (a pass-through unless fp16)."""
        return self._scaler


_CPU_BF16: tuple[bool, float] | None = None  # (faster, bf16 time / fp32 time), once a process


def _auto(device_type: str) -> tuple[str, str]:
    """The precision "auto" stands for on this device, and why."""
    if device_type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", "auto: this CUDA device computes bf16"
        return "fp16", "auto: this CUDA device has no bf16, so fp16 with loss scaling"
    global _CPU_BF16
    if _CPU_BF16 is None:
        ratio = _cpu_bf16_ratio()
        _CPU_BF16 = (ratio < 0.9, ratio)
    faster, ratio = _CPU_BF16
    if faster:
        return "bf16", f"auto: bf16 autocast measured {1 / ratio:.1f}x as fast as fp32 on this CPU"
    return "fp32", f"auto: bf16 autocast measured {ratio:.1f}x slower than fp32 on this CPU"


def _cpu_bf16_ratio() -> float:
    """Time of a small conv block's forward and backward under bf16 autocast, over fp32's.

    On CPUs without bf16 hardware, oneDNN emulates bf16 and this ratio is large (a resnet18
    step was measured 22x slower); with it, bf16 is faster. The two are timed in alternation
    and the fastest of each kept, so a burst of other work (a loader's workers starting)
    does not decide.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = torch.nn.Sequential(
            torch.nn.Conv2d(64, 64, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3, padding=1, bias=False),
        )
        images = torch.randn(8, 64, 28, 28)

        def timed(bf16: bool) -> float:
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = block(images).float().mean()
            loss.backward()
            return time.perf_counter() - start

        timed(False), timed(True)  # warm-up: kernels chosen, memory allocated
        fp32, bf16 = zip(*((timed(False), timed(True)) for _ in range(7)), strict=True)
    return min(bf16) / min(fp32)
