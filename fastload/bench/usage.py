"""What each of ``fastload bench``'s configurations used while it was measured.

CPU: the CPU time of this process and its worker processes over the configuration's own
rounds, in cores (CPU seconds over wall seconds: 16 workers decoding flat out are about 16).
Each round starts once this process and its workers are about idle (:func:`settle`): the
configurations keep their workers between rounds, and the one measured before refills its
prefetch queue after its round ends, which would otherwise count, and compete, in the next
one's round.

GPU: with a CUDA device, ``nvidia-smi`` samples how busy the device is (the share of time a
kernel ran) and its JPEG engines where it reports them, ten times a second through the run
(:class:`GpuSampler`); a configuration's figure is the mean of the samples taken in its rounds.
Without ``nvidia-smi`` there are no GPU figures.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fastload.system import children_cpu_seconds

__all__ = ["GpuSampler", "Spent", "counted", "settle", "tree_cpu_seconds"]

Clock = Callable[[], float]


def tree_cpu_seconds() -> float | None:
    """CPU seconds used so far by this process and its live worker processes (``None`` where
    the workers' cannot be read: not Linux)."""
    children = children_cpu_seconds()
    return None if children is None else time.process_time() + children


@dataclass
class Spent:
    """The CPU and wall time of one configuration's rounds, and when each round ran."""

    cpu_seconds: float | None = 0.0  # None: not readable here
    wall_seconds: float = 0.0
    windows: list[tuple[float, float]] = field(default_factory=list)

    @property
    def cores(self) -> float | None:
        """CPU seconds over wall seconds."""
        if self.cpu_seconds is None or self.wall_seconds <= 0:
            return None
        return self.cpu_seconds / self.wall_seconds


@contextlib.contextmanager
def counted(
    spent: Spent,
    *,
    cpu: Callable[[], float | None] = tree_cpu_seconds,
    clock: Clock = time.monotonic,
) -> Iterator[None]:
    """Within it, the CPU and wall time go to ``spent``, and the window to its rounds."""
    start, used = clock(), cpu()
    try:
        yield
    finally:
        end, after = clock(), cpu()
        spent.wall_seconds += end - start
        spent.windows.append((start, end))
        if spent.cpu_seconds is not None and used is not None and after is not None:
            # a worker process that ended in the round takes its CPU time with it: never < 0
            spent.cpu_seconds += max(0.0, after - used)
        else:
            spent.cpu_seconds = None


def settle(
    cpu: Callable[[], float | None] = tree_cpu_seconds,
    *,
    idle: float = 0.25,
    window: float = 0.1,
    limit: float = 2.0,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until this process and its workers use less than ``idle`` cores over ``window``
    seconds, or ``limit`` seconds have passed; returns the seconds waited."""
    start = clock()
    before = cpu()
    while before is not None and clock() - start < limit:
        sleep(window)
        after = cpu()
        if after is None or after - before < idle * window:
            break
        before = after
    return clock() - start


class GpuSampler:
    """``nvidia-smi`` sampling one device's utilisation in the background.

    Args:
        device: The device's index as CUDA numbers it in this process.
        period_ms: Milliseconds between samples.
        command: The ``nvidia-smi`` to run.
        clock: When each sample arrived (the windows given to :meth:`mean` are on it).
    """

    def __init__(
        self,
        device: int = 0,
        *,
        period_ms: int = 100,
        command: str = "nvidia-smi",
        clock: Clock = time.monotonic,
    ) -> None:
        self.fields = _fields(command)
        self.samples: list[tuple[float, tuple[float | None, ...]]] = []
        self._clock = clock
        query = ",".join(f"utilization.{name}" for name in self.fields)
        self._process = subprocess.Popen(
            [command, f"--query-gpu={query}", "--format=csv,noheader,nounits",
             f"--loop-ms={period_ms}", f"--id={_physical(device)}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="fastload-gpu-sampler", daemon=True)
        self._reader.start()

    @classmethod
    def open(
        cls, device: int = 0, *, command: str = "nvidia-smi", clock: Clock = time.monotonic
    ) -> GpuSampler | None:
        """A sampler of ``device``, or ``None`` where there is no ``command`` on the PATH."""
        if shutil.which(command) is None:
            return None
        return cls(device, command=command, clock=clock)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            values = tuple(_number(part) for part in line.split(","))
            if len(values) == len(self.fields):
                self.samples.append((self._clock(), values))

    def mean(self, windows: list[tuple[float, float]]) -> dict[str, float | None]:
        """Each utilisation's mean, in percent, over the samples that arrived in ``windows``
        (``None`` where none did, or the device reported none)."""
        inside = [values for at, values in self.samples if any(a <= at <= b for a, b in windows)]
        out: dict[str, float | None] = {}
        for k, name in enumerate(self.fields):
            known = [value for values in inside if (value := values[k]) is not None]
            out[name] = sum(known) / len(known) if known else None
        return out

    def close(self) -> None:
        """Stop sampling."""
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=5)

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _fields(command: str) -> tuple[str, ...]:
    """The utilisations to sample: the SMs', and the JPEG engines' where this ``nvidia-smi``
    knows the field (newer drivers)."""
    try:
        listed = subprocess.run(
            [command, "--help-query-gpu"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    return ("gpu", "jpeg") if "utilization.jpeg" in listed else ("gpu",)


def _physical(device: int) -> str:
    """``nvidia-smi``'s name for CUDA's device ``device``: through ``CUDA_VISIBLE_DEVICES``
    (indices or UUIDs, which ``nvidia-smi --id`` takes as they are) where it is set."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    return visible[device] if device < len(visible) else str(device)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None
