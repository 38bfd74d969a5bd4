"""fastload's batch stage against torchvision v2, per image and per batch, same run.

Two pipelines on a uint8 batch:

* ``jitter``: horizontal flip + ColorJitter(0.4, 0.4, 0.4, 0.1) + Normalize -> float32;
* ``crop+jitter``: RandomResizedCrop(224) from 256 x 256 images, then the same.

Three ways to run each:

* fastload.gpu on the whole batch, parameters drawn per sample;
* torchvision v2 applied image by image in a loop (the way to get per-sample randomness with
  torchvision today), then stacked;
* torchvision v2 on the whole batch (one draw for the whole batch: not the same augmentation).

Printed: median milliseconds per batch, fastload's speed-up over the per-image loop, and its
time relative to torchvision's whole-batch call (1.00 = as fast while drawing per sample).

Run: python benchmarks/gpu/gpu_augment.py [--device cpu|cuda] [--batch-size N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision.transforms.v2 as T

import fastload
from fastload import gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pipelines(crop: bool):
    jitter_ours = [
        gpu.RandomHorizontalFlip(),
        gpu.ColorJitter(0.4, 0.4, 0.4, 0.1),
        gpu.Normalize(MEAN, STD),
    ]
    jitter_tv = [
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.ToDtype(torch.float32, scale=True),
        T.Normalize(MEAN, STD),
    ]
    if crop:
        return (
            gpu.Compose([gpu.RandomResizedCrop(224), *jitter_ours]),
            T.Compose([T.RandomResizedCrop(224, antialias=True), *jitter_tv]),
        )
    return gpu.Compose(jitter_ours), T.Compose(jitter_tv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default, choices=["cpu", "cuda"])
    parser.add_argument("--batch-size", type=int, default=None, help="default: 256 cuda, 32 cpu")
    parser.add_argument("--repeats", type=int, default=None, help="default: 20 cuda, 5 cpu")
    results.add_argument(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    n = args.batch_size or (256 if device.type == "cuda" else 32)
    repeats = args.repeats or (20 if device.type == "cuda" else 5)
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}, device {device}, "
        f"batch {n}, median of {repeats}"
    )
    print(
        f"  {'pipeline':<12} {'fastload ms':>12} {'tv loop ms':>11} {'tv batch ms':>12} "
        f"{'x vs loop':>10} {'/ tv batch':>11}"
    )
    figures = []
    for crop in (False, True):
        side = 256 if crop else 224
        images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, device=device)
        ours, theirs = pipelines(crop)
        t_ours = timed(lambda: ours(images), device, repeats)  # noqa: B023
        t_loop = timed(lambda: torch.stack([theirs(im) for im in images]), device, repeats)  # noqa: B023
        t_batch = timed(lambda: theirs(images), device, repeats)  # noqa: B023
        name = "crop+jitter" if crop else "jitter"
        print(
            f"  {name:<12} {t_ours * 1e3:>12.1f} {t_loop * 1e3:>11.1f} {t_batch * 1e3:>12.1f} "
            f"{t_loop / t_ours:>10.2f} {t_ours / t_batch:>11.2f}"
        )
        loop = [n / t_loop]  # images/s, one median each
        figures += [
            results.row("torchvision v2, per image", loop, group=name),
            results.row("torchvision v2, one draw a batch", [n / t_batch], loop, group=name),
            results.row("fastload.gpu, per sample", [n / t_ours], loop, group=name),
        ]
    results.write(
        args.json,
        benchmark="gpu_augment",
        title=f"per-sample batch augmentation against torchvision v2, on {device}",
        baseline="torchvision v2, per image",
        rows=figures,
        settings={"batch_size": n, "repeats": repeats, "device": str(device)},
    )


if __name__ == "__main__":
    main()
