"""How far can a CPU backend get past stock torchvision? The decoding floor, measured.

A baseline JPEG is one Huffman-coded stream: to reach any row, a decoder must entropy-decode
every row above it. Only the rows below the crop, and the inverse DCT, upsampling and colour
conversion outside it, can be skipped. This script measures, on one core and in one process
(no loader, so no collate or worker transfer):

* stock: one sample of the stock torchvision train pipeline (Pillow decode, RandomResizedCrop,
  flip, ToTensor, Normalize), as ``fastload bench`` runs it;
* fastload: one sample of ``fastload.ImageFolder(transform=RandomResizedCrop(224))``;
* the backend's full decode, and its decode at 1/8 scale: at 1/8 the inverse DCT is the DC term
  only and there are 64 times fewer pixels to upsample, convert and copy, so this is close to
  (a little over) the entropy decoding that no decoder can skip;
* for the same RandomResizedCrop draws, the share of rows down to the crop's bottom edge and the
  share of the image's area the crop covers.

From these it prints the per-sample cost a perfect region decoder would reach (entropy decoding
down to the crop's bottom, everything else only inside the crop, the rest of fastload's sample
unchanged), and the ratio to stock that this allows. In the same rounds it measures one sample
of a real region decoder (``--region``, default the ``region`` backend) and how far it stays
above that floor.

Run: python benchmarks/decoding/decode_floor.py [--data DIR] [--images 300] [--backend turbojpeg]
    [--region region|none]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import fastload
from fastload import backends
from fastload.bench import fastload_dataset, stock_dataset
from fastload.pixels.image import probe
from fastload.synthetic import default_data
from fastload.transforms import RandomResizedCrop, View

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


def _per_item(fn: Callable[[int], object], count: int) -> float:
    """Seconds per call of fn(i), over one pass of i < count."""
    start = time.perf_counter()
    for i in range(count):
        fn(i)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--backend", default="turbojpeg", help="the whole-image decoder")
    parser.add_argument("--region", default="region", help="a region decoder to measure, or none")
    parser.add_argument("--rounds", type=int, default=3)
    results.add_argument(parser)
    args = parser.parse_args()
    region = None if args.region == "none" else args.region
    if region is not None and not backends.check(region).usable:
        raise SystemExit(f"--region {region}: {backends.check(region).reason}; or --region none")
    torch.set_num_threads(1)
    root = Path(args.data or default_data())
    stock = stock_dataset(root, "train")
    ours = fastload_dataset(root, "train", args.backend)
    cropping = fastload_dataset(root, "train", region) if region is not None else None
    decoder = backends.create(args.backend)
    # colour or grey JPEGs, spread over the classes; other files (CMYK, PNG, broken) are skipped
    picks: list[int] = []
    data: list[bytes] = []
    rows, areas = [], []
    torch.manual_seed(0)
    step = max(1, len(ours) // args.images)
    for i in range(0, len(ours), step):
        blob = Path(ours.path(i)).read_bytes()
        try:
            info = probe(blob)
            usable = info.format == "jpeg" and info.components in (1, 3) and bool(info.pixels)
            ours[i]  # it must also pass fastload's own checks (truncation, size)
        except Exception:
            usable = False
        if not usable:
            continue
        assert info.width is not None and info.height is not None
        x0, y0, x1, y1 = RandomResizedCrop(224).plan(View.full(info.width, info.height)).box
        rows.append(y1 / info.height)
        areas.append((x1 - x0) * (y1 - y0) / (info.width * info.height))
        picks.append(i)
        data.append(blob)
        if len(picks) == args.images:
            break
    if not picks:
        raise SystemExit(f"no colour or grey JPEG under {root}")
    count = len(picks)

    costs: dict[str, list[float]] = {
        k: [] for k in ("stock", "fastload", "full", "eighth", "region")
    }
    for _ in range(args.rounds):  # interleaved, so drift on a shared machine hits all alike
        costs["stock"].append(_per_item(lambda i: stock[picks[i]], count))
        costs["fastload"].append(_per_item(lambda i: ours[picks[i]], count))
        costs["full"].append(_per_item(lambda i: decoder.decode_jpeg(data[i], 1), count))
        costs["eighth"].append(_per_item(lambda i: decoder.decode_jpeg(data[i], 8), count))
        if cropping is not None:
            costs["region"].append(_per_item(lambda i: cropping[picks[i]], count))
    ms = {k: min(v) * 1000 for k, v in costs.items() if v}
    row_share, area_share = statistics.fmean(rows), statistics.fmean(areas)
    rest = ms["fastload"] - ms["full"]  # file read, planning, resampling, tensor
    ideal_decode = ms["eighth"] * row_share + (ms["full"] - ms["eighth"]) * area_share
    ideal = rest + ideal_decode

    print(
        f"fastload {fastload.__version__}, {args.backend}, one core, {count} images from {root}, "
        f"best of {args.rounds} interleaved passes"
    )
    print(f"  stock torchvision sample        {ms['stock']:6.3f} ms")
    print(f"  fastload sample                 {ms['fastload']:6.3f} ms")
    print(f"    of which the full decode      {ms['full']:6.3f} ms")
    print(f"  decode at 1/8 (entropy floor)   {ms['eighth']:6.3f} ms")
    print(f"  crop: rows down to its bottom   {row_share:6.1%}, area {area_share:.1%}")
    print(f"  perfect region decode           {ideal_decode:6.3f} ms")
    print(f"  fastload sample with it         {ideal:6.3f} ms")
    print(f"  stock / fastload now            {ms['stock'] / ms['fastload']:6.2f}x")
    print(f"  stock / fastload, at best       {ms['stock'] / ideal:6.2f}x  (one core, no loader)")
    if cropping is not None:
        over = ms["region"] / ideal - 1
        print(f"  fastload sample, {region:<14} {ms['region']:6.3f} ms  ({over:+.1%} on the best)")
        print(f"  stock / fastload, {region:<13} {ms['stock'] / ms['region']:6.2f}x")
    per_sec = {k: [1 / c for c in v] for k, v in costs.items() if v}
    unit = "samples/s, one core"
    figures = [results.row("stock torchvision", per_sec["stock"], unit=unit)]
    figures += [
        results.row(f"fastload, {name}", per_sec[key], per_sec["stock"], unit=unit)
        for key, name in (("fastload", args.backend), ("region", region))
        if key in per_sec
    ]
    # the floor, round by round, as the printed one is from the best rounds
    floor = [
        1 / (f - full + eighth * row_share + (full - eighth) * area_share)
        for f, full, eighth in zip(costs["fastload"], costs["full"], costs["eighth"], strict=True)
    ]
    figures.append(
        results.row("perfect region decoder (floor)", floor, per_sec["stock"], unit=unit)
    )
    results.write(
        args.json,
        benchmark="decode_floor",
        title="one sample on one core: stock torchvision, fastload, and the decoding floor",
        baseline="stock torchvision",
        rows=figures,
        settings={"images": count, "backend": args.backend, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
