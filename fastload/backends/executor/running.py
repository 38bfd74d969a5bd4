"""The executor a loader owns: :class:`BatchExecutor` drives an engine through epochs, with the
planner processes it starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

from fastload.backends.executor.engine import Engine
from fastload.backends.executor.epoch import Epoch
from fastload.backends.executor.folding import Folded, fold_batch_ops
from fastload.backends.executor.reading import PLANNERS_FROM, start_planner
from fastload.backends.executor.translation import ExecutorOptions, Translation, translate

__all__ = ["BatchExecutor"]


class BatchExecutor:
    """Runs a fastload dataset through an engine, a batch at a time; owned by one loader.

    Args:
        name: The backend's name (in errors and messages).
        dataset: A ``fastload.ImageList`` or ``fastload.ImageFolder``.
        options: Device, threads and prefetch depth.
        engine: Builds the engine from the translation and the folded ops (called once).
        batch_ops: The loader's ``batch_transforms``; the leading ops the engine runs are
            folded into it, the rest left in :attr:`remaining_ops` for ``fastload.gpu``.
        normalize_dtypes: The output dtypes of a ``Normalize`` the engine can fold.
    """

    def __init__(
        self,
        name: str,
        dataset: Any,
        options: ExecutorOptions,
        engine: Callable[[Translation, Folded], Engine],
        *,
        batch_ops: Any = None,
        normalize_dtypes: tuple[torch.dtype, ...] = (),
    ) -> None:
        self.name, self.dataset, self.options = name, dataset, options
        self.translation = translate(dataset.transform_split, name)
        self.folded, self.remaining_ops = fold_batch_ops(
            batch_ops, normalize_dtypes=normalize_dtypes
        )
        self.engine = engine(self.translation, self.folded)
        self._epoch_token: object | None = None
        self._draws = dataset.transform_split.draws
        self._planners: ProcessPoolExecutor | None = None

    def planners(self, seeds: list[int | None]) -> ProcessPoolExecutor | None:
        """The planner processes for a batch with these sample seeds, when they can plan it
        (every sample has its seed, or the plan draws nothing) and the executor has
        :data:`PLANNERS_FROM` threads or more; started on first use, kept across epochs."""
        if self.options.num_threads < PLANNERS_FROM:
            return None
        if self._draws and any(seed is None for seed in seeds):
            return None  # drawn in order from the epoch's stream: here, one batch after another
        if self._planners is None:
            self._planners = ProcessPoolExecutor(
                self.options.num_threads // 2,
                initializer=start_planner,
                initargs=(self.dataset,),
            )
        return self._planners

    @property
    def planner_processes(self) -> int:
        """How many planner processes read and plan batches (0: this process does)."""
        return 0 if self._planners is None else self.options.num_threads // 2

    def close(self) -> None:
        """Stop the planner processes (the engine's library goes with the executor)."""
        planners = getattr(self, "_planners", None)  # None too when __init__ failed early
        if planners is not None:
            planners.shutdown(wait=False, cancel_futures=True)
            self._planners = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the pool may be gone first
            self.close()

    def epoch(
        self,
        batches: Iterator[list[int]],
        *,
        seed: int,
        target_transform: Callable[[int], Any] | None = None,
        on_drop: Callable[[int], None] | None = None,
        stage: Callable[..., Any] | None = None,
    ) -> Iterator[Any]:
        """Iterate one epoch: ``(images, labels)`` per batch of indices from ``batches``.

        Args:
            batches: Index lists, one per batch (the loader's batch sampler). Indices that
                carry a seed (``fastload.sampling.SampleKey``) are planned from it.
            seed: Seeds this epoch's per-sample random draws, for indices without a seed.
            target_transform: Called on each label (the dataset's).
            on_drop: Told, when a batch is dropped whole (``on_error="skip"`` and none of its
                files readable), how many batches are delivered before it.
            stage: Applied to each ``(images, labels)`` as ``stage(batch, seed=...)``: the
                batch ops the engine does not run (a ``fastload.gpu.stage.BatchStage``). The
                seed is derived from the batch's own (a ``KeyedBatch``'s), else ``None``.
        """
        self.engine.drain()  # a previous epoch's unused batches
        token = object()
        self._epoch_token = token
        return Epoch(self, batches, seed, target_transform, token, on_drop, stage)

    def is_current(self, token: object) -> bool:
        """Whether the epoch holding ``token`` is the newest one."""
        return self._epoch_token is token
