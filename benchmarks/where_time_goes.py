"""Where a loader's process spends its time, a thread at a time: py-spy samples every thread of
this process while a stream of batches is read, and each sample is filed under the deepest stage
its stack is in (receiving from the workers, making batches, pinning, the prefetcher's copies
and events, the batch ops, the slots' registration and return). Each thread's figure is the
share of the wall time it was busy in a stage (py-spy leaves idle samples out); what is left of
100 % it waited.

Used by ``benchmarks/gpu/delivery.py`` and ``benchmarks/peers/detection_swap.py`` (``--where``).
py-spy: ``pip install py-spy`` (the dev extra has it; the GPU check carries its wheel).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from fastload.autotune.rates import read_rate

SPY_HZ = 200  # py-spy's samples a second
# the deepest frame that matches decides a sample's stage: the batch ops called from the
# prefetcher are the batch ops', the shared memory opened while receiving is the receiving's
STAGES = (
    ("slots", ("fastload/gpu/registered.py", "fastload/memory/shared_buffers.py")),
    ("batch ops", ("fastload/gpu/stage.py", "fastload/gpu/functional.py")),
    ("pinning", ("pin_memory (", "pin (fastload/memory/", "pin_batch (fastload/memory/")),
    (
        "making batches",
        (
            "fastload/datasets/",
            "fastload/backends/",
            "fastload/pixels/",
            "fastload/detection/",
            "fastload/transforms/",
            "torchvision/transforms/",
        ),
    ),
    ("copies, events", ("fastload/gpu/prefetch.py",)),
    ("receiving", ("_try_get_data", "_get_data", "multiprocessing/", "reductions.py")),
)


def stage_of(frames: list[str]) -> str:
    """The stage of one sample's stack (root first), by its deepest matching frame."""
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return "other"


def thread_of(first: str) -> str:
    """py-spy's thread frame (``thread (ID): NAME``) as a role."""
    if "_pin_memory_loop" in first:
        return "pin-memory thread"
    if "fastload-worker" in first:
        return "worker threads"
    return "main thread" if first.endswith("MainThread") else "other threads"


def busy_shares(raw: str, seconds: float) -> dict[str, Counter[str]]:
    """py-spy's raw output (``frame;frame;... count`` lines, the thread first) as each thread
    role's share of the wall time spent in each stage."""
    shares: dict[str, Counter[str]] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        first, *frames = stack.split(";")
        share = int(count) / (SPY_HZ * seconds)
        shares.setdefault(thread_of(first), Counter())[stage_of(frames)] += share
    return shares


def py_spy() -> str | None:
    """py-spy's program: on the PATH, or beside this interpreter (a venv not activated)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def sample(stream: Any, seconds: float) -> dict[str, Counter[str]]:
    """Read ``stream`` while py-spy samples this process's threads for ``seconds`` (rounded up
    to whole seconds, as py-spy takes them); the stream is read until py-spy is done."""
    whole = max(1, math.ceil(seconds))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "raw.txt"
        command = [str(py_spy()), "record", "--threads", "--nonblocking", "-r", str(SPY_HZ)]
        command += ["-f", "raw", "-o", str(out), "-p", str(os.getpid()), "-d", str(whole)]
        said = Path(folder) / "stderr.txt"
        with said.open("wb") as errors:  # a file: a pipe left unread could stop py-spy
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
            while spy.poll() is None:
                read_rate(stream, count=1)
        if spy.returncode != 0 or not out.exists():
            error = said.read_text(errors="replace")[-500:]
            raise SystemExit(f"py-spy could not sample this process: {error}")
        return busy_shares(out.read_text(), whole)


def show(name: str, shares: dict[str, Counter[str]]) -> None:
    print(f"where {name}'s main process spends its time:")
    for role, stages in sorted(shares.items()):
        parts = ", ".join(f"{stage} {share:.0%}" for stage, share in stages.most_common())
        print(f"  {role:>17}: busy {sum(stages.values()):.0%} ({parts})")


def as_json(shares: dict[str, Counter[str]]) -> dict[str, dict[str, float]]:
    """The shares for a result row's ``busy``: role -> stage -> share, rounded."""
    return {
        role: {stage: round(share, 3) for stage, share in stages.items()}
        for role, stages in shares.items()
    }
