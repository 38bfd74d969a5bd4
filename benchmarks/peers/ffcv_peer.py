"""FFCV against fastload on FFCV's own ground: the same photos, RandomResizedCrop 224 + flip,
uint8 or normalized float32 batches (issue 52's pairings).

FFCV 1.0.2 is a benchmark peer, never a dependency: install it where this script can import
it (Debian needs ``libopencv-dev``, ``libturbojpeg0-dev`` and ``pkg-config`` to build it; see
the docs' benchmarks page), or point ``--ffcv-path`` at a ``pip install --target`` folder.

Pairings, each FFCV's writer against ``fastload.pack`` of the same class folder:

* ``full``: the photos at full size; FFCV ``write_mode="jpg"`` (its writer re-encodes at
  quality 90), fastload the files' own bytes (``pack()``: they are q90 JPEGs already);
* ``500``: both capped at a longest side of 500; FFCV ``jpg`` with ``max_resolution=500``,
  fastload ``pack(max_side=500)`` (re-encoded at q90);
* ``recipe 500``: each one's best recipe at 500: FFCV's ImageNet recipe
  (``write_mode="proportion"``, ``compress_probability=0.5``: about half the images stored as
  raw pixels), fastload ``pack(max_side=500, pixels="raw")``;
* ``full seekable``, ``500 seekable``, ``recipe 500 seekable``: FFCV's file of the pairing
  named, against fastload's JPEGs rewritten with restart markers (``pack(pixels="seekable")``,
  at ``max_side=500`` for the last two: the same pixels as ``pack()`` and
  ``pack(max_side=500)``, about the same bytes), which its region backend cuts crops out of.

Each FFCV file and each pack is read by one set of loaders, whichever pairings share it.

FFCV's loader (``os_cache=True``, random order, its threads) runs RandomResizedCropRGBImageDecoder
224, RandomHorizontalFlip, then ToTensor and ToTorchImage; in float32 its NormalizeImage (a
lookup table written into its batch memory) before ToTensor. fastload's runs the same ops fused
with decoding (``ImageShards`` + ``ShardSampler``), float32 through ``gpu.Normalize`` on the
batch, once with worker processes and once with worker threads; its figure is the better of the
two in each round. Every loader reads a few batches first (FFCV's numba compile, workers
started, page cache warm); then the rounds alternate among all of them.

A third fastload row per pairing, ``one process x N``: the same loader with no workers (each
batch read, decoded and collated in this process), its rate times the workers: what N workers
would give with no cost of their own and perfect scaling, the ceiling of fastload's sample path
on this machine; set beside 1.3x FFCV, it says how much of the aim the sample path itself
allows.

Run: python benchmarks/peers/ffcv_peer.py --data DIR [--dtype uint8|float32|both] [--rounds 3]
[--seconds 4] [--pairings "recipe 500" "full seekable" ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

import fastload
from fastload import gpu
from fastload import transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
FFCV_WRITES = {  # FFCV's writer options, by name
    "full": {"write_mode": "jpg", "jpeg_quality": 90},
    "500": {"write_mode": "jpg", "jpeg_quality": 90, "max_resolution": 500},
    "recipe 500": {  # its ImageNet recipe
        "write_mode": "proportion",
        "compress_probability": 0.5,
        "jpeg_quality": 90,
        "max_resolution": 500,
    },
}
PACKS = {  # fastload.pack's options, by name
    "files": {},
    "500": {"max_side": 500},
    "raw 500": {"max_side": 500, "pixels": "raw"},
    "seekable": {"pixels": "seekable"},
    "seekable 500": {"max_side": 500, "pixels": "seekable"},
}
PAIRINGS = {  # name: (FFCV's file, fastload's pack)
    "full": ("full", "files"),
    "500": ("500", "500"),
    "recipe 500": ("recipe 500", "raw 500"),
    "full seekable": ("full", "seekable"),
    "500 seekable": ("500", "seekable 500"),
    "recipe 500 seekable": ("recipe 500", "seekable 500"),
}


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def beton(data: Path, path: Path, options: dict[str, Any], workers: int) -> Path:
    """The class folder written by FFCV's ``DatasetWriter`` (reused when already there)."""
    import torchvision
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    if not path.exists():
        folder = torchvision.datasets.ImageFolder(str(data))
        fields = {"image": RGBImageField(**options), "label": IntField()}
        DatasetWriter(str(path), fields, num_workers=workers).from_indexed_dataset(folder)
    return path


def packed(data: Path, out: Path, options: dict[str, Any]) -> Path:
    if not (out / "manifest.json").exists():
        fastload.pack(data, out, progress=False, **options)
    return out


def ffcv_loader(path: Path, args: argparse.Namespace, dtype: str) -> Any:
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import (
        NormalizeImage,
        RandomHorizontalFlip,
        Squeeze,
        ToTensor,
        ToTorchImage,
    )

    image: list[Any] = [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip()]
    if dtype == "float32":
        mean, std = np.array(MEAN) * 255, np.array(STD) * 255
        image.append(NormalizeImage(mean, std, np.float32))
    image += [ToTensor(), ToTorchImage()]
    return Loader(
        str(path),
        batch_size=args.batch_size,
        num_workers=args.workers,
        order=OrderOption.RANDOM,
        drop_last=True,
        os_cache=True,
        pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]},
    )


def fastload_loader(
    path: Path,
    args: argparse.Namespace,
    dtype: str,
    worker_type: str,
    *,
    workers: int | None = None,
) -> Any:
    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageShards(path, geometry)
    return fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=fastload.ShardSampler(dataset),
        num_workers=args.workers if workers is None else workers,
        drop_last=True,
        batch_transforms=gpu.Normalize(MEAN, STD) if dtype == "float32" else None,
        persistent_workers=workers != 0,
        worker_type=worker_type,
        seeding="sample" if worker_type == "thread" else "auto",
    )


