"""The training loop: the speed techniques the field recommends, on by default where safe.

One optimizer step is one or more micro-batches (gradient accumulation). Per micro-batch: the
forward pass and the loss under the precision's autocast, then the backward pass; with
accumulation, of the loss weighted by the micro-batch's size, under DDP's ``no_sync`` for all
but the last micro-batch of the step (gradients are all-reduced once). Per optimizer step:
gradients unscaled (fp16) and, with accumulation, divided by the step's sample count, so k
micro-batches give the gradient of one batch of their combined size; a non-finite loss
handled; gradients clipped; the optimizer and the schedule stepped; gradients freed with
``zero_grad(set_to_none=True)``. The host waits for the device once per optimizer step, to
read the loss; with fp16, twice more, to read the loss scale before and after the step (a
lower scale after it means the scaler skipped the step).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fastload import compat, diagnosis
from fastload._progress import Progress
from fastload.memory.tensors import inputs_of, targets_of
from fastload.system import distributed
from fastload.train import checkpoint as ckpt
from fastload.train.arguments import check_fit, check_optimizer_holds, check_options, is_stateful
from fastload.train.precision import Precision
from fastload.train.preemption import Preempted, StopSignals
from fastload.train.records import EpochStats, NonFiniteLossError, StepRecord, steps_per_epoch
from fastload.train.setup import prepare_model

__all__ = ["EpochStats", "NonFiniteLossError", "StepRecord", "Trainer", "steps_per_epoch"]

log = logging.getLogger("fastload")


def _is_ddp(model: torch.nn.Module) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def _rank() -> int:
    return dist.get_rank() if distributed() else 0


class Trainer:
    """Trains a classifier-style model on ``(inputs, targets)`` batches, or on dict batches
    as Hugging Face pipelines make them (the images the inputs, ``labels`` or ``label`` the
    targets: :func:`~fastload.memory.tensors.inputs_of`).

    Args:
        model: The model, on its device (wrap it in DistributedDataParallel yourself, or let
            ``fastload.train.distributed`` do it).
        optimizer: The optimizer (see :func:`fastload.train.adamw`).
        loss_fn: ``loss_fn(outputs, targets)``, a mean over the batch; default cross-entropy
            with ``label_smoothing``.
        label_smoothing: For the default loss.
        scheduler: Stepped once per optimizer step (see ``one_cycle``, ``warmup_cosine``).
        precision: ``"auto"`` (bf16 where supported, fp16 on older GPUs), ``"bf16"``, ``"fp16"``
            (with loss scaling; CUDA only) or ``"fp32"``.
        accumulate: Micro-batches per optimizer step.
        clip_grad_norm: Clip the gradients' global norm to this (after unscaling).
        channels_last: Train in channels-last memory format (model and 4-D inputs).
        compile: ``True`` (torch.compile's default backend), a backend name, or ``False``.
        checkpoint_activations: Names of submodules (as in ``named_modules``) whose
            activations are recomputed in the backward pass instead of kept.
        on_nonfinite: A NaN or infinite loss: ``"raise"`` a :class:`NonFiniteLossError` naming
            the step, or ``"skip"`` the step. With fp16 the scaler skips overflowing steps
            itself.
        progress: Draw a progress bar per epoch (default: when stderr is a terminal, rank 0)
            and print each epoch's one-line summary (default: always, on rank 0, so a log
            file shows progress too); ``False`` prints nothing.

    Raises:
        ValueError: A bad option or an incompatible combination (the message says why).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        label_smoothing: float = 0.0,
        scheduler: Any = None,
        precision: str = "auto",
        accumulate: int = 1,
        clip_grad_norm: float | None = None,
        channels_last: bool = False,
        compile: bool | str = False,
        checkpoint_activations: Sequence[str] = (),
        on_nonfinite: str = "raise",
        progress: bool | None = None,
    ) -> None:
        check_options(accumulate, clip_grad_norm, on_nonfinite, label_smoothing)
        check_optimizer_holds(model, optimizer)
        parameter = next(model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        self.precision = Precision.resolve(precision, self.device)
        log.info("precision %s (%s)", self.precision.name, self.precision.reason)
        model = prepare_model(
            model,
            channels_last=channels_last,
            compile=compile,
            checkpoint_activations=checkpoint_activations,
        )
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn or torch.nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.scheduler = scheduler
        self.accumulate = accumulate
        self.clip_grad_norm = clip_grad_norm
        self.channels_last = channels_last
        self.on_nonfinite = on_nonfinite
        self.progress = progress
        self.epoch = 0  # the next epoch to train
        self.step = 0  # optimizer steps taken
        self.history: list[EpochStats] = []
        self.epoch_batches = 0  # batches of `epoch` trained (a checkpoint taken mid-epoch)
        # set by fit: called after each optimizer step; True stops the epoch there
        self._after_step: Callable[[Any], bool] | None = None

    @property
    def scaler(self) -> torch.amp.GradScaler:
        """The precision's loss scaler (a pass-through unless fp16)."""
        return self.precision.scaler()

    # ------------------------------------------------------------ batches

    def to_device(self, batch: Any) -> tuple[Any, Any]:
        """A batch's inputs and targets on the model's device (inputs channels-last if asked).

        Raises:
            TypeError: The batch is neither ``(inputs, targets, ...)`` nor a dict with labels.
        """
        inputs, targets = inputs_of(batch), targets_of(batch)
        if targets is None:  # a tensor, a sequence of one, a dict without labels: no targets
            got = type(batch).__name__
            got = f"a {got} of {sorted(map(str, batch))}" if isinstance(batch, Mapping) else got
            need = "(inputs, targets, ...) or a dict with 'labels' or 'label'"
            raise TypeError(f"batches must be {need}; got {got}")
        if isinstance(inputs, torch.Tensor):
            if inputs.device != self.device:
                inputs = inputs.to(self.device, non_blocking=True)
            if self.channels_last and inputs.ndim == 4:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
        if isinstance(targets, torch.Tensor) and targets.device != self.device:
            targets = targets.to(self.device, non_blocking=True)
        return inputs, targets

    def _params_with_grad(self) -> list[torch.Tensor]:
        return [
            p
            for group in self.optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]

    # ------------------------------------------------------------ training

    def train_step(self, batch: Any) -> StepRecord:
        """One optimizer step on one batch: forward, backward, and the step itself.

        The same step :meth:`train_epoch` takes, without accumulation (the batch is the
        whole step) and without the epoch's bookkeeping.
        """
        self.model.train()
        inputs, targets = self.to_device(batch)
        loss = self._backward(inputs, targets, weight=None, sync=True)
        return self._finish_step(_count(inputs, targets), loss, summed=False)

    def _backward(
        self, inputs: Any, targets: Any, *, weight: int | None, sync: bool
    ) -> torch.Tensor:
        """Forward and backward one micro-batch; returns its loss (times ``weight``), detached.

        ``weight``: weight the loss by the micro-batch's size (accumulation: the step divides
        by the total); ``sync``: under DDP, all-reduce the gradients in this backward pass.
        """
        model = self.model
        with contextlib.nullcontext() if sync else model.no_sync():  # type: ignore[operator]
            with self.precision.autocast():
                loss = self.loss_fn(model(inputs), targets)
            self.precision.backward(loss if weight is None else loss * weight)
        return loss.detach() if weight is None else loss.detach() * weight

    def train_epoch(self, loader: Iterable[Any]) -> EpochStats:
        """Train one pass over ``loader`` and return what it did."""
        self.model.train()
        total = _length(loader)
        show = self.progress if self.progress is not None else sys.stderr.isatty()
        bar = Progress(f"epoch {self.epoch}", enabled=show and _rank() == 0, rate=False)
        start = time.perf_counter()
        data_seconds, images = 0.0, 0
        group_n, group_loss = 0, None
        steps: list[StepRecord] = []
        # a checkpoint taken mid-epoch: the loader resumes after the batches already trained
        micro, self.epoch_batches = self.epoch_batches, 0
        batches = iter(loader)
        while True:
            waited = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                break
            data_seconds += time.perf_counter() - waited
            inputs, targets = self.to_device(batch)
            n = _count(inputs, targets)
            micro += 1
            ends_step = micro % self.accumulate == 0 or (total is not None and micro == total)
            # Under DDP, all-reduce once per optimizer step; without a length, the last
            # micro-batch is unknown, so every one is reduced (correct, only slower).
            sync = ends_step or total is None or not _is_ddp(self.model)
            # one micro-batch per step: the mean loss's gradient is the step's; several:
            # weight each by its size, and divide by the step's total before stepping
            weight = None if self.accumulate == 1 else n
            loss = self._backward(inputs, targets, weight=weight, sync=sync)
            group_loss = loss if group_loss is None else group_loss + loss
            group_n += n
            images += n
            if ends_step:
                steps.append(self._finish_step(group_n, group_loss, summed=weight is not None))
                group_n, group_loss = 0, None
                self.epoch_batches = micro
                last = total is not None and micro == total  # fit takes it from the epoch's end
                if self._after_step is not None and not last and self._after_step(loader):
                    bar.close()
                    raise _Stopped
                if bar.enabled:
                    elapsed = time.perf_counter() - start
                    bar(
                        micro,
                        total or micro,
                        f"{images / elapsed:,.0f} img/s, data {data_seconds / elapsed:.0%}, "
                        f"loss {steps[-1].loss:.4f}",
                    )
        if group_n:  # an iterable without a length ended mid-step: finish that step
            steps.append(self._finish_step(group_n, group_loss, summed=self.accumulate > 1))
        bar.close()
        return self._close_epoch(steps, images, time.perf_counter() - start, data_seconds)

    def _close_epoch(
        self, steps: list[StepRecord], images: int, seconds: float, data_seconds: float
    ) -> EpochStats:
        """Record and report the epoch just trained; the next one starts."""
        stats = EpochStats(
            self.epoch,
            len(steps),
            sum(not s.taken for s in steps),
            images,
            seconds,
            data_seconds,
            self._mean_loss([(s.loss, s.samples) for s in steps if s.taken]),
        )
        self.history.append(stats)
        self.epoch += 1
        self.epoch_batches = 0
        if self.progress is not False and _rank() == 0:
            print(stats.summary(), file=sys.stderr)
        return stats

    def _finish_step(self, n: int, loss: torch.Tensor | None, *, summed: bool) -> StepRecord:
        """Finish the gradients of ``n`` samples and step the optimizer.

        Args:
            n: The samples of the step.
            loss: Their loss: the mean, or (``summed``) the sum of size-weighted losses, whose
                gradients are made a mean here.
            summed: Whether the loss and gradients are sums over the samples.
        """
        assert loss is not None
        self.precision.unscale_(self.optimizer)
        if summed:  # gradients of size-weighted losses: make them a mean
            grads = [p.grad for p in self._params_with_grad() if p.grad is not None]
            if grads:
                compat.foreach_div_(grads, float(n))
        # the step's host-device sync (fp16 adds two: the loss scale read before and after)
        value = float(loss.item()) / (n if summed else 1)
        if not math.isfinite(value) and not self.precision.scales_loss:
            self.optimizer.zero_grad(set_to_none=True)
            if self.on_nonfinite == "raise":
                raise NonFiniteLossError(
                    f"the loss is {value} at optimizer step {self.step} (epoch {self.epoch}); "
                    "lower the learning rate, clip gradients, or pass on_nonfinite='skip'"
                )
            self.step += 1
            return StepRecord(n, value, False)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._params_with_grad(), self.clip_grad_norm)
        took = self.precision.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        self.step += 1
        return StepRecord(n, value, took and math.isfinite(value))

    def _mean_loss(self, losses: list[tuple[float, int]]) -> float:
        total = torch.tensor(
            [sum(v * n for v, n in losses), float(sum(n for _, n in losses))], dtype=torch.float64
        )
        if distributed():
            total = total.to(self.device if dist.get_backend() == "nccl" else "cpu")
            dist.all_reduce(total)
        return float(total[0] / total[1]) if total[1] > 0 else math.nan

    # ------------------------------------------------------------ evaluation

    def evaluate(self, loader: Iterable[Any]) -> dict[str, float]:
        """Mean loss and top-1 accuracy over ``loader``, under ``torch.inference_mode()``.

        Summed over every rank when running distributed.
        """
        model = self.model
        was_training = model.training
        model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss*n, correct, n
        with torch.inference_mode(), self.precision.autocast():
            for batch in loader:
                inputs, targets = self.to_device(batch)
                outputs = model(inputs)
                n = len(targets)
                sums[0] += self.loss_fn(outputs, targets).double() * n
                if outputs.ndim == 2 and targets.ndim == 1:
                    sums[1] += (outputs.argmax(dim=1) == targets).sum()
                sums[2] += n
        model.train(was_training)
        if distributed():
            sums = sums.cpu() if dist.get_backend() != "nccl" else sums
            dist.all_reduce(sums)
        loss, correct, n = sums.tolist()
        return {
            "loss": loss / n if n else math.nan,
            "accuracy": correct / n if n else math.nan,
            "images": n,
        }

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs."""
        return {
            "model": ckpt.unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.precision.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "epoch": self.epoch,
            "epoch_batches": self.epoch_batches,
            "step": self.step,
            "precision": self.precision.name,
            "rng": ckpt.rng_state(),
        }

    def save(self, path: str | Path, *, loader: Any = None) -> Path | None:
        """Write a checkpoint (rank 0 only under torch.distributed; others return ``None``).

        Args:
            path: The file (written atomically: a crash mid-write leaves the previous one).
            loader: The training loader: its ``state_dict()`` (every rank's, under
                torch.distributed) goes in the checkpoint, so the run resumes on the very
                batch it stopped before, with the loader's ``generator`` where it was.
        """
        state = self.state_dict()
        if is_stateful(loader):
            mine = loader.state_dict()
            if distributed():
                every: list[Any] = [None] * dist.get_world_size()
                dist.all_gather_object(every, mine)
                state["loaders"] = every
            else:
                state["loaders"] = [mine]
        written = ckpt.save(state, path) if _rank() == 0 else None
        if distributed():
            dist.barrier()  # no rank reads it before it is whole
        return written

    def load(self, path: str | Path, *, loader: Any = None) -> None:
        """Resume from a checkpoint written by :meth:`save`, random streams included.

        Args:
            path: The checkpoint.
            loader: The training loader, built as in the run that saved: it gets this rank's
                saved loader state.

        Raises:
            ValueError: The checkpoint is of a different model (the message says how), not a
                fastload checkpoint, taken mid-epoch while ``loader`` cannot resume one, or
                of another number of ranks.
        """
        state = ckpt.load(path)
        loaders = state.get("loaders")
        mid_epoch = state.get("epoch_batches", 0) > 0
        if loader is not None and loaders is not None and is_stateful(loader):
            world = dist.get_world_size() if distributed() else 1
            if len(loaders) != world:
                raise ValueError(
                    f"the checkpoint {str(path)!r} holds the loaders of {len(loaders)} ranks, "
                    f"and this run has {world}: resume with the same number of ranks"
                )
            loader.load_state_dict(loaders[_rank()])
        elif mid_epoch:
            raise ValueError(
                f"the checkpoint {str(path)!r} was taken in the middle of epoch "
                f"{state['epoch']}, and {type(loader).__name__} cannot resume there: pass the "
                "training loader (a fastload.DataLoader) to load() or fit()"
            )
        ckpt.check_same_model(self.model, state["model"], path)
        ckpt.unwrap(self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.precision.load_state_dict(state["scaler"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.epoch_batches = state.get("epoch_batches", 0)
        ckpt.set_rng_state(state["rng"])

    def fit(
        self,
        train_loader: Iterable[Any],
        *,
        epochs: int,
        val_loader: Iterable[Any] | None = None,
        checkpoint: str | Path | None = None,
        checkpoint_every: int | None = None,
        doctor: bool = False,
    ) -> list[EpochStats]:
        """Train until ``epochs`` epochs are done in all, resuming from ``checkpoint`` if it exists.

        While it runs, SIGTERM and SIGUSR1 (what schedulers send before they kill a job) stop
        the run after the optimizer step in flight: with a ``checkpoint`` and a
        ``fastload.DataLoader`` (or any loader with ``state_dict``), a checkpoint is written
        there, mid-epoch, and the next ``fit`` with the same arguments resumes on the batch
        after the last one trained. The process then exits with status ``128 + signal``
        after one line on stderr saying what was saved.

        Args:
            train_loader: Training batches.
            epochs: The total number of epochs (a resumed run trains only the rest).
            val_loader: Evaluated after every epoch, when given.
            checkpoint: A file written after every epoch (and every ``checkpoint_every``
                steps) and read at the start when present; its folder is checked for writing
                before any training. It holds the training loader's state when the loader
                has one (every rank's, under torch.distributed).
            checkpoint_every: Also write the checkpoint every this many optimizer steps,
                mid-epoch (needs a ``checkpoint`` and a loader with ``state_dict``).
            doctor: First run ``fastload.doctor`` on this model, optimizer and loader (a few
                seconds; nothing is trained by it) and print its report to stderr.

        Returns:
            What each epoch trained here did, with its evaluation in ``val``.

        Raises:
            ValueError: ``epochs`` is not an int >= 0, or a bad ``checkpoint_every``.
            PermissionError: The checkpoint's folder cannot be written (named as given).
            NotADirectoryError: The checkpoint's path runs through a file.
            fastload.train.Preempted: A stop signal arrived; uncaught, it ends the process with
                status ``128 + signal`` (it is a ``SystemExit``).
        """
        check_fit(train_loader, epochs, checkpoint, checkpoint_every)
        if checkpoint is not None:
            ckpt.check_writable(checkpoint)
            if Path(checkpoint).exists():
                self.load(checkpoint, loader=train_loader)
        if doctor:
            report = diagnosis.doctor(
                self.model,
                train_loader,
                self.optimizer,
                loss_fn=self.loss_fn,
                autocast=self.precision.dtype,
                try_changes=not dist.is_initialized(),  # copies of a DDP model: not here
                progress=self.progress is not False and _rank() == 0,
            )
            if _rank() == 0:
                print(report, file=sys.stderr)
        done: list[EpochStats] = []
        stop = StopSignals()
        self._after_step = functools.partial(
            self._between_steps, stop=stop, checkpoint=checkpoint, every=checkpoint_every
        )
        try:
            with stop:
                self._fit_epochs(train_loader, epochs, val_loader, checkpoint, done, stop)
        except _Stopped:
            self._exit_stopped(stop, checkpoint, train_loader)
        finally:
            self._after_step = None
        return done

    def _fit_epochs(
        self,
        train_loader: Iterable[Any],
        epochs: int,
        val_loader: Iterable[Any] | None,
        checkpoint: str | Path | None,
        done: list[EpochStats],
        stop: StopSignals,
    ) -> None:
        while self.epoch < epochs:
            sampler = getattr(train_loader, "sampler", None)
            if isinstance(sampler, torch.utils.data.DistributedSampler):
                sampler.set_epoch(self.epoch)
            stats = self.train_epoch(train_loader)
            if val_loader is not None:
                stats = dataclasses.replace(stats, val=self.evaluate(val_loader))
                self.history[-1] = stats
                if self.progress is not False and _rank() == 0:
                    val = stats.val or {}
                    print(
                        f"epoch {stats.epoch} val: loss {val['loss']:.4f}, accuracy "
                        f"{val['accuracy']:.2%}",
                        file=sys.stderr,
                    )
            done.append(stats)
            if checkpoint is not None:
                self.save(checkpoint, loader=train_loader)
            if self.epoch < epochs and stop.should_stop(self.device):
                raise _Stopped  # a signal during the epoch's last step: stopped at its end

    def _between_steps(
        self,
        loader: Any,
        *,
        stop: StopSignals,
        checkpoint: str | Path | None,
        every: int | None,
    ) -> bool:
        """After each optimizer step in ``fit``: stop on a signal, or write a periodic checkpoint.

        Returns:
            Whether to stop the run here.
        """
        if stop.should_stop(self.device):
            if checkpoint is not None and is_stateful(loader):
                self.save(checkpoint, loader=loader)
            return True
        if every is not None and checkpoint is not None and self.step % every == 0:
            self.save(checkpoint, loader=loader)
        return False

    def _exit_stopped(self, stop: StopSignals, checkpoint: str | Path | None, loader: Any) -> None:
        where = f"epoch {self.epoch}, after batch {self.epoch_batches}, step {self.step}"
        if self.epoch_batches == 0:
            where = f"the end of epoch {self.epoch - 1}, step {self.step}"
        if checkpoint is not None and is_stateful(loader):
            what = f"checkpoint written to {str(checkpoint)!r}; the same fit() resumes there"
        elif checkpoint is not None:
            what = (
                f"no checkpoint written: {type(loader).__name__} cannot resume mid-epoch, so "
                f"{str(checkpoint)!r} (the last finished epoch) is where a new run starts"
            )
        else:
            what = "no checkpoint written (fit was given no checkpoint=)"
        if _rank() == 0:
            print(
                f"fastload: {stop.received} received: stopped at {where}; {what}", file=sys.stderr
            )
        number = getattr(signal.Signals, stop.received or "", signal.SIGTERM)
        raise Preempted(int(number), saved=checkpoint is not None and is_stateful(loader))

    def steps_per_epoch(self, loader: Any) -> int:
        """Optimizer steps one epoch over ``loader`` takes (see :func:`steps_per_epoch`)."""
        return steps_per_epoch(len(loader), self.accumulate)


class _Stopped(Exception):
    """A stop signal ended the epoch after an optimizer step (handled by ``fit``)."""


def _length(loader: Iterable[Any]) -> int | None:
    """The loader's batches, or ``None`` for an iterable (an IterableDataset's loader) without
    a length."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def _count(inputs: Any, targets: Any) -> int:
    return len(targets) if hasattr(targets, "__len__") else len(inputs)
