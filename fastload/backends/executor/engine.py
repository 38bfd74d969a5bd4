"""An executor's library work: :class:`Engine` (build its graph, take a planned batch, hand back
a tensor) and :class:`BatchFailed`, how it says a batch failed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch

from fastload.pixels.image import ImageInfo
from fastload.pixels.resampling import View

__all__ = ["BatchFailed", "Engine"]


class BatchFailed(Exception):
    """The engine's library failed on a batch (a file it cannot decode, most often).

    Args:
        message: What the library said, in one line.
        positions: The samples it failed on, when the library says (else each file of the
            batch is decoded alone to find them).
    """

    def __init__(self, message: str, *, positions: list[int] | None = None) -> None:
        super().__init__(message)
        self.positions = positions


class Engine(ABC):
    """An executor's library: takes planned batches in order, hands back tensors in order."""

    @abstractmethod
    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, Any]:
        """The per-sample inputs that render each ``view`` (display coordinates) of the file
        whose shown size is ``size`` and whose header says ``info``."""

    @abstractmethod
    def fits(self, batch: int) -> bool:
        """Whether a batch of this size can go to the current graph (or a new one)."""

    @abstractmethod
    def feed(self, inputs: dict[str, Any]) -> None:
        """Queue one batch."""

    @abstractmethod
    def collect(self) -> torch.Tensor:
        """The oldest queued batch, as a tensor on the target device.

        Raises:
            BatchFailed: The library failed on that batch.
        """

    @abstractmethod
    def discard(self, *, grow_to: int = 0) -> None:
        """Drop the graph and what is queued in it (rebuilt on next use).

        Args:
            grow_to: The next graph takes batches of at least this size.
        """

    @abstractmethod
    def drain(self) -> None:
        """Collect and drop what an epoch left early left queued."""

    @abstractmethod
    def decode_alone(self, data: np.ndarray) -> None:
        """Decode one file alone, to find the one a batch failed on.

        Raises:
            ValueError: It cannot be decoded; the message says why.
        """
