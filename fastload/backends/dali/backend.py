"""The ``"dali"`` registry entry: a batch executor, with a per-sample path beside it."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastload.backends.base import Backend
from fastload.backends.dali.decoder import DALI, SampleDecoder
from fastload.backends.dali.engine import DaliBatches
from fastload.backends.executor import ExecutorOptions
from fastload.backends.registry import register

__all__ = ["DaliBackend"]


@register
class DaliBackend(Backend):
    """NVIDIA DALI: whole batches under ``fastload.DataLoader``, one file at a time elsewhere.

    Per sample (``ds[i]``, ``fastload scan --backend dali``) it decodes with DALI's CPU decoder:
    a correct but slow path, for looking at samples; never chosen by ``"auto"``.
    """

    name = "dali"
    kind = "executor"
    requires = (DALI,)

    @classmethod
    def executor(
        cls, dataset: Any, options: ExecutorOptions, *, batch_ops: Any = None
    ) -> DaliBatches:
        return DaliBatches(dataset, options, batch_ops=batch_ops)

    def __init__(self) -> None:
        self._decoder = SampleDecoder()  # raises with the install command when DALI is missing

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        return self._decoder.decode(data, reduce)
