"""What delivering the batches to the GPU costs: one loader's images/s with its batches left on
the CPU against the same loader with ``device="cuda"``, pinned by copying (torch's pinning, the
default) and pinned in place (``FASTLOAD_PIN_IN_PLACE=1``, :mod:`fastload.gpu.registered`: the
worker processes' kept slots registered with CUDA, the worker threads' ring allocated pinned),
with worker processes and with worker threads (``--worker-types``).

The default photos as a ``fastload.ImageFolder``, the train recipe fused with decoding
(RandomResizedCrop 224, flip; uint8 batches of 64), one worker per core; a worker type's loaders
stay up, their rounds interleaved (``results.loader_rates``). Ratios: each device row over the
same workers' CPU row, round by round (issue 73's target: >= 0.95x).

Without CUDA (``--device cpu``, to try the script) the device rows are left out.

``--where SECONDS`` then takes the main process's time apart, each row alone for that long:
py-spy (``pip install py-spy``; without it the breakdown is left out, and the output says so)
samples every thread of this process, and each sample is filed under the deepest stage its
stack is in (receiving from the workers, making batches, pinning, the prefetcher's copies and
events, the batch ops, the slots' registration and return). Each thread's line is the share of
the wall time it was busy in each stage; what is left of 100 % it waited.

Run: python benchmarks/gpu/delivery.py [--workers N] [--seconds 8] [--rounds 4] [--device cuda]
     [--where 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

import fastload
from fastload import transforms as T
from fastload.autotune.rates import endless, read_rate
from fastload.gpu import registered
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def loader(
    data: str,
    args: argparse.Namespace,
    *,
    worker_type: str,
    device: str | None,
    pinned_in_place: bool,
) -> Any:
    """The loader; ``pinned_in_place`` makes its batches in pinned memory (read when it is
    built): the worker processes' slots registered, the worker threads' ring pinned."""
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    before = os.environ.get(registered.ENV)
    os.environ[registered.ENV] = "1" if pinned_in_place else "0"
    try:
        made = fastload.DataLoader(
            fastload.ImageFolder(data, train),
            batch_size=args.batch_size,
            num_workers=args.workers,
            worker_type=worker_type,
            shuffle=True,
            persistent_workers=True,
            device=device,
        )
        planned = made.plan  # the plan (and whether it registers) is made now, under the variable
        del planned
    finally:
        if before is None:
            os.environ.pop(registered.ENV, None)
        else:
            os.environ[registered.ENV] = before
    return made


SPY_HZ = 200  # py-spy's samples a second
# the deepest frame that matches decides a sample's stage: the batch ops called from the
# prefetcher are the batch ops', the shared memory opened while receiving is the receiving's
STAGES = (
    ("slots", ("fastload/gpu/registered.py", "fastload/memory/shared_buffers.py")),
    ("batch ops", ("fastload/gpu/stage.py", "fastload/gpu/functional.py")),
    ("pinning", ("pin_memory (", "fastload/memory/tensors.py")),
    ("making batches", ("fastload/datasets/", "fastload/backends/", "fastload/pixels/")),
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


def where_time_goes(stream: Any, seconds: float) -> dict[str, Counter[str]]:
    """Read ``stream`` for ``seconds`` while py-spy samples this process's threads."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "raw.txt"
        command = [str(py_spy()), "record", "--threads", "--nonblocking", "-r", str(SPY_HZ)]
        command += ["-f", "raw", "-o", str(out), "-p", str(os.getpid()), "-d", f"{seconds:g}"]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        read_rate(stream, seconds=seconds + 0.5)  # py-spy takes a moment to attach
        _, error = spy.communicate()
        if spy.returncode != 0 or not out.exists():
            raise SystemExit(f"py-spy could not sample this process: {error.decode()[-500:]}")
        return busy_shares(out.read_text(), seconds)


def print_where(name: str, shares: dict[str, Counter[str]]) -> None:
    print(f"where {name}'s main process spends its time:")
    for role, stages in sorted(shares.items()):
        parts = ", ".join(f"{stage} {share:.0%}" for stage, share in stages.most_common())
        print(f"  {role:>17}: busy {sum(stages.values()):.0%} ({parts})")


def worker_type_rows(data: str, args: argparse.Namespace, worker_type: str) -> list[dict]:
    """One worker type's rows: its loaders' rounds interleaved, each device row against the
    same workers' CPU row, then (``--where``) each one's process sampled."""
    ways = {"left on the CPU": (None, False)}
    if args.device == "cuda":
        ways |= {
            "cuda, pinned by copying": ("cuda", False),
            "cuda, pinned in place": ("cuda", True),
        }
    loaders = {
        name: loader(data, args, worker_type=worker_type, device=device, pinned_in_place=pinned)
        for name, (device, pinned) in ways.items()
    }
    rates = results.loader_rates(
        loaders, rounds=args.rounds, seconds=args.seconds, warmup=2 * args.workers + 1
    )
    group = {"process": "worker processes", "thread": "worker threads"}[worker_type]
    cpu, rows = rates["left on the CPU"], []
    for name, values in rates.items():
        print(f"{group}, {name:>24}: " + ", ".join(f"{v:8.1f}" for v in values) + " images/s")
        if name == "left on the CPU":
            rows.append(results.row(name, values, group=group))
        else:
            print(f"{group}, {name} / left on the CPU: {results.spread(values, cpu)}")
            rows.append(results.row(name, values, cpu, target=0.95, group=group))
    for row, (name, made) in zip(rows, loaders.items(), strict=True):
        if args.where:
            stream = endless(made)
            read_rate(stream, count=args.workers + 1)
            shares = where_time_goes(stream, args.where)
            stream.close()
            print_where(f"{group}, {name}", shares)
            row["busy"] = {
                role: {stage: round(share, 3) for stage, share in stages.items()}
                for role, stages in shares.items()
            }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed reading a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--worker-types", nargs="+", choices=("process", "thread"), default=["process", "thread"]
    )
    parser.add_argument(
        "--where", type=float, default=0, metavar="SECONDS", help="sample each row with py-spy"
    )
    results.add_argument(parser)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: --device cpu runs the CPU row alone")
    if args.where and py_spy() is None:  # the rates are still worth the run
        print("--where needs py-spy (pip install py-spy): the breakdown is left out")
        args.where = 0
    data = str(args.data or default_data())
    print(
        f"fastload {fastload.__version__}; {args.workers} workers, batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s; photos from {data}"
    )
    rows = []
    for worker_type in args.worker_types:
        rows += worker_type_rows(data, args, worker_type)
    results.write(
        args.json,
        benchmark="delivery",
        title="Delivery to the GPU against the batches left on the CPU",
        baseline="left on the CPU",
        rows=rows,
        settings={
            k: getattr(args, k)
            for k in ("workers", "worker_types", "batch_size", "seconds", "rounds", "where")
        }
        | {"data": data},
    )


if __name__ == "__main__":
    main()
