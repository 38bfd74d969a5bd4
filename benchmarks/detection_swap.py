"""torchvision's detection reference input, unchanged: torch's DataLoader against fastload's
``accelerate=True``.

The user's objects are the same in both, built as ``references/detection`` builds them with
``--use-v2`` (backend "pil"): ``wrap_dataset_for_transforms_v2(CocoDetection(...),
target_keys=...)``, the training set a ``Subset`` of the images with annotations, the preset's
v2 ops (hflip or multiscale, then ``ToImage``, ``ToDtype(float32, scale=True)``,
``ConvertBoundingBoxFormat(XYXY)``, ``SanitizeBoundingBoxes``, ``ToPureTensor``), and the
references' ``collate_fn`` (``tuple(zip(*batch))``). Both loaders deliver the same lists of
float32 images and target dicts; the rounds alternate between them.

The set is a COCO-like one made here (``fastload.synthetic.make_coco``: COCO's image sizes,
1-8 objects each, polygon masks), or ``--data FOLDER --annotations FILE`` for a real one.

Run: python benchmarks/detection_swap.py [--workers 2] [--batch-size 4] [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import results
import torch
import torchvision
import torchvision.transforms.v2 as T
from torchvision import tv_tensors

import fastload
from fastload.iteration import endless, read_rate
from fastload.synthetic import make_coco

MULTISCALE = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
PIPELINES = {  # name: (augmentation, masks)
    "multiscale": ("multiscale", False),
    "multiscale, masks": ("multiscale", True),
    "hflip, masks": ("hflip", True),
}


class Preset:
    """The references' ``DetectionPresetTrain`` shape: ``__call__`` hands on to a Compose."""

    def __init__(self, augmentation: str) -> None:
        ops: list[Any] = []
        if augmentation == "multiscale":
            ops.append(T.RandomShortestSize(min_size=MULTISCALE, max_size=1333))
        ops += [T.RandomHorizontalFlip(p=0.5), T.ToImage(), T.ToDtype(torch.float, scale=True)]
        ops += [T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY)]
        ops += [T.SanitizeBoundingBoxes(), T.ToPureTensor()]
        self.transforms = T.Compose(ops)

    def __call__(self, image: Any, target: Any) -> Any:
        return self.transforms(image, target)


def collate(batch: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*batch, strict=True))


def dataset(folder: Path, annotations: Path, augmentation: str, masks: bool) -> Any:
    keys = ["boxes", "labels", "image_id"] + (["masks"] if masks else [])
    coco = torchvision.datasets.CocoDetection(
        str(folder), str(annotations), transforms=Preset(augmentation)
    )
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(coco, target_keys=keys)
    kept = [i for i, image_id in enumerate(coco.ids) if coco.coco.getAnnIds(imgIds=image_id)]
    return torch.utils.data.Subset(wrapped, kept)


def measure(
    data: Any, *, workers: int, batch_size: int, seconds: float, rounds: int
) -> tuple[list[float], list[float], str]:
    """Images/s of the stock loader and the swapped one, round after round, alternating."""
    common = {
        "batch_size": batch_size,
        "shuffle": True,
        "num_workers": workers,
        "collate_fn": collate,
        "persistent_workers": workers > 0,
    }
    stock = torch.utils.data.DataLoader(data, **common)
    fast = fastload.DataLoader(data, accelerate=True, **common)
    explained = fastload.explain(fast)
    streams = {"stock": endless(stock), "fastload": endless(fast)}
    for stream in streams.values():  # warm up: workers started, first batches out
        for _ in range(3 * max(workers, 1)):
            next(stream)
    rates: dict[str, list[float]] = {"stock": [], "fastload": []}
    for _ in range(rounds):
        for name, stream in streams.items():
            reading = read_rate(stream, seconds=seconds)
            rates[name].append(reading.rate)
    return rates["stock"], rates["fastload"], explained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="an image folder (with --annotations); default: made here")
    parser.add_argument("--annotations", help="its COCO annotation file")
    parser.add_argument("--images", type=int, default=200, help="images in the set made here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="per loader per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    results.add_argument(parser)
    args = parser.parse_args()
    if (args.data is None) != (args.annotations is None):
        parser.error("--data and --annotations go together")
    with tempfile.TemporaryDirectory() as scratch:
        if args.data is None:
            folder, annotations = make_coco(Path(scratch) / "coco", images=args.images)
            where = f"a COCO-like set of {args.images} images made here"
        else:
            folder, annotations = Path(args.data), Path(args.annotations)
            where = str(folder)
        print(
            f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, "
            f"{args.rounds} interleaved rounds of {args.seconds:g} s; data: {where}"
        )
        figures = []
        for name in args.pipelines:
            augmentation, masks = PIPELINES[name]
            data = dataset(folder, annotations, augmentation, masks)
            stock, fast, explained = measure(
                data,
                workers=args.workers,
                batch_size=args.batch_size,
                seconds=args.seconds,
                rounds=args.rounds,
            )
            ratios = [f / s for f, s in zip(fast, stock, strict=True)]
            print(f"\n{name}\n{explained}")
            print(
                f"  stock {statistics.median(stock):,.0f} images/s, fastload "
                f"{statistics.median(fast):,.0f}: {statistics.median(ratios):.2f}x "
                f"({min(ratios):.2f}-{max(ratios):.2f})"
            )
            figures += [
                results.row("stock torchvision", stock, group=name),
                results.row("fastload, accelerate=True", fast, stock, group=name, target=1.5),
            ]
    results.write(
        args.json,
        benchmark="detection_swap",
        title=(
            f"torchvision's detection reference input, unchanged, with accelerate=True, "
            f"{args.workers} workers, batch {args.batch_size}"
        ),
        baseline="stock torchvision",
        rows=figures,
        settings={
            "workers": args.workers,
            "batch_size": args.batch_size,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "data": where,
        },
    )


if __name__ == "__main__":
    main()
