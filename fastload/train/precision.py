"""Mixed precision as one object: the autocast the forward pass runs under, and the loss scaling.

The loop and the finders call :meth:`Precision.backward`, :meth:`Precision.unscale_` and
:meth:`Precision.step`; whether a ``GradScaler`` is behind them is the precision's business.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

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

    def __init__(self, name: str, device_type: str) -> None:
        if name not in _DTYPES:
            raise ValueError(f"name={name!r} is not valid; valid: {', '.join(_DTYPES)}")
        self.name, self.device_type = name, device_type
        self._scaler = torch.amp.GradScaler(device_type, enabled=name == "fp16")

    @classmethod
    def resolve(cls, precision: str = "auto", device: torch.device | str = "cpu") -> Precision:
        """The precision to train with on ``device``.

        ``"auto"`` is bf16 where the device computes it (CUDA devices that support it, and the
        CPU), fp16 on older CUDA devices.

        Raises:
            ValueError: An unknown name, or fp16 on the CPU (autocast to float16 is a GPU
                technique; the CPU's is bf16).
        """
        if precision not in PRECISIONS:
            raise ValueError(
                f"precision={precision!r} is not valid; valid: {', '.join(PRECISIONS)}"
            )
        device_type = torch.device(device).type
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"device={device!r}: fastload.train runs on 'cpu' or 'cuda' devices")
        if precision == "auto":
            if device_type == "cuda" and not torch.cuda.is_bf16_supported():
                precision = "fp16"
            else:
                precision = "bf16"
        if precision == "fp16" and device_type == "cpu":
            raise ValueError(
                "precision='fp16' needs a CUDA device (float16 autocast with loss scaling is a "
                "GPU technique); on the CPU use 'bf16' or 'fp32'"
            )
        return cls(precision, device_type)

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
            Whether the optimizer stepped.
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
