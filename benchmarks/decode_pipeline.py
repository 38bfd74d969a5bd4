"""fastload's CPU backends against the stock torchvision input pipeline, same data, same run.

Each pipeline is measured up to what it hands to the device:

* stock torchvision: ``torchvision.datasets.ImageFolder`` + transforms + ToTensor + Normalize
  through ``torch.utils.data.DataLoader``: float32 normalized batches;
* fastload: ``fastload.ImageFolder(root, transform=..., backend=B)`` through
  ``fastload.DataLoader``: uint8 N x 3 x 224 x 224 batches (flip and normalize run on the
  device, in fastload's batch stage).

Pipelines: ``train`` (RandomResizedCrop(224) [+ RandomHorizontalFlip for stock]) and ``val``
(Resize(256) + CenterCrop(224)). Every configuration keeps its workers alive across rounds; the
rounds are interleaved, each reads a fixed number of batches after a warm-up, and the table shows
the median images/s and its ratio to stock.

Run: python benchmarks/decode_pipeline.py [--data DIR] [--workers 2] [--rounds 5]
Without --data, 1000 synthetic ImageNet-like JPEGs are made in a temporary folder (real photos
are better: point --data at any class-folder set of JPEGs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torchvision
import torchvision.transforms as T

import fastload
from fastload import transforms as fl
from fastload._optional import check
from fastload.synthetic import make_image_folder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def stock(root: Path, pipeline: str) -> torch.utils.data.Dataset:
    if pipeline == "train":
        ops = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    else:
        ops = [T.Resize(256), T.CenterCrop(224)]
    return torchvision.datasets.ImageFolder(
        root, transform=T.Compose([*ops, T.ToTensor(), T.Normalize(MEAN, STD)])
    )


def ours(root: Path, pipeline: str, backend: str) -> torch.utils.data.Dataset:
    if pipeline == "train":
        transform = fl.RandomResizedCrop(224)
    else:
        transform = fl.Compose([fl.Resize(256), fl.CenterCrop(224)])
    return fastload.ImageFolder(root, transform=transform, backend=backend)


def endless(loader: torch.utils.data.DataLoader) -> Iterator[torch.Tensor]:
    while True:
        for images, _ in loader:
            yield images


def measure(batches: Iterator[torch.Tensor], count: int) -> float:
    start = time.perf_counter()
    seen = 0
    for _ in range(count):
        seen += len(next(batches))
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="a class-folder image set (default: synthetic)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=20, help="batches per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pipelines", nargs="+", default=["train", "val"])
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()

    tmp = None
    root = args.data
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="fastload-bench-")
        root = make_image_folder(Path(tmp.name), images=1000)
    for path in root.rglob("*"):  # read every file once: compare decoders, not the disk
        if path.is_file():
            path.read_bytes()

    names = [n for n in ("pillow", "opencv", "turbojpeg") if check(n).usable]
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, "
        f"{args.rounds} rounds of {args.batches} batches; data: {root}"
    )
    results = []
    for pipeline in args.pipelines:
        configs = {"stock torchvision": stock(root, pipeline)}
        for name in names:
            configs[f"fastload {name}"] = ours(root, pipeline, name)
        iterators = {}
        for label, ds in configs.items():
            loader_cls = (
                torch.utils.data.DataLoader if label.startswith("stock") else fastload.DataLoader
            )
            loader = loader_cls(
                ds,
                batch_size=args.batch_size,
                shuffle=True,
                num_workers=args.workers,
                persistent_workers=args.workers > 0,
                drop_last=True,
            )
            iterators[label] = endless(loader)
            measure(iterators[label], 3)  # warm-up: workers started, caches filled
        rates: dict[str, list[float]] = {label: [] for label in configs}
        for _ in range(args.rounds):
            for label, batches in iterators.items():
                rates[label].append(measure(batches, args.batches))
        base = statistics.median(rates["stock torchvision"])
        print(f"\n{pipeline} pipeline")
        print(f"  {'pipeline':<22} {'images/s':>9} {'x stock':>8}")
        for label, values in rates.items():
            rate = statistics.median(values)
            print(f"  {label:<22} {rate:>9.0f} {rate / base:>8.2f}")
            results.append(
                {
                    "pipeline": pipeline,
                    "loader": label,
                    "images_per_sec": rate,
                    "ratio_to_stock": rate / base,
                }
            )
    if args.json:
        print(json.dumps({"results": results}, indent=2))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
