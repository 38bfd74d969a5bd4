"""fastload's CPU backends against the stock torchvision pipeline, same data, same run.

The measuring is ``fastload.bench.run`` (also behind ``fastload bench``); this script runs both
pipelines with more rounds, for the README's table. See ``fastload/bench.py`` for what each
pipeline includes.

Run: python benchmarks/decoding/decode_pipeline.py [--data DIR] [--workers 2] [--seconds 60]
    [--backends region turbojpeg ...]
Without --data, the cached ImageNet-like default set is used (made on first use); real photos
are better: point --data at any class-folder set of JPEGs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torchvision

import fastload
from fastload import backends
from fastload.bench import STOCK, format_table, run
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring time per pipeline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pipelines", nargs="+", default=["train", "val"])
    parser.add_argument(
        "--backends", nargs="+", help="per-sample backends to measure (default: all usable)"
    )
    results.add_argument(parser)
    args = parser.parse_args()
    names = args.backends or [n for n in backends.names("decoder") if backends.check(n).usable]
    data = args.data or default_data()
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds; data: {data}"
    )
    figures = []
    for pipeline in args.pipelines:
        rows = run(
            data,
            names=tuple(names),
            pipeline=pipeline,
            batch_size=args.batch_size,
            num_workers=args.workers,
            seconds=args.seconds,
            rounds=args.rounds,
        )
        print(f"\n{pipeline} pipeline")
        print("\n".join(format_table(rows)))
        figures += results.from_bench(rows, group=pipeline)
    results.write(
        args.json,
        benchmark="decode_pipeline",
        title=f"fastload's CPU backends against stock torchvision, {args.workers} workers",
        baseline=STOCK,
        rows=figures,
        settings={
            "workers": args.workers,
            "batch_size": args.batch_size,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "data": str(data),
        },
    )


if __name__ == "__main__":
    main()
