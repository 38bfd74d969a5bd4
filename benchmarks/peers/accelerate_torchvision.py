"""An unchanged torchvision pipeline: torch's DataLoader against fastload's ``accelerate=True``.

The user's objects are the same in both: ``torchvision.datasets.ImageFolder`` with the standard
train recipe (RandomResizedCrop 224, RandomHorizontalFlip, ToTensor, Normalize) or val recipe
(Resize 256, CenterCrop 224, ToTensor, Normalize), passed to ``torch.utils.data.DataLoader`` and
to ``fastload.DataLoader(..., accelerate=True)`` with the same workers and batch size; both
deliver the same float32 batches (on the device with ``--device cuda``). The hand-written
fastload pipeline (``fastload.ImageFolder`` + fused geometry, uint8 batches, no flip or
normalize) is measured in the same rounds for reference: it is the ceiling of what accelerating
can reach, less the cost of delivering float32.

Run: python benchmarks/peers/accelerate_torchvision.py [--data DIR] [--workers 2] [--seconds 60]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torchvision

import fastload
from fastload.bench import STOCK, format_table, run
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring time per pipeline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default="turbojpeg", help="the hand-written reference row")
    parser.add_argument("--pipelines", nargs="+", default=["train", "val"])
    results.add_argument(parser)
    args = parser.parse_args()
    data = args.data or default_data()
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds, device {args.device}; data: {data}"
    )
    figures = []
    for pipeline in args.pipelines:
        rows = run(
            data,
            names=(args.backend,),
            pipeline=pipeline,
            batch_size=args.batch_size,
            num_workers=args.workers,
            device=args.device,
            seconds=args.seconds,
            rounds=args.rounds,
            accelerated=True,
        )
        print(f"\n{pipeline} pipeline")
        print("\n".join(format_table(rows)))
        accelerated, hand = rows[1], rows[2]
        if accelerated.images_per_sec and hand.images_per_sec:
            share = accelerated.images_per_sec / hand.images_per_sec
            print(f"  accelerated / hand-written fastload: {share:.2f}")
        figures += results.from_bench(rows, group=pipeline)
    results.write(
        args.json,
        benchmark="accelerate_torchvision",
        title=f"an unchanged torchvision pipeline with accelerate=True, {args.workers} workers",
        baseline=STOCK,
        rows=figures,
        settings={
            "workers": args.workers,
            "batch_size": args.batch_size,
            "device": args.device,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "data": str(data),
        },
    )


if __name__ == "__main__":
    main()
