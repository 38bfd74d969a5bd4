"""What float32 batch ops after ``Normalize`` cost the loader, against ``Normalize`` alone.

``fastload.ImageShards`` over a pack of the photos at ``--max-side`` with raw pixels (the
fastest sample path, so that what the batch ops cost shows), ``RandomResizedCrop(224) +
RandomHorizontalFlip`` fused with reading, ``N`` worker processes, batch 64, and as
``batch_transforms``:

* ``Normalize`` (the baseline): the uint8 batch into float32 by fastload's compiled kernel;
* ``Normalize, channels_last``: the same, delivered with ``channels_last=True``;
* ``Normalize + MixUp``, ``Normalize + CutMix``, ``Normalize + RandomErasing``: an op after the
  normalize that makes a new float32 batch (fastload's own ops, one draw per sample).

Each op after the normalize writes its batch into the workers' kept shared memory; made anew,
a 38.5 MB float32 batch faulted in fresh pages and was copied into shared memory again at the
send, and these rows ran at 0.2-0.35x the baseline. Rounds are interleaved; each row's ratio
to the baseline is per round, then the median and the range.

Run: python benchmarks/loader/float_ops.py [--data DIR] [--pack DIR] [--workers 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import fastload
from fastload import gpu
from fastload import transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASELINE = "Normalize"


def pipelines(classes: int) -> dict[str, tuple[Any, bool]]:
    """Each row's batch ops and whether it asks for channels_last."""
    normalize = gpu.Normalize(MEAN, STD)
    return {
        BASELINE: (normalize, False),
        "Normalize, channels_last": (normalize, True),
        "Normalize + MixUp": (gpu.Compose([normalize, gpu.MixUp(0.2, num_classes=classes)]), False),
        "Normalize + CutMix": (
            gpu.Compose([normalize, gpu.CutMix(1.0, num_classes=classes)]),
            False,
        ),
        "Normalize + RandomErasing": (gpu.Compose([normalize, gpu.RandomErasing(0.25)]), False),
    }


def loader(pack: Path, ops: Any, channels_last: bool, args: argparse.Namespace) -> Any:
    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageShards(pack, geometry)
    return fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=fastload.ShardSampler(dataset),
        num_workers=args.workers,
        drop_last=True,
        batch_transforms=ops,
        channels_last=channels_last,
        persistent_workers=True,
    )


def packed(args: argparse.Namespace) -> Path:
    """The pack the rows read: ``--pack`` when it holds one, else made there (or in a
    temporary folder) from ``--data`` (or a made-up set)."""
    out = Path(args.pack) if args.pack else Path(tempfile.mkdtemp(prefix="fastload-ops-"))
    if (out / "manifest.json").exists():
        return out
    data = Path(args.data) if args.data else None
    if data is None:
        from fastload.synthetic import make_image_folder

        data = make_image_folder(out.parent / f"{out.name}-photos", images=args.images, classes=10)
    fastload.pack(data, out, max_side=args.max_side, pixels="raw", progress=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder photo set (default: made here)")
    parser.add_argument("--pack", help="where the raw pack is kept (made once)")
    parser.add_argument("--images", type=int, default=600, help="of the made-up set")
    parser.add_argument("--max-side", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per row per round")
    results.add_argument(parser)
    args = parser.parse_args()
    pack = packed(args)
    classes = len(fastload.ImageShards(pack).classes or []) or 1
    loaders = {
        name: loader(pack, ops, last, args) for name, (ops, last) in pipelines(classes).items()
    }
    rates = results.loader_rates(
        loaders, rounds=args.rounds, seconds=args.seconds, warmup=2 * args.workers + 2
    )
    base = rates[BASELINE]
    print(
        f"{args.workers} worker processes, batch {args.batch_size}, raw pixels at "
        f"{args.max_side}, {args.rounds} interleaved rounds of {args.seconds} s"
    )
    rows = []
    for name, values in rates.items():
        line = f"  {name:<28} {statistics.median(values):7,.0f} images/s"
        if values is not base:
            line += f"  {results.spread(values, base)} {BASELINE}"
        print(line)
        rows.append(results.row(name, values, None if values is base else base))
    results.write(
        args.json,
        benchmark="float_ops",
        title="float32 batch ops after Normalize in the workers, against Normalize alone",
        baseline=BASELINE,
        rows=rows,
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "rounds", "seconds")},
    )


if __name__ == "__main__":
    main()
