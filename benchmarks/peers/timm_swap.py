"""timm's own training input: ``timm.data.create_loader`` with torch's DataLoader against the
same call with fastload's (``fastload.integrations.timm.create_loader``).

Both loaders are what timm's ``train.py`` builds: ``create_dataset("", root=...)`` (timm's
``ImageDataset`` over the folder), then ``create_loader`` with ``fast_collate`` and timm's
``PrefetchLoader``, which turns the uint8 batches into normalized float32 (and, in the train
recipe, erases) on ``--device``: on a machine without a GPU that is the main process's CPU, for
both. The recipes:

- ``train``: ``auto_augment="rand-m7-mstd0.5"``, ``re_prob=0.25``, ``interpolation="random"``
  (train.py's default), the rest timm's defaults (flip, ColorJitter 0.4);
- ``basic``: timm's train defaults alone (``interpolation="random"``, flip, ColorJitter 0.4);
- ``val``: timm's eval transform (Resize, CenterCrop at crop_pct 0.875).

Rounds are interleaved (``results.loader_rates``): each loader is started once, warmed, then read
for ``--seconds`` a round, in turn.

Run: python benchmarks/peers/timm_swap.py [--data DIR] [--workers 2] [--rounds 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import timm
import timm.data
import torch

import fastload
from fastload.integrations import timm as swap
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

RECIPES: dict[str, dict[str, Any]] = {
    "train": {
        "is_training": True,
        "auto_augment": "rand-m7-mstd0.5",
        "re_prob": 0.25,
        "interpolation": "random",
    },
    "basic": {"is_training": True, "interpolation": "random"},
    "val": {"is_training": False},
}


def loaders(data: str, recipe: str, *, workers: int, batch_size: int, size: int) -> dict[str, Any]:
    """timm's loader and the swap's, built with the same arguments on the same dataset."""
    made = {}
    for name, create in (("timm", timm.data.create_loader), ("fastload", swap.create_loader)):
        dataset = timm.data.create_dataset("", root=data, is_training=recipe != "val")
        made[name] = create(
            dataset,
            input_size=(3, size, size),
            batch_size=batch_size,
            num_workers=workers,
            device=torch.device("cpu"),
            **RECIPES[recipe],
        )
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed reading a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    results.add_argument(parser)
    args = parser.parse_args()
    data = str(args.data or default_data())
    print(
        f"fastload {fastload.__version__}, timm {timm.__version__}, torch {torch.__version__}; "
        f"{args.workers} workers, batch {args.batch_size}, size {args.size}, {args.rounds} "
        f"interleaved rounds of {args.seconds:g} s; data: {data}"
    )
    started, rows = time.perf_counter(), []
    for recipe in args.recipes:
        made = loaders(
            data, recipe, workers=args.workers, batch_size=args.batch_size, size=args.size
        )
        print(f"{recipe}: {fastload.explain(made['fastload'].loader)}".splitlines()[0])
        rates = results.loader_rates(
            made, rounds=args.rounds, seconds=args.seconds, warmup=2 * args.workers + 1
        )
        for name, values in rates.items():
            print(f"  {name:>8}: " + ", ".join(f"{v:7.1f}" for v in values) + " images/s")
        print(f"  fastload / timm: {results.spread(rates['fastload'], rates['timm'])}")
        rows += [
            results.row("timm", rates["timm"], group=recipe),
            results.row("fastload", rates["fastload"], rates["timm"], group=recipe, target=2.0),
        ]
    print(f"({time.perf_counter() - started:.0f} s)")
    results.write(
        args.json,
        benchmark="timm_swap",
        title="timm's create_loader: torch's DataLoader against fastload's",
        baseline="timm",
        rows=rows,
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "size", "seconds")}
        | {"rounds": args.rounds, "data": data},
    )


if __name__ == "__main__":
    main()
