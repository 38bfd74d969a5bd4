"""What ``pack(pixels="seekable")`` costs in bytes and buys in decoding, on your own JPEGs.

Every JPEG under ``--data`` (a folder, searched recursively, or tar shards; ``.jpg`` /
``.jpeg`` members) is rewritten as the pack rewrites it (``region.add_restarts``: restart
markers, the same pixels, checked here by a whole decode of each). On one core, each image's
sample (``RandomResizedCrop(224)`` + flip fused with decoding, the region backend) is timed from
the original bytes and from the rewritten ones with the same draws, the two interleaved over
``--rounds`` rounds. Printed: the rewritten bytes against the originals (what the pack costs on
disk and in the page cache), and the samples per second of each with their ratio per round.

Run: python benchmarks/decoding/seekable.py --data DIR_OR_TARS [--rounds 5] [--seconds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import torch

from fastload import backends
from fastload import transforms as T
from fastload.backends.region import add_restarts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

LIMIT = 10**9
SUFFIXES = (".jpg", ".jpeg")


def jpegs(root: Path) -> list[bytes]:
    """The JPEG files under ``root``, and the JPEG members of its tar files, sorted by name."""
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*") if root.is_dir() else [root]):
        if path.suffix.lower() in SUFFIXES:
            found[str(path)] = path.read_bytes()
        elif path.suffix == ".tar":
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and Path(member.name).suffix.lower() in SUFFIXES:
                        file = tar.extractfile(member)
                        if file is not None:
                            found[f"{path}:{member.name}"] = file.read()
    return [found[name] for name in sorted(found)]


def rate(decoder: backends.Backend, images: list[bytes], seconds: float) -> float:
    """Samples a second over whole passes of ``images`` (each pass's draws seeded alike)."""
    crop = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    done, began = 0, time.perf_counter()
    while True:
        torch.manual_seed(0)
        for data in images:
            decoder.decode(data, plan=crop.plan, render=crop.render_options)
        done += len(images)
        elapsed = time.perf_counter() - began
        if elapsed >= seconds:
            return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a folder of JPEGs, or tar shards")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="per kind per round")
    results.add_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    originals = jpegs(Path(args.data))
    if not originals:
        parser.error(f"no .jpg or .jpeg files or tar members under {args.data}")
    decoder = backends.create("region")
    rewritten = [add_restarts(data, max_pixels=LIMIT) for data in originals]
    for before, after in zip(originals, rewritten, strict=True):
        if not np.array_equal(decoder.decode_jpeg(before, 1), decoder.decode_jpeg(after, 1)):
            raise SystemExit("a rewritten JPEG decodes to other pixels: a bug in add_restarts")
    sizes = [len(a) / len(b) for a, b in zip(rewritten, originals, strict=True)]
    print(
        f"{len(originals)} JPEGs, {sum(map(len, originals)) / 2**20:,.1f} MiB; rewritten: "
        f"{sum(map(len, rewritten)) / sum(map(len, originals)):.3f}x the bytes "
        f"(per file {min(sizes):.2f}-{max(sizes):.2f}, median {statistics.median(sizes):.3f}), "
        "the same pixels"
    )
    rates = results.interleaved(
        {
            "files": lambda: rate(decoder, originals, args.seconds),
            "seekable": lambda: rate(decoder, rewritten, args.seconds),
        },
        args.rounds,
    )
    for name, values in rates.items():
        print(f"  {name:<9} {statistics.median(values):8,.0f} samples/s on one core")
    print(f"seekable / files: {results.spread(rates['seekable'], rates['files'])}")
    results.write(
        args.json,
        benchmark="seekable",
        title="RandomResizedCrop 224 samples from JPEGs with restart markers, one core",
        baseline="the files",
        rows=[
            results.row("the files", rates["files"], unit="samples/s"),
            results.row("seekable", rates["seekable"], rates["files"], unit="samples/s"),
        ],
        settings={"rounds": args.rounds, "seconds": args.seconds, "images": len(originals)},
    )


if __name__ == "__main__":
    main()
