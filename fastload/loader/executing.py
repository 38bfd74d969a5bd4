"""The executor path: a batch executor reads, decodes and transforms whole batches.

No worker processes start: the executor's threads replace them (``num_workers`` is their
count, ``prefetch_factor`` how many batches are decoded ahead), and the loader's batch sampler
still picks each batch (see :mod:`fastload.backends.executor`). The path keeps what torch's
iterators keep for the worker path: the number of epochs started, which seeds each epoch's
draws and sets a ``DistributedSampler``'s epoch, and the :class:`~fastload.sampling.EpochSampler`.

The executor itself is made on first use, in the process that iterates: executors hold
library handles that do not pickle (an nvImageCodec decoder), and a loader that a framework
sends to another process (Lightning's ``ddp_spawn``) travels without them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler

from fastload import backends
from fastload.backends.executor import BatchExecutor, ExecutorOptions
from fastload.gpu.stage import BatchStage
from fastload.loader.delivery import counted
from fastload.loader.plan import ExecutorPlan
from fastload.sampling import EpochSampler

__all__ = ["ExecutorPath"]


class ExecutorPath:
    """Batches from a batch executor, as an :class:`ExecutorPlan` says.

    Under ``torch.distributed`` with torch's default sampler, the plan's shard (a
    ``DistributedSampler``, reshuffled every epoch) replaces it: each rank reads its own part.

    Args:
        loader: The user's loader (its torch attributes are read once, here).
        plan: What to read, with which executor.
    """

    def __init__(self, loader: Any, plan: ExecutorPlan) -> None:
        self.plan = plan
        sampler, batches = loader.sampler, loader.batch_sampler
        if plan.shard is not None:
            sampler = plan.shard
            batches = BatchSampler(plan.shard, loader.batch_size, loader.drop_last)
        self.epochs = EpochSampler(
            batches, batched=True, generator=loader.generator, sampler=sampler, keyed=plan.keyed
        )
        self.epoch = 0  # epochs started
        self._generator = loader.generator
        self._options = ExecutorOptions(
            device=plan.device or torch.device("cpu"),
            num_threads=plan.threads,
            prefetch=plan.prefetch,
            batch_size=loader.batch_size or 1,
            pin_memory=loader.pin_memory and torch.cuda.is_available(),
        )
        self._executor: BatchExecutor | None = None
        self._stage: BatchStage | None = None

    @property
    def executor(self) -> BatchExecutor:
        """The executor (made on first use, in this process)."""
        if self._executor is None:
            plan = self.plan
            executor = backends.get(plan.backend).executor(
                plan.dataset, self._options, batch_ops=plan.batch_ops
            )
            # what the executor does not run of the batch ops, in this process, on its batches
            remaining = executor.remaining_ops
            if remaining is not None or plan.channels_last:
                self._stage = BatchStage(remaining, channels_last=plan.channels_last)
            self._executor = executor
        return self._executor

    def __len__(self) -> int:
        return len(self.epochs)

    def batches(self) -> Iterator[Any]:
        """One pass (an epoch, or the rest of a resumed one)."""
        return counted(self.epochs, self._start, own_generator=self._generator is not None)

    def _start(self) -> Iterator[Any]:
        executor = self.executor
        if not self.epochs.resuming:  # a resumed epoch was counted, and its shard set, before
            if self.plan.shard is not None:
                self.plan.shard.set_epoch(self.epoch)
            self.epoch += 1
        # one draw per epoch, as torch draws its workers' base seed
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=self._generator).item())
        return executor.epoch(
            iter(self.epochs),
            seed=seed,
            on_drop=self.epochs.drop,
            target_transform=getattr(self.plan.dataset, "target_transform", None),
            stage=self._stage,
        )

    def state(self) -> dict[str, Any]:
        """Where the epoch stands, and how many epochs were started."""
        return {"epochs": self.epochs.state(), "executor_epochs": self.epoch}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`."""
        self.epoch = int(state["executor_epochs"])
        self.epochs.load(state["epochs"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_executor"] = state["_stage"] = None  # library handles: made again on first use
        return state