def contenders(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Each FFCV file and each fastload pack the pairings name, once, with their loaders."""
    data = Path(args.data)
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for name in dict.fromkeys(PAIRINGS[p][0] for p in args.pairings):
        path = beton(data, work / f"ffcv-{slug(name)}.beton", FFCV_WRITES[name], args.workers)
        print(f"  FFCV {name}: {path.stat().st_size / 2**20:,.1f} MiB")
        for dtype in dtypes(args):
            theirs[f"FFCV {name}, {dtype}"] = ffcv_loader(path, args, dtype)
    for name in dict.fromkeys(PAIRINGS[p][1] for p in args.pairings):
        pack = packed(data, work / f"fastload-{slug(name)}", PACKS[name])
        for dtype in dtypes(args):
            for kind, worker_type, workers in (
                ("processes", "process", None),
                ("threads", "thread", None),
                ("one process", "process", 0),
            ):
                ours[f"fastload {name}, {kind}, {dtype}"] = fastload_loader(
                    pack, args, dtype, worker_type, workers=workers
                )
        backend = ours[f"fastload {name}, processes, {dtype}"].dataset.backend
        print(f"  fastload {name}: {folder_bytes(pack) / 2**20:,.1f} MiB, {backend} backend")
    # fastload's worker processes start (fork) before FFCV's compiled threads run
    return {**ours, **theirs}


def slug(name: str) -> str:
    return name.replace(" ", "-")


def measure(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    # the warm-up takes FFCV's compile out of the rounds
    warmup = max(4, 2 * args.workers)
    return results.loader_rates(
        contenders(args, work), rounds=args.rounds, seconds=args.seconds, warmup=warmup
    )


def dtypes(args: argparse.Namespace) -> list[str]:
    return ["uint8", "float32"] if args.dtype == "both" else [args.dtype]


def report(rates: dict[str, list[float]], args: argparse.Namespace) -> list[dict[str, Any]]:
    for name, values in rates.items():
        print(f"  {name:<42} {statistics.median(values):8,.0f} images/s")
    rows = []
    best: dict[tuple[str, str], list[float]] = {}
    for dtype in dtypes(args):
        for pairing in args.pairings:
            rows += _pairing_rows(rates, args, pairing, dtype, best)
    if args.dtype == "both":
        for pairing in args.pairings:
            floats, uint8 = best[pairing, "float32"], best[pairing, "uint8"]
            print(
                f"  {pairing}: fastload's best float32 / its best uint8 "
                f"{results.spread(floats, uint8)}"
            )
    return rows


def _pairing_rows(
    rates: dict[str, list[float]],
    args: argparse.Namespace,
    pairing: str,
    dtype: str,
    best: dict[tuple[str, str], list[float]],
) -> list[dict[str, Any]]:
    """One pairing's rows in one dtype (fastload's best per round kept in ``best``)."""
    theirs, pack = PAIRINGS[pairing]
    ffcv = rates[f"FFCV {theirs}, {dtype}"]
    kinds = (
        rates[f"fastload {pack}, processes, {dtype}"],
        rates[f"fastload {pack}, threads, {dtype}"],
    )
    ours = best[pairing, dtype] = [max(p, t) for p, t in zip(*kinds, strict=True)]
    print(f"  {pairing}, {dtype}: fastload's best / FFCV {results.spread(ours, ffcv)}")
    ceiling = [args.workers * r for r in rates[f"fastload {pack}, one process, {dtype}"]]
    print(
        f"  {pairing}, {dtype}: fastload's one process x {args.workers} / FFCV "
        f"{results.spread(ceiling, ffcv)}"
    )
    name = f"fastload {pairing}, one process x {args.workers}"
    rows = [
        results.row(f"fastload {pairing}", ours, ffcv, group=dtype, target=1.3),
        results.row(name, ceiling, ffcv, group=dtype),
    ]
    if pairing == theirs:  # FFCV's row once, where a pairing is named after its file
        rows.insert(0, results.row(f"FFCV {theirs}", ffcv, group=dtype))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a class folder of photos")
    parser.add_argument("--work", default="ffcv-work", help="where the packs are kept")
    parser.add_argument("--ffcv-path", help="a folder to import FFCV from (pip --target)")
    parser.add_argument(
        "--dtype",
        choices=("uint8", "float32", "both"),
        default="float32",
        help="the batches' dtype; both: each loader in each, rounds interleaved, and the "
        "float32 / uint8 ratio of fastload's best",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per loader per round")
    parser.add_argument(
        "--pairings",
        nargs="+",
        choices=tuple(PAIRINGS),
        default=list(PAIRINGS),
        metavar="PAIRING",
        help=f"which pairings to run (default: all; choices: {', '.join(map(repr, PAIRINGS))})",
    )
    results.add_argument(parser)
    args = parser.parse_args()
    if args.ffcv_path:
        sys.path.insert(0, args.ffcv_path)
    try:
        import ffcv  # noqa: F401
    except ImportError as exc:
        parser.error(f"FFCV is not importable ({exc}): install ffcv==1.0.2 (see the docstring)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.data}: {folder_bytes(Path(args.data)) / 2**20:,.0f} MiB of photos, "
        f"{args.workers} workers, batch {args.batch_size}, RRC 224 + flip ({args.dtype}), "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s"
    )
    rows = report(measure(args, work), args)
    results.write(
        args.json,
        benchmark="ffcv_peer",
        title="fastload against FFCV 1.0.2 on the same photos, " + " and ".join(dtypes(args)),
        baseline="FFCV",
        rows=rows,
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "rounds", "seconds")},
    )


if __name__ == "__main__":
    main()
