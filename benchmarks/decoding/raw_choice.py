"""Which images are worth storing as raw pixels: decoding saved against bytes added, per image.

The photos are packed twice at ``--max-side``: as JPEGs (``pixels="encoded"``) and as raw
pixels (``pixels="raw"``). On one core, each image's sample (``RandomResizedCrop(224)`` + flip
fused with decoding, the default backend) is timed from both packs over ``--seeds`` draws (the
median), two rounds interleaved, keeping each image's faster round. An image's saving is its
JPEG time less its raw time; its cost, the raw member's bytes less the JPEG's.

Reported: a least-squares model of both times (a constant, per pixel, per compressed byte), and
for a few shares of the images the decoding saved per KiB added when the share is chosen as
``pack(raw_share=...)`` chooses it (the source files with the most bytes per pixel), at random
(the median of 200 draws), and ranked by each image's own measured saving per byte added (what
knowing every image's cost in advance would choose). ``fastload.shards.raw_choice`` quotes
these figures.

Run: python benchmarks/decoding/raw_choice.py --data DIR [--max-side 320] [--seeds 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fastload
from fastload import transforms as T
from fastload.sampling import SampleKey
from fastload.shards.raw_choice import bytes_per_pixel

SHARES = (0.25, 0.5, 0.75)


def member_sizes(pack: Path) -> dict[str, int]:
    """Each key's image member's bytes."""
    sizes = {}
    for shard in sorted(pack.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                if ext in ("jpg", "jpeg", "png", "webp", "ppm"):
                    sizes[key] = member.size
    return sizes


def sample_times(dataset: Any, seeds: int) -> list[float]:
    """Each sample's median time over ``seeds`` draws, after three untimed ones."""
    out = []
    for i in range(len(dataset)):
        for seed in range(3):
            dataset[SampleKey(i, seed=seed)]
        times = []
        for seed in range(100, 100 + seeds):
            start = time.perf_counter()
            dataset[SampleKey(i, seed=seed)]
            times.append(time.perf_counter() - start)
        out.append(statistics.median(times))
    return out


def measure(data: Path, work: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    """One row per image: its times from both packs, bytes and source density."""
    packs = {}
    for pixels in ("encoded", "raw"):
        out = work / pixels
        fastload.pack(data, out, max_side=args.max_side, pixels=pixels, progress=False)
        geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
        packs[pixels] = (fastload.ImageShards(out, geometry), member_sizes(out))
    rounds: dict[str, list[list[float]]] = {"encoded": [], "raw": []}
    for _ in range(2):
        for pixels, (dataset, _) in packs.items():
            rounds[pixels].append(sample_times(dataset, args.seeds))
    files = fastload.ImageFolder(data)
    density = {
        os.path.relpath(files.path(i), data): bytes_per_pixel(files.path(i))
        for i in range(len(files))
    }
    rows = []
    dataset = packs["raw"][0]
    for i in range(len(dataset)):
        key = dataset.key(i)
        jpeg, raw = packs["encoded"][1][key], packs["raw"][1][key]
        path = json_path(dataset, i)
        rows.append(
            {
                "jpeg_s": min(r[i] for r in rounds["encoded"]),
                "raw_s": min(r[i] for r in rounds["raw"]),
                "jpeg_bytes": jpeg,
                "raw_bytes": raw,
                "pixels": (raw - len(b"P6\n0 0\n255\n")) / 3,
                "density": density[path],
            }
        )
    return rows


def json_path(dataset: Any, i: int) -> str:
    import json

    with tarfile.open(dataset.shard_of(i)) as tar:
        member = tar.extractfile(f"{dataset.key(i)}.json")
        assert member is not None
        return str(json.loads(member.read())["path"])


def report(rows: list[dict[str, float]]) -> None:
    design = np.array([[1.0, r["pixels"], r["jpeg_bytes"]] for r in rows])
    (a, b, c), *_ = np.linalg.lstsq(design, np.array([r["jpeg_s"] for r in rows]), rcond=None)
    print(f"  decoding: {a * 1e6:.0f} us + {b * 1e9:.2f} ns a pixel + {c * 1e9:.2f} ns a byte")
    design = np.array([[1.0, r["pixels"]] for r in rows])
    (a, b), *_ = np.linalg.lstsq(design, np.array([r["raw_s"] for r in rows]), rcond=None)
    print(f"  raw pixels: {a * 1e6:.0f} us + {b * 1e9:.2f} ns a pixel")

    def per_kib(chosen: list[dict[str, float]]) -> float:
        saved = sum(r["jpeg_s"] - r["raw_s"] for r in chosen)
        return 1e6 * saved / (sum(r["raw_bytes"] - r["jpeg_bytes"] for r in chosen) / 1024)

    def measured(r: dict[str, float]) -> float:
        return (r["jpeg_s"] - r["raw_s"]) / (r["raw_bytes"] - r["jpeg_bytes"])

    for share in SHARES:
        count = round(share * len(rows))
        densest = sorted(rows, key=lambda r: -r["density"])[:count]
        ideal = sorted(rows, key=lambda r: -measured(r))[:count]
        draws = [per_kib(random.Random(seed).sample(rows, count)) for seed in range(200)]
        print(
            f"  share {share:.2f}: us of decoding saved per KiB added: by bytes per pixel "
            f"{per_kib(densest):.2f}, at random {statistics.median(draws):.2f} "
            f"({min(draws):.2f}-{max(draws):.2f}), by each image's measured saving "
            f"{per_kib(ideal):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a class folder of photos")
    parser.add_argument("--max-side", type=int, default=320)
    parser.add_argument("--seeds", type=int, default=30, help="draws timed per image")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory() as work:
        rows = measure(Path(args.data), Path(work), args)
    print(f"{len(rows)} photos from {args.data} at max_side={args.max_side}, one core:")
    report(rows)


if __name__ == "__main__":
    main()
