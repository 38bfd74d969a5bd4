"""Mixed precision as one object: the autocast to run the forward pass under, and the scaler."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["PRECISIONS", "Precision"]

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


@dataclass(frozen=True)
class Precision:
    """How the training step computes.

    ``bf16`` autocasts to bfloat16 (no loss scaling needed: its range is float32's); ``fp16``
    autocasts to float16 and scales the loss with a ``GradScaler`` so small gradients do not
    flush to zero, skipping steps whose gradients overflow; ``fp32`` does neither.

    Attributes:
        name: ``"bf16"``, ``"fp16"`` or ``"fp32"``.
        device_type: ``"cuda"`` or ``"cpu"``.
    """

    name: str
    device_type: str

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

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, ``None`` for fp32."""
        return _DTYPES[self.name]

    def autocast(self) -> Any:
        """The context to run the forward pass and the loss under."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler: active for fp16, a pass-through otherwise."""
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")
