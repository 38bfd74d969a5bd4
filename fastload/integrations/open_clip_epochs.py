"""OpenCLIP's epochs as fastload serves them: cut to OpenCLIP's count, checkpointed part way,
and resumed from such a checkpoint with the rest of the epoch.

OpenCLIP saves a checkpoint only at the end of an epoch, and its loop numbers an epoch's steps
from the first batch it is given. :class:`MidEpoch` wraps its ``train_one_epoch`` so that:

- every ``every`` optimizer steps, the global master writes OpenCLIP's own checkpoint
  (``epoch``, ``name``, ``state_dict``, ``optimizer``, ``scaler``) with the epoch it is in, and
  the loader's place under the key ``"fastload"``, to ``epoch_{E}_step_{S}.pt`` beside
  OpenCLIP's ``epoch_{N}.pt`` (or to ``epoch_latest.pt`` with ``--save-most-recent``), written
  whole before it replaces the previous one;
- OpenCLIP's ``--resume`` of such a file (``latest`` finds it: OpenCLIP orders
  ``epoch_0_step_4.pt`` after ``epoch_0.pt`` and before ``epoch_1.pt``) gives its loop the
  rest of that epoch, with the learning-rate schedule moved on by the steps already taken.

Under another world size, fastload's ``ShardSampler`` hands the new ranks the samples the old
ones had not consumed; the steps taken are counted in the new global batch (rounded down).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from fastload.loader import DataLoader

__all__ = ["Batches", "MidEpoch"]

KEY = "fastload"  # the checkpoint's entry for the loader's place
LATEST = "epoch_latest.pt"  # OpenCLIP's --save-most-recent name

log = logging.getLogger(__name__)


class Batches:
    """An epoch of a loader cut to ``num_batches``, with OpenCLIP's attributes, that can say
    where it stands and continue from there.

    Attributes:
        loader: The ``fastload.DataLoader``.
        num_batches: Batches per epoch (per rank).
        num_samples: Samples per epoch as OpenCLIP reports it.
        global_batch: Samples per step of all ranks together.
        samples: Samples of this epoch that all ranks have been handed.
        between: Called with the batches of this epoch handed out, before each further batch
            is read (the consumer is done with the ones before).
    """

    def __init__(
        self, loader: DataLoader, num_batches: int, num_samples: int, *, global_batch: int
    ) -> None:
        self.loader, self.num_batches, self.num_samples = loader, num_batches, num_samples
        self.global_batch, self.samples = global_batch, 0
        self.between: Callable[[int], None] | None = None
        self._resume: dict[str, Any] | None = None

    def __len__(self) -> int:
        return self.num_batches

    def position(self) -> dict[str, Any]:
        """Where this epoch stands, between batches: the loader's state and the samples
        consumed by all ranks."""
        return {"loader": self.loader.state_dict(), "samples": self.samples}

    def resume(self, position: dict[str, Any]) -> int:
        """Make the next pass the rest of the epoch at ``position``.

        Returns:
            The batches per rank of this epoch counted as done, in this run's global batch.
        """
        self._resume = position
        return min(int(position["samples"]) // self.global_batch, self.num_batches)

    def __iter__(self) -> Iterator[Any]:
        self.samples = 0
        if self._resume is not None:
            position, self._resume = self._resume, None
            self.loader.load_state_dict(position["loader"])
            self.samples = int(position["samples"])
        start = min(self.samples // self.global_batch, self.num_batches)
        return self._pass(start)

    def _pass(self, start: int) -> Iterator[Any]:
        # islice: the loader is asked for no batch beyond the epoch's count
        batches = itertools.islice(self.loader, self.num_batches - start)
        for done, batch in enumerate(batches, start + 1):
            self.samples += self.global_batch
            yield batch
            if self.between is not None and done < self.num_batches:
                self.between(done)


class MidEpoch:
    """Mid-epoch checkpoints and their resumption around OpenCLIP's loop (see the module).

    Args:
        every: Optimizer steps between checkpoints; ``None`` writes none (a checkpoint
            written by another run still resumes).
    """

    def __init__(self, every: int | None = None) -> None:
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"every={every!r} must be a whole number of steps of at least 1")
        self.every = every
        self.loaded: dict[str, Any] | None = None  # the KEY entry of the checkpoint resumed

    def pt_load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """OpenCLIP's ``pt_load``, noting the loader's place in the checkpoint it reads."""

        @functools.wraps(original)
        def load(*args: Any, **kwargs: Any) -> Any:
            checkpoint = original(*args, **kwargs)
            if isinstance(checkpoint, dict):
                self.loaded = checkpoint.get(KEY)
            return checkpoint

        return load

    def train_one_epoch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """OpenCLIP's ``train_one_epoch``, resuming and checkpointing its epoch."""

        @functools.wraps(original)
        def train(
            model: Any, data: Any, loss: Any, epoch: int, optimizer: Any, scaler: Any,
            scheduler: Any, dist_model: Any, args: Any, tb_writer: Any = None,
        ) -> Any:  # fmt: skip
            loaded, self.loaded = self.loaded, None
            batches = _batches(data) if loaded is not None or self.every is not None else None
            if batches is not None and loaded is not None and int(loaded["epoch"]) == epoch:
                done = batches.resume(loaded)
                steps = done // args.accum_freq
                log.info(f"fastload: epoch {epoch} continues after step {steps} ({done} batches)")
                if scheduler is not None:
                    scheduler = functools.partial(_shifted, scheduler, steps)
            if batches is not None and self.every is not None:
                if args.rank == 0 and not args.save_logs:
                    raise ValueError("mid-epoch checkpoints go into --logs, which is 'none'")
                batches.between = functools.partial(
                    self._save, model, optimizer, scaler, args, epoch, batches
                )
            try:
                return original(
                    model, data, loss, epoch, optimizer, scaler, scheduler, dist_model, args,
                    tb_writer=tb_writer,
                )  # fmt: skip
            finally:
                if batches is not None:
                    batches.between = None

        return train

    def _save(
        self, model: Any, optimizer: Any, scaler: Any, args: Any, epoch: int, batches: Batches,
        done: int,
    ) -> None:  # fmt: skip
        """Write a checkpoint after ``done`` batches when they end a multiple of ``every``
        steps (the global master only)."""
        assert self.every is not None
        if done % (self.every * args.accum_freq) or not args.save_logs:
            return  # save_logs: the global master, with a logs folder
        folder = Path(args.checkpoint_path)
        step = done // args.accum_freq
        checkpoint = {
            "epoch": epoch,  # OpenCLIP's --resume starts this epoch again; KEY says where
            "name": args.name,
            "state_dict": getattr(model, "_orig_mod", model).state_dict(),  # as main saves
            "optimizer": optimizer.state_dict(),
            KEY: {"epoch": epoch, "step": step, **batches.position()},
        }
        if scaler is not None:
            checkpoint["scaler"] = scaler.state_dict()
        path = folder / (LATEST if args.save_most_recent else f"epoch_{epoch}_step_{step}.pt")
        partial = path.with_name(path.name + ".partial")  # not *.pt: resume latest skips it
        torch.save(checkpoint, partial)
        os.replace(partial, path)
        for older in folder.glob("epoch_*_step_*.pt"):
            if older != path:
                older.unlink(missing_ok=True)
        log.info(f"fastload: saved {path} (epoch {epoch}, step {step})")


def _batches(data: dict[str, Any]) -> Batches:
    """The training set's :class:`Batches`, or an error saying which loaders have one."""
    dataloader = data["train"].dataloader
    if not isinstance(dataloader, Batches):
        raise ValueError(
            f"mid-epoch checkpoints need fastload's training loader (--dataset-type "
            f"webdataset or csv), not {type(dataloader).__name__}"
        )
    return dataloader


def _shifted(scheduler: Callable[[int], Any], steps: int, step: int) -> Any:
    """OpenCLIP's scheduler at ``step`` of the rest of an epoch (``steps`` already taken)."""
    return scheduler(step + steps)
