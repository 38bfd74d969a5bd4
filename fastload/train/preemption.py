"""Stop a training run cleanly when the scheduler says so: SIGTERM, and SIGUSR1 before it.

SLURM (``--signal``), Kubernetes and spot instances send SIGTERM, then kill the process after a
grace period; some schedulers send SIGUSR1 first. :class:`StopSignals` turns those signals into
a flag that the loop reads between optimizer steps, so the step in flight finishes, a checkpoint
is written, and the process exits with a line saying so. Without it, Python dies on SIGTERM at
whatever instruction it was running.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from fastload.system import distributed

__all__ = ["SIGNALS", "Preempted", "StopSignals"]

log = logging.getLogger("fastload")

SIGNALS = ("SIGTERM", "SIGUSR1")


class Preempted(SystemExit):
    """``Trainer.fit`` stopped on a scheduler's signal, after the step in flight (and the
    checkpoint, where it could write one).

    A ``SystemExit`` with the status ``128 + signal`` that a job killed by that signal would
    have, so that a script which does not catch it ends as schedulers expect; an entry point
    that wants to go on (clean up, report) catches it.

    Attributes:
        signal: The signal's number.
        saved: Whether a mid-epoch checkpoint was written.
    """

    def __init__(self, number: int, *, saved: bool) -> None:
        super().__init__(128 + number)
        self.signal, self.saved = number, saved


class StopSignals:
    """While active (``with``), SIGTERM and SIGUSR1 ask the loop to stop instead of killing it.

    The previous handlers come back on exit. Outside the main thread (where Python cannot set
    handlers) it does nothing. A second signal of the same kind while stopping gets the
    previous handler, so a scheduler's escalation still ends the process.
    """

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            log.debug("stop signals: not the main thread, left as they are")
            return self
        for name in SIGNALS:
            number = getattr(signal, name, None)
            if number is not None:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is not None:  # asked twice: the previous behaviour
            previous = self._previous.get(number, signal.SIG_DFL)
            signal.signal(number, previous)
            signal.raise_signal(number)
            return
        self.received = signal.Signals(number).name

    def should_stop(self, device: torch.device) -> bool:
        """Whether to stop after this step; under torch.distributed, whether any rank got a
        signal (every rank stops after the same step)."""
        stop = self.received is not None
        if not distributed():
            return stop
        flag = torch.tensor([1.0 if stop else 0.0], device=_reduce_device(device))
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and self.received is None:
            self.received = "a signal to another rank"
        return bool(flag.item())


def _reduce_device(device: torch.device) -> torch.device:
    # NCCL reduces CUDA tensors only; gloo reduces CPU ones
    return device if dist.get_backend() == "nccl" else torch.device("cpu")
