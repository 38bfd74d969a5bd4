"""The same model trained by the stock recipe and by fastload's, side by side in one run.

* stock: ``torchvision.datasets.ImageFolder`` + RandomResizedCrop + RandomHorizontalFlip +
  ToTensor + Normalize, torch's DataLoader (pinned memory on a GPU), and a plain fp32 loop
  (zero_grad, forward, loss, backward, AdamW step);
* fastload: ``fastload.ImageFolder`` with the crop fused into decoding, ``fastload.DataLoader``
  delivering on the device with the flip and normalize there, and ``fastload.train.Trainer``
  (AMP as ``--precision``, fused AdamW on CUDA, channels-last).

Both see the same data with the same worker count and batch size; rounds alternate between them
and the median images/s of each is compared.

Run: python benchmarks/training/train_side_by_side.py [--data DIR] [--arch resnet50] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torchvision
import torchvision.transforms as TV

import fastload
from fastload import gpu, train
from fastload import transforms as T
from fastload.autotune.rates import endless
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--precision", default="auto", choices=train.PRECISIONS)
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    results.add_argument(parser)
    args = parser.parse_args()
    root = args.data or default_data()
    device = torch.device(args.device)
    size = args.image_size

    stock_set = torchvision.datasets.ImageFolder(
        root,
        transform=TV.Compose(
            [TV.RandomResizedCrop(size), TV.RandomHorizontalFlip(), TV.ToTensor(),
             TV.Normalize(MEAN, STD)]
        ),
    )  # fmt: skip
    classes = len(stock_set.classes)

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torchvision.models.get_model(args.arch, num_classes=classes).to(device)

    stock_model = model()
    stock_opt = torch.optim.AdamW(stock_model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    stock_batches = endless(
        torch.utils.data.DataLoader(
            stock_set,
            batch_size=args.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=args.workers,
            persistent_workers=args.workers > 0,
            pin_memory=device.type == "cuda",
        )
    )

    def stock_step() -> int:
        x, y = next(stock_batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        stock_opt.zero_grad(set_to_none=True)
        loss = loss_fn(stock_model(x), y)
        loss.backward()
        stock_opt.step()
        return len(y)

    ours = model()
    trainer = train.Trainer(
        ours,
        train.adamw(ours, 1e-4, weight_decay=0.0),
        precision=args.precision,
        channels_last=True,
        progress=False,
    )
    fast_batches = endless(
        fastload.DataLoader(
            fastload.ImageFolder(root, transform=T.RandomResizedCrop(size)),
            batch_size=args.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=args.workers,
            persistent_workers=args.workers > 0,
            device=device,
            channels_last=True,
            batch_transforms=gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize(MEAN, STD)]),
        )
    )

    def fastload_round() -> float:
        # one Trainer epoch over `steps` batches, streamed from the loader: the loop as users run it
        start = time.perf_counter()
        stats = trainer.train_epoch(_take(fast_batches, args.steps))
        _sync(device)
        return stats.images / (time.perf_counter() - start)

    def stock_round() -> float:
        start, seen = time.perf_counter(), 0
        for _ in range(args.steps):
            seen += stock_step()
        _sync(device)
        return seen / (time.perf_counter() - start)

    rounds: dict[str, Callable[[], float]] = {"stock": stock_round, "fastload": fastload_round}
    for run in rounds.values():
        run()  # warm-up: workers, cudnn autotuning, allocator
    rates: dict[str, list[float]] = {name: [] for name in rounds}
    for _ in range(args.rounds):
        for name, run in rounds.items():
            rates[name].append(run())
    a, b = statistics.median(rates["stock"]), statistics.median(rates["fastload"])
    print(
        f"{args.arch} on {device}, batch {args.batch_size}, {args.workers} workers, images "
        f"{size}px, fastload precision {trainer.precision.name} ({trainer.precision.reason}); "
        f"medians of {args.rounds} "
        f"rounds of {args.steps} steps"
    )
    print(f"  stock torchvision loader + fp32 loop   {a:8.1f} images/s")
    print(f"  fastload loader + Trainer              {b:8.1f} images/s")
    print(f"  ratio: {b / a:.2f}x")
    results.write(
        args.json,
        benchmark="train_side_by_side",
        title=f"{args.arch} training: stock loader + fp32 loop against fastload + Trainer",
        baseline="stock",
        rows=[
            results.row("stock", rates["stock"], group=str(device)),
            results.row("fastload", rates["fastload"], rates["stock"], group=str(device)),
        ],
        settings={k: getattr(args, k) for k in ("arch", "batch_size", "workers", "steps")}
        | {"rounds": args.rounds, "precision": trainer.precision.name, "image_size": size},
    )


def _take(batches: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        yield next(batches)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
