"""The memory instance masks cost per sample: torchvision's detection reference input against
fastload's ``accelerate=True`` on the same pipeline.

torchvision's wrapper draws each object's mask at the image's full size (pycocotools), and
every geometric op then makes a new stack of them (the resize, the flip). fastload draws them
at full size too, then gathers the output's pixels once through the composed row and column
maps. What that costs is measured, not counted: each configuration runs in a fresh process
over the same images and draws, and the figure is the process's peak resident memory with
masks minus its peak without them (the same pipeline, the same samples), so that what is not
the masks cancels out. Configurations alternate, round after round.

Beside it, counted: the most bytes one sample's masks take at full size and at the output
size (the floor of any pipeline that draws them at full size and hands them on).

Run: python benchmarks/peers/detection_masks_memory.py [--images 60] [--rounds 3]
[--pipelines multiscale ssd]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import fastload
from fastload.accelerate import accelerate_dataset
from fastload.pixels.image import probe
from fastload.synthetic import make_coco

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

from peers.detection_swap import dataset

LOADERS = ("stock torchvision", "fastload, accelerate=True")


def child(folder: str, annotations: str, augmentation: str, loader: str, masks: bool) -> None:
    """One configuration's pass over the samples, in this (fresh) process: print its peak
    resident memory and the most mask bytes a sample had at full size and at the output size
    (bytes, as JSON)."""
    import pycocotools.mask  # noqa: F401 (loaded either way, so that it cancels out)

    data = dataset(Path(folder), Path(annotations), augmentation, masks)
    if loader != LOADERS[0]:
        data, _ = accelerate_dataset(data, batches=False)
    full = out = 0
    for index in range(len(data)):
        torch.manual_seed(index)
        _, target = data[index]
        if masks:
            moved = target["masks"]
            full = max(full, _full_size_bytes(data, index))
            out = max(out, moved.numel() * moved.element_size())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(json.dumps({"peak": peak, "full": full, "out": out}))


def _full_size_bytes(data: Any, index: int) -> int:
    """The bytes of sample ``index``'s masks drawn at its image's full size (uint8)."""
    if isinstance(data, torch.utils.data.Subset):  # stock: the wrapped CocoDetection
        coco = data.dataset.coco
        image_id = data.dataset.ids[data.indices[index]]
        image = coco.imgs[image_id]
        return len(coco.getAnnIds(imgIds=image_id)) * image["width"] * image["height"]
    size = probe(data.read_sample(index)[0])  # fastload's CocoDetection
    return len(data.annotations(index)) * int(size.width) * int(size.height)


def run_child(args: list[str]) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=60, help="images in the set made here")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipelines", nargs="+", default=["multiscale", "ssd"])
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    results.add_argument(parser)
    args = parser.parse_args()
    if args.child is not None:
        folder, annotations, augmentation, loader, masks = args.child
        child(folder, annotations, augmentation, loader, masks == "masks")
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder, annotations = make_coco(Path(scratch) / "coco", images=args.images)
        print(
            f"fastload {fastload.__version__}, torch {torch.__version__}; {args.images} "
            f"COCO-like images (1-8 objects each), {args.rounds} interleaved rounds; "
            "peak RSS with masks minus without, one fresh process each"
        )
        figures = []
        for augmentation in args.pipelines:
            costs: dict[str, list[float]] = {loader: [] for loader in LOADERS}
            counted: dict[str, int] = {}
            for _ in range(args.rounds):
                for loader in LOADERS:
                    common = [str(folder), str(annotations), augmentation, loader]
                    with_masks = run_child([*common, "masks"])
                    without = run_child([*common, "none"])
                    costs[loader].append((with_masks["peak"] - without["peak"]) / 2**20)
                    counted = {"full": with_masks["full"], "out": with_masks["out"]}
            print(f"\n{augmentation}, masks")
            print(
                f"  the most masks a sample has: {counted['full'] / 2**20:.1f} MiB at full "
                f"size, {counted['out'] / 2**20:.1f} MiB at the output size"
            )
            stock = costs[LOADERS[0]]
            for loader in LOADERS:
                print(
                    f"  {loader}: {statistics.median(costs[loader]):.1f} MiB "
                    f"({min(costs[loader]):.1f}-{max(costs[loader]):.1f}); this / stock "
                    f"{results.spread(costs[loader], [max(s, 1e-3) for s in stock])}"
                )
                figures.append(
                    results.row(
                        loader,
                        costs[loader],
                        None if loader == LOADERS[0] else stock,
                        unit="MiB",
                        group=f"{augmentation}, masks",
                    )
                )
    results.write(
        args.json,
        benchmark="detection_masks_memory",
        title="peak memory the masks cost (RSS with masks minus without), lower is better",
        baseline=LOADERS[0],
        rows=figures,
        settings={"images": args.images, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
