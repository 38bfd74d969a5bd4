"""Run a script as the ranks of a torch.distributed job, the way torchrun sets them up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    script: Path,
    args: Callable[[int], list[str]],
    *,
    world: int = 2,
    timeout: float = 240,
    status: int = 0,
) -> list[str]:
    """Start ``world`` processes of ``script`` (RANK, LOCAL_RANK, WORLD_SIZE, a free port);
    assert that each one exits with ``status``, showing its stderr if not.

    Returns:
        Each rank's stderr.
    """
    env = {
        **os.environ,
        "PYTHONFAULTHANDLER": "1",  # a rank stopped with SIGABRT prints every thread's stack
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": str(world),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args(rank)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    errs = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(_stuck(procs, timeout)) from None
        assert proc.returncode == status, err
        errs.append(err)
    return errs


def _stuck(procs: list[subprocess.Popen], timeout: float) -> str:
    """Stop ranks that ran past ``timeout`` and say where each one was."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints the stacks, then it dies
    report = [f"the ranks ran past {timeout:.0f} s; where each one was:"]
    for rank, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        report.append(f"--- rank {rank} (exit {proc.returncode}):\n{(err or '')[-6000:]}")
    return "\n".join(report)
