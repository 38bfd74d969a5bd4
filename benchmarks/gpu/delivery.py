"""What delivering the batches to the GPU costs: one loader's images/s with its batches left on
the CPU against the same loader with ``device="cuda"``, pinned by copying (torch's pinning, the
default) and pinned in place (``FASTLOAD_PIN_IN_PLACE=1``, :mod:`fastload.gpu.registered`: the
worker processes' kept slots registered with CUDA, the worker threads' ring allocated pinned),
with worker processes and with worker threads (``--worker-types``).

The default photos as a ``fastload.ImageFolder``, the train recipe fused with decoding
(RandomResizedCrop 224, flip; uint8 batches of 64), one worker per core; a worker type's loaders
stay up, their rounds interleaved (``results.loader_rates``). Ratios: each device row over the
same workers' CPU row, round by round (issue 73's target: >= 0.95x). Each row also gives the
cores its process and worker processes used in its rounds (each round started once the rows
before it are idle, as ``fastload bench`` measures them): what pinning by copying costs the
CPU beside pinning in place.

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
import sys
from pathlib import Path
from typing import Any

import torch

import fastload
from fastload import transforms as T
from fastload.autotune.rates import endless, read_rate
from fastload.bench.usage import Spent
from fastload.gpu import registered
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results
import where_time_goes


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
    spent = {name: Spent() for name in loaders}
    rates = results.loader_rates(
        loaders,
        rounds=args.rounds,
        seconds=args.seconds,
        warmup=2 * args.workers + 1,
        spent=spent,
    )
    group = {"process": "worker processes", "thread": "worker threads"}[worker_type]
    cpu, rows = rates["left on the CPU"], []
    for name, values in rates.items():
        cores = spent[name].cores
        used = f", on {cores:.1f} cores" if cores is not None else ""
        each = ", ".join(f"{v:8.1f}" for v in values)
        print(f"{group}, {name:>24}: {each} images/s{used}")
        if name == "left on the CPU":
            rows.append(results.row(name, values, group=group))
        else:
            print(f"{group}, {name} / left on the CPU: {results.spread(values, cpu)}")
            rows.append(results.row(name, values, cpu, target=0.95, group=group))
        rows[-1]["cores"] = None if cores is None else round(cores, 2)
    for row, (name, made) in zip(rows, loaders.items(), strict=True):
        if args.where:
            stream = endless(made)
            read_rate(stream, count=args.workers + 1)
            shares = where_time_goes.sample(stream, args.where)
            stream.close()
            where_time_goes.show(f"{group}, {name}", shares)
            row["busy"] = where_time_goes.as_json(shares)
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
    if args.where and where_time_goes.py_spy() is None:  # the rates are still worth the run
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
