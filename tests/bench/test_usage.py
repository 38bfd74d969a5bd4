"""What each bench configuration used: the CPU of this process and its workers, the GPU as
nvidia-smi samples it (a stand-in nvidia-smi where there is no GPU)."""

from __future__ import annotations

import os
import stat
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


STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["--help-query-gpu"]:
    print('"utilization.gpu"\\nPercent of time a kernel ran.')
    if os.environ.get("JPEG"):
        print('"utilization.jpeg"\\nPercent of time the JPEG engines ran.')
    sys.exit(0)
for line in os.environ["LINES"].split(";"):
    print(line, flush=True)
"""


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in nvidia-smi on the PATH that prints ``$LINES`` and logs its arguments."""
    command = tmp_path / "bin" / "nvidia-smi"
    command.parent.mkdir()
    command.write_text(STAND_IN.format(python=sys.executable))
    command.chmod(command.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{command.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    return tmp_path / "calls"


def test_the_gpu_and_its_jpeg_engines_are_averaged_over_a_rounds_samples(
    nvidia_smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setenv("JPEG", "1")
    monkeypatch.setenv("LINES", "10, 50;20, [N/A];30, 70;90, 90")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb")
    clock = Ticks()

    def arrived() -> float:  # the samples arrive at 1, 2, 3 and 4
        clock.sleep(1.0)
        return clock.now

    sampler = usage.GpuSampler.open(1, clock=arrived)
    assert sampler is not None
    deadline = time.monotonic() + 60  # not a timing: how long to wait for four lines at most
    while len(sampler.samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.close()
    assert sampler.fields == ("gpu", "jpeg") and len(sampler.samples) == 4
    busy = sampler.mean([(0.5, 3.5)])
    assert busy == {"gpu": 20.0, "jpeg": 60.0}  # "[N/A]" is no sample of its engines
    assert sampler.mean([(5.0, 6.0)]) == {"gpu": None, "jpeg": None}
    query = json.loads(nvidia_smi.read_text().splitlines()[-1])
    assert "--query-gpu=utilization.gpu,utilization.jpeg" in query
    assert "--id=GPU-bbb" in query  # CUDA's device 1, as nvidia-smi names it


def test_without_nvidia_smi_there_is_no_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert usage.GpuSampler.open(0) is None


@pytest.mark.gpu
def test_on_the_device_nvidia_smi_sees_the_gpu_busy() -> None:
    import torch

    sampler = usage.GpuSampler.open(torch.cuda.current_device())
    assert sampler is not None, "no nvidia-smi on the PATH of a machine with a GPU"
    a = torch.randn(8192, 8192, device="cuda")
    start = time.monotonic()
    while time.monotonic() - start < 2.0:  # kernels back to back for two seconds
        a @ a
        torch.cuda.synchronize()
    end = time.monotonic()
    time.sleep(2.0)  # nothing queued: NVML's sample period is at most a second
    idle = (end + 1.2, time.monotonic())
    sampler.close()
    assert (sampler.mean([(start + 0.5, end)])["gpu"] or 0.0) > 50
    assert (sampler.mean([idle])["gpu"] or 0.0) < 50
