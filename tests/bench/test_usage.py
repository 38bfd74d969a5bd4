"""What each bench configuration used: the CPU of this process and its workers, the GPU as
nvidia-smi samples it (a stand-in nvidia-smi where there is no GPU)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fastload.bench import usage


class Ticks:
    """A clock that moves only when told (and a sleep that moves it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_settle_waits_until_this_process_and_its_workers_are_idle() -> None:
    clock = Ticks()
    used = iter([0.0, 0.1, 0.2, 0.3, 0.31, 9.0])  # a core busy for three windows, then idle

    def cpu() -> float:
        return next(used)

    waited = usage.settle(cpu, window=0.1, idle=0.25, clock=clock, sleep=clock.sleep)
    assert waited == pytest.approx(0.4)


def test_settle_gives_up_at_its_limit_and_without_a_reading() -> None:
    clock = Ticks()
    busy = iter(range(100))
    waited = usage.settle(
        lambda: float(next(busy)), window=0.25, limit=1.0, clock=clock, sleep=clock.sleep
    )
    assert waited == 1.0
    assert usage.settle(lambda: None, clock=clock, sleep=clock.sleep) == 0.0


def test_counted_adds_each_rounds_cpu_wall_and_window() -> None:
    clock, readings = Ticks(), iter([10.0, 13.0, 20.0, 19.0])
    spent = usage.Spent()
    for seconds in (2.0, 1.0):
        with usage.counted(spent, cpu=lambda: next(readings), clock=clock):
            clock.sleep(seconds)
    # 3 CPU seconds in the first round; in the second a worker ended and took its time along:
    # counted as none, never as less than none
    assert spent.cpu_seconds == 3.0 and spent.wall_seconds == 3.0 and spent.cores == 1.0
    assert spent.windows == [(0.0, 2.0), (2.0, 3.0)]
    unknown = usage.Spent()
    with usage.counted(unknown, cpu=lambda: None, clock=clock):
        clock.sleep(1.0)
    assert unknown.cores is None


def test_the_cpu_of_the_worker_processes_counts() -> None:
    import subprocess

    def workers() -> float:
        return (usage.tree_cpu_seconds() or 0.0) - time.process_time()

    before = workers()
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    deadline = time.monotonic() + 60  # not a timing: how long to wait for it at most
    try:
        while workers() - before < 0.2 and time.monotonic() < deadline:
            time.sleep(0.05)  # this process asleep: what grows is the child's
        assert workers() - before >= 0.2
    finally:
        child.kill()
        child.wait()


def test_the_gpu_and_its_jpeg_decoders_are_averaged_over_a_rounds_samples() -> None:
    readings = iter([(10.0, 50.0), (20.0, None), (30.0, 70.0)])
    clock = Ticks()

    def taken() -> float:  # the samples are taken at 1, 2, 3, ...
        clock.sleep(1.0)
        return clock.now

    sampler = usage.GpuSampler(
        lambda: next(readings, (90.0, 90.0)), ("gpu", "jpeg"), period=0.001, clock=taken
    )
    deadline = time.monotonic() + 60  # not a timing: how long to wait for four samples at most
    while len(sampler.samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.close()
    assert sampler.mean([(0.5, 3.5)]) == {"gpu": 20.0, "jpeg": 60.0}  # None: no sample there
    assert sampler.mean([(0.5, 1.5), (2.5, 4.5)])["gpu"] == pytest.approx((10 + 30 + 90) / 3)
    assert sampler.mean([(-2.0, 0.0)]) == {"gpu": None, "jpeg": None}


def test_the_driver_is_asked_for_cudas_device_by_its_visible_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa, GPU-bbb")
    assert usage.driver_names(1)[-1] == "GPU-bbb"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert usage.driver_names(1)[-1] == "1"


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has the driver")
def test_without_the_driver_there_is_no_sampler() -> None:
    assert usage.GpuSampler.open(0) is None


@pytest.mark.gpu
def test_on_the_device_nvml_sees_the_gpu_busy_then_idle() -> None:
    import torch

    device = torch.cuda.current_device()
    sampler = usage.GpuSampler.open(device)
    assert sampler is not None, "NVML did not open on a machine with a GPU"
    a = torch.randn(8192, 8192, device="cuda")
    start = time.monotonic()
    while time.monotonic() - start < 2.0:  # kernels back to back for two seconds
        a @ a
        torch.cuda.synchronize()
    end = time.monotonic()
    time.sleep(2.0)  # nothing queued: NVML's sample period is at most a second
    idle = (end + 1.2, time.monotonic())
    sampler.close()
    assert (sampler.mean([(start + 1.0, end)])["gpu"] or 0.0) > 50
    assert (sampler.mean([idle])["gpu"] or 0.0) < 50
