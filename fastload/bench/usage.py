"""What each of ``fastload bench``'s configurations used while it was measured.

CPU: the CPU time of this process and its worker processes over the configuration's own
rounds, in cores (CPU seconds over wall seconds: 16 workers decoding flat out are about 16).
Each round starts once this process and its workers are about idle (:func:`settle`): the
configurations keep their workers between rounds, and the one measured before refills its
prefetch queue after its round ends, which would otherwise count, and compete, in the next
one's round.

GPU: with a CUDA device, NVML (the NVIDIA driver's management library, what ``nvidia-smi``
reads) is asked how busy the device is (the share of the time a kernel ran) and its hardware
JPEG decoders where the driver says, ten times a second through the run (:class:`GpuSampler`);
a configuration's figure is the mean of the samples taken in its rounds. Without the driver
there are no GPU figures.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fastload.system import children_cpu_seconds

__all__ = ["GpuSampler", "Spent", "counted", "driver_names", "settle", "tree_cpu_seconds"]

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
    """Samples a CUDA device's utilisation in the background, ten times a second.

    Args:
        read: One sample: each of ``fields``' utilisation in percent (``None``: none given).
        fields: What ``read`` gives, in order: ``"gpu"`` (the share of the time a kernel ran),
            ``"jpeg"`` (the hardware JPEG decoders').
        period: Seconds between samples.
        clock: When each sample was taken (the windows given to :meth:`mean` are on it).
    """

    def __init__(
        self,
        read: Callable[[], tuple[float | None, ...]],
        fields: tuple[str, ...],
        *,
        period: float = 0.1,
        clock: Clock = time.monotonic,
    ) -> None:
        self.fields = fields
        self.samples: list[tuple[float, tuple[float | None, ...]]] = []
        self._read, self._period, self._clock = read, period, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastload-gpu-sampler", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, device: int = 0) -> GpuSampler | None:
        """A sampler of CUDA's device ``device`` through NVML (the driver's management
        library, which ``nvidia-smi`` reads), or ``None`` where NVML cannot be opened."""
        try:
            read, fields = _nvml_reader(device)
        except (OSError, RuntimeError):
            return None
        return cls(read, fields)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self.samples.append((self._clock(), self._read()))

    def mean(self, windows: list[tuple[float, float]]) -> dict[str, float | None]:
        """Each utilisation's mean, in percent, over the samples taken in ``windows``
        (``None`` where none was, or the device gave none)."""
        inside = [values for at, values in self.samples if any(a <= at <= b for a, b in windows)]
        out: dict[str, float | None] = {}
        for k, name in enumerate(self.fields):
            known = [value for values in inside if (value := values[k]) is not None]
            out[name] = sum(known) / len(known) if known else None
        return out

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _nvml_reader(device: int) -> tuple[Callable[[], tuple[float | None, ...]], tuple[str, ...]]:
    """A reader of CUDA's device ``device``'s utilisations through NVML, and their names: the
    JPEG decoders' too where the driver gives them (``nvmlDeviceGetJpgUtilization``).

    Raises:
        OSError: No NVML library here (no NVIDIA driver).
        RuntimeError: NVML did not start, or has no such device.
    """
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise RuntimeError("NVML did not start")
    handle = ctypes.c_void_p()
    found = -1
    for name in driver_names(device):  # the first the driver knows
        if name.isdigit():
            found = nvml.nvmlDeviceGetHandleByIndex_v2(int(name), ctypes.byref(handle))
        else:
            found = nvml.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(handle))
        if found == 0:
            break
    if found != 0:
        raise RuntimeError(f"NVML has no device {device} of CUDA's")

    class Rates(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def gpu() -> float | None:
        rates = Rates()
        failed = nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates))
        return None if failed else float(rates.gpu)

    def jpeg() -> float | None:
        busy, period = ctypes.c_uint(), ctypes.c_uint()
        failed = nvml.nvmlDeviceGetJpgUtilization(handle, ctypes.byref(busy), ctypes.byref(period))
        return None if failed else float(busy.value)

    try:
        has_jpeg = jpeg() is not None
    except AttributeError:  # an older driver's NVML, without the call
        has_jpeg = False
    if has_jpeg:
        return (lambda: (gpu(), jpeg())), ("gpu", "jpeg")
    return (lambda: (gpu(),)), ("gpu",)


def driver_names(device: int) -> list[str]:
    """The driver's names for CUDA's device ``device``, surest first: its UUID, as CUDA gives
    it; then its index, or what ``CUDA_VISIBLE_DEVICES`` says in its place (an index or a
    UUID) where it is set (NVML numbers the devices in PCI order, CUDA the fastest first: the
    same order where the devices are alike)."""
    import torch

    names = []
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        names.append(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except (AttributeError, RuntimeError, AssertionError):  # no CUDA in this torch
        pass
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    names.append(visible[device] if device < len(visible) else str(device))
    return names
