"""What delivering the batches to the GPU costs: one loader's images/s with its batches left on
the CPU against the same loader with ``device="cuda"``, pinned by copying (torch's pin-memory
thread, the default) and pinned in place (the workers' kept slots registered with CUDA,
``FASTLOAD_REGISTER_SLOTS=1``: :mod:`fastload.gpu.registered`).

The default photos as a ``fastload.ImageFolder``, the train recipe fused with decoding
(RandomResizedCrop 224, flip; uint8 batches of 64), one worker process per core; the loaders
stay up, their rounds interleaved (``results.loader_rates``). Ratios: each device row over the
CPU row, round by round (issue 73's target: >= 0.95x).

Without CUDA (``--device cpu``, to try the script) the device rows are left out.

Run: python benchmarks/gpu/delivery.py [--workers N] [--seconds 8] [--rounds 4] [--device cuda]
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
from fastload.gpu import registered
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def loader(
    data: str, args: argparse.Namespace, *, device: str | None, pinned_in_place: bool
) -> Any:
    """The loader; ``pinned_in_place`` registers its workers' slots (read when it is built)."""
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    before = os.environ.get(registered.ENV)
    os.environ[registered.ENV] = "1" if pinned_in_place else "0"
    try:
        made = fastload.DataLoader(
            fastload.ImageFolder(data, train),
            batch_size=args.batch_size,
            num_workers=args.workers,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed reading a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    results.add_argument(parser)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: --device cpu runs the CPU row alone")
    data = str(args.data or default_data())
    loaders = {"left on the CPU": loader(data, args, device=None, pinned_in_place=False)}
    if args.device == "cuda":
        loaders["cuda, pinned by copying"] = loader(
            data, args, device="cuda", pinned_in_place=False
        )
        loaders["cuda, pinned in place"] = loader(data, args, device="cuda", pinned_in_place=True)
    print(
        f"fastload {fastload.__version__}; {args.workers} workers, batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s; photos from {data}"
    )
    rates = results.loader_rates(
        loaders, rounds=args.rounds, seconds=args.seconds, warmup=2 * args.workers + 1
    )
    cpu = rates["left on the CPU"]
    rows = [results.row("left on the CPU", cpu)]
    for name, values in rates.items():
        print(f"{name:>24}: " + ", ".join(f"{v:8.1f}" for v in values) + " images/s")
        if name != "left on the CPU":
            print(f"{name} / left on the CPU: {results.spread(values, cpu)}")
            rows.append(results.row(name, values, cpu, target=0.95))
    results.write(
        args.json,
        benchmark="delivery",
        title="Delivery to the GPU against the batches left on the CPU",
        baseline="left on the CPU",
        rows=rows,
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "seconds", "rounds")}
        | {"data": data},
    )


if __name__ == "__main__":
    main()
