"""torchvision's reference classification recipes: torch's DataLoader against the swap.

The loaders are built the way ``references/classification/train.py`` (pytorch/vision) builds
them: the dataset is a ``torchvision.datasets.ImageFolder`` whose transform is a preset object
(a ``Compose`` held by an object whose ``__call__`` hands the image to it, as the reference's
``ClassificationPresetTrain`` / ``ClassificationPresetEval`` are); the train loader passes
``collate_fn=default_collate``, or the mixup/cutmix closure
(``mixup_cutmix(*default_collate(batch))``) when ``--mixup-alpha`` / ``--cutmix-alpha`` are given;
the val loader passes no ``collate_fn``. The presets here are this script's own, of that shape.

Each recipe is loaded by ``torch.utils.data.DataLoader`` (stock) and by
``fastload.DataLoader(..., accelerate=True)`` (swapped), with the same arguments. On the CPU the
swap runs torchvision's policies as written (Pillow, per image); for the recipes with a policy,
a third row ("on batches") runs them as the swap does with a CUDA device: drawn per sample in the
workers and applied to whole uint8 batches (``fastload.gpu.policies``), here in the workers.
Rounds are interleaved (the loaders alternate which goes first); each round starts fresh iterators,
reads past the batches prefetched while the workers started, then times ``--seconds`` of
batches. Each round's ratio is printed, then the median and the range.

Run: python benchmarks/peers/reference_recipes.py [--data DIR] [--workers 2] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.v2 as v2
from torch.utils.data import default_collate
from torchvision.transforms import autoaugment

import fastload
from fastload.accelerate import accelerate_dataset
from fastload.autotune.rates import endless, read_rate
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TrainPreset:
    """The reference train preset's shape: crop, flip, a policy, conversion, erasing."""

    def __init__(self, *, crop: int, policy: str | None = None, erase: float = 0.0) -> None:
        ops: list[Any] = [T.RandomResizedCrop(crop), T.RandomHorizontalFlip(0.5)]
        if policy == "ta_wide":
            ops.append(autoaugment.TrivialAugmentWide())
        elif policy == "ra":
            ops.append(autoaugment.RandAugment(magnitude=9))
        elif policy == "augmix":
            ops.append(autoaugment.AugMix(severity=3))
        ops += [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
        if erase > 0:
            ops.append(T.RandomErasing(p=erase))
        self.transforms = T.Compose(ops)

    def __call__(self, img: Any) -> Any:
        return self.transforms(img)


class EvalPreset:
    """The reference eval preset's shape: resize, center crop, conversion."""

    def __init__(self, *, crop: int, resize: int) -> None:
        self.transforms = T.Compose(
            [
                T.Resize(resize),
                T.CenterCrop(crop),
                T.PILToTensor(),
                T.ConvertImageDtype(torch.float),
                T.Normalize(MEAN, STD),
            ]
        )

    def __call__(self, img: Any) -> Any:
        return self.transforms(img)


def mixup_cutmix_collate(num_classes: int) -> Callable[[list[Any]], Any]:
    """The reference train loader's collate with mixup and cutmix (``--use-v2 --mixup-alpha 0.2
    --cutmix-alpha 1.0``): a closure, as train.py writes it."""
    mixup_cutmix = v2.RandomChoice(
        [
            v2.MixUp(alpha=0.2, num_classes=num_classes),
            v2.CutMix(alpha=1.0, num_classes=num_classes),
        ]
    )

    def collate_fn(batch: list[Any]) -> Any:
        return mixup_cutmix(*default_collate(batch))

    return collate_fn


def recipes(crop: int) -> dict[str, Callable[[str], tuple[Any, dict[str, Any]]]]:
    """Each recipe: the dataset and the loader arguments that train.py would give."""

    def train(policy: str | None = None, erase: float = 0.0, mixup: bool = False):
        def make(root: str) -> tuple[Any, dict[str, Any]]:
            dataset = torchvision.datasets.ImageFolder(
                root, TrainPreset(crop=crop, policy=policy, erase=erase)
            )
            collate = mixup_cutmix_collate(len(dataset.classes)) if mixup else default_collate
            return dataset, {"shuffle": True, "collate_fn": collate}

        return make

    def val(root: str) -> tuple[Any, dict[str, Any]]:
        dataset = torchvision.datasets.ImageFolder(
            root, EvalPreset(crop=crop, resize=crop * 8 // 7)
        )
        return dataset, {"shuffle": False}

    return {
        "train": train(),
        "val": val,
        "ta_wide": train("ta_wide"),
        "ra": train("ra", erase=0.1),
        "augmix": train("augmix"),
        "mixup+cutmix": train(mixup=True),
    }


def on_batches(dataset: Any, common: dict[str, Any]) -> Any:
    """The swap as it runs with a CUDA device: the policies drawn per sample, applied on
    batches (here in the workers); ``None`` for a recipe without a policy."""
    if common.get("collate_fn", default_collate) is not default_collate:
        return None
    fast, translated = accelerate_dataset(dataset, policies=True)
    if not translated.drawn or translated.rest:
        return None
    return fastload.DataLoader(
        fast, batch_transforms=translated.batch_ops, seeding="worker", **common
    )


def measure(loader: Any, *, seconds: float, workers: int) -> float:
    """Images per second over ``seconds``, after the batches prefetched at startup."""
    batches = endless(loader)
    for _ in range(max(1, workers) * 2 + 1):  # startup, and what was prefetched meanwhile
        next(batches)
    rate = read_rate(batches, seconds=seconds).rate
    batches.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument(
        "--seconds", type=float, default=8.0, help="timed reading per loader and round"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--recipes", nargs="+", default=list(recipes(224)))
    results.add_argument(parser)
    args = parser.parse_args()
    data = str(args.data or default_data())
    made = recipes(args.crop)
    unknown = sorted(set(args.recipes) - set(made))
    if unknown:
        parser.error(f"unknown recipes {unknown}; valid: {', '.join(made)}")
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, crop "
        f"{args.crop}, {args.rounds} interleaved rounds of {args.seconds:g} s; data: {data}"
    )
    ratios: dict[str, list[float]] = {name: [] for name in args.recipes}
    batched: dict[str, list[float]] = {}
    rates: dict[str, dict[str, list[float]]] = {name: {} for name in args.recipes}
    started = time.perf_counter()
    for r in range(args.rounds):
        for name in args.recipes:
            dataset, kwargs = made[name](data)
            common = {"batch_size": args.batch_size, "num_workers": args.workers, **kwargs}
            loaders = {
                "stock": torch.utils.data.DataLoader(dataset, **common),
                "swapped": fastload.DataLoader(dataset, accelerate=True, **common),
            }
            batches = on_batches(dataset, common)
            if batches is not None:
                loaders["on batches"] = batches
            order = list(loaders) if r % 2 == 0 else list(reversed(loaders))
            rate = {
                k: measure(loaders[k], seconds=args.seconds, workers=args.workers) for k in order
            }
            ratios[name].append(rate["swapped"] / rate["stock"])
            for k, value in rate.items():
                rates[name].setdefault(k, []).append(value)
            part = "in part" if loaders["swapped"].acceleration.rest else "whole"
            line = (
                f"round {r + 1} {name:>13}: stock {rate['stock']:7.1f} img/s, swapped "
                f"{rate['swapped']:7.1f} img/s ({part}): {ratios[name][-1]:.2f}x"
            )
            if batches is not None:
                batched.setdefault(name, []).append(rate["on batches"] / rate["stock"])
                line += f"; on batches {rate['on batches']:7.1f} img/s: {batched[name][-1]:.2f}x"
            print(line, flush=True)
    print(f"\n{'recipe':>13}  median  range (x stock, {args.rounds} rounds)")
    for name, values in ratios.items():
        print(f"{name:>13}  {statistics.median(values):5.2f}x  {min(values):.2f}-{max(values):.2f}")
    for name, values in batched.items():
        print(
            f"{name:>13}  {statistics.median(values):5.2f}x  {min(values):.2f}-{max(values):.2f}"
            "  (policies on batches, in the workers)"
        )
    print(f"({time.perf_counter() - started:.0f} s)")
    results.write(
        args.json,
        benchmark="reference_recipes",
        title="torchvision's reference recipes: torch's DataLoader against the swap",
        baseline="stock",
        rows=[
            results.row(k, r, None if k == "stock" else kinds["stock"], group=name)
            for name, kinds in rates.items()
            for k, r in kinds.items()
        ],
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "crop", "seconds")}
        | {"rounds": args.rounds, "data": data},
    )


if __name__ == "__main__":
    main()
