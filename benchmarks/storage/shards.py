"""Shards against a folder, against webdataset, and what packing costs: issue 37's figures.

Parts (``--part``, default all):

* ``read``: images/s of loaders over the same photos, rounds interleaved, each loader kept
  alive between rounds (its workers too), the median of each reported and every round's ratio
  against the one measured beside it:
  - ``stock folder``: torchvision's ``ImageFolder`` with RandomResizedCrop 224, flip, ToTensor,
    Normalize, through torch's DataLoader;
  - ``fastload folder``: ``fastload.ImageFolder`` with the same geometry fused with decoding,
    ``batch_transforms=gpu.Normalize`` (float32 batches, as every row);
  - ``fastload shards``: ``fastload.ImageShards`` over the photos packed into ``--shards``
    shards (bytes unchanged), ``ShardSampler``, the same pipeline and backend;
  - ``webdataset``: webdataset's own documented loader over the same shards: ``WebDataset``
    (shard shuffle) -> ``shuffle(1000)`` -> ``decode("pil")`` -> ``to_tuple`` -> torchvision's
    transform -> ``batched`` -> ``WebLoader``;
  - ``fastload shards max_side``: the photos packed with ``max_side`` (re-encoded at q90);
  - ``fastload shards raw``: the photos packed with ``max_side`` and ``pixels="raw"`` (their
    pixels at that size, no decoding when read);
  - ``fastload shards raw half``: the same with ``raw_share=0.5`` (the half whose files hold
    the most bytes per pixel raw, the rest JPEGs at ``max_side``); the bytes of each pack are
    printed.
  With ``--dtype uint8`` no side normalizes (torchvision's ``PILToTensor`` for the others).
* ``pack``: MB/s of ``fastload.pack`` (no re-encoding) against ``tar cf`` of the same folder,
  both from the page cache to the same disk, rounds interleaved; and images/s of a pack with
  ``max_side``.
* ``memory``: each worker's resident and private memory (RSS / USS) after an epoch over the
  photos packed into ``--many`` shards, against the same photos in ``--shards`` shards.
* ``shuffle``: how many classes a batch of 64 holds under ``ShardSampler`` for a few windows,
  against a full shuffle, in ImageNet's shape (1,000 classes, 128 shards), on shards written
  one class after another (the worst case: ``pack(..., shuffle_seed=None)`` of a class folder)
  and on a pack shuffled as ``pack`` does by default. Labels only, no decoding.
* ``fidelity``: what ``max_side`` changes in what the model sees: the PSNR of the same view
  (Resize 256 + CenterCrop 224; and a close crop, Resize 512 + CenterCrop 224) of every photo
  from its original file and from its re-encoded copy, for a few sides.

Run: python benchmarks/storage/shards.py [--data DIR] [--workers 2] [--seconds 60] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.bench import stock_dataset
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def packed(data: Path, out: Path, shards: int, **options: Any) -> Path:
    """The photos packed into about ``shards`` shards (reused when already there)."""
    if not (out / "manifest.json").exists():
        size = folder_bytes(data) // shards + 4096  # a few samples a shard when shards are many
        fastload.pack(data, out, shard_size=size, progress=False, **options)
    return out


# ---------------------------------------------------------------- the loaders


def fastload_loader(dataset: Any, args: argparse.Namespace, *, sampler: Any = None) -> Any:
    return fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.workers,
        batch_transforms=gpu.Normalize(MEAN, STD) if args.dtype == "float32" else None,
        persistent_workers=True,
    )


def geometry() -> Any:
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])


def webdataset_loader(shards: list[str], args: argparse.Namespace) -> Any:
    """webdataset's documented pipeline: PIL decoding and torchvision's transform."""
    import torchvision.transforms as TV
    import webdataset as wds

    transform = TV.Compose(
        [
            TV.RandomResizedCrop(224),
            TV.RandomHorizontalFlip(),
            TV.ToTensor(),
            TV.Normalize(MEAN, STD),
        ]
    )
    dataset = (
        wds.WebDataset(shards, shardshuffle=len(shards), empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(transform, lambda label: label)
        .batched(args.batch_size, partial=False)
    )
    return wds.WebLoader(
        dataset, batch_size=None, num_workers=args.workers, persistent_workers=True
    )


def _stock_uint8(data: Path) -> Any:
    import torchvision
    import torchvision.transforms as TV

    ops = [TV.RandomResizedCrop(224), TV.RandomHorizontalFlip(), TV.PILToTensor()]
    return torchvision.datasets.ImageFolder(data, transform=TV.Compose(ops))


def contenders(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    data = Path(args.data)
    plain = packed(data, work / "packed", args.shards)
    small = packed(data, work / f"packed-{args.max_side}", args.shards, max_side=args.max_side)
    raw = packed(
        data, work / f"raw-{args.max_side}", args.shards, max_side=args.max_side, pixels="raw"
    )
    half = packed(
        data,
        work / f"raw-half-{args.max_side}",
        args.shards,
        max_side=args.max_side,
        pixels="raw",
        raw_share=0.5,
    )
    for name, pack in (("max_side", small), ("raw", raw), ("raw half", half)):
        print(f"  the {name} {args.max_side} pack: {folder_bytes(pack) / 2**20:,.1f} MiB")
    shards = fastload.ImageShards(plain, geometry(), backend=args.backend)
    resized = fastload.ImageShards(small, geometry(), backend=args.backend)
    pixels = fastload.ImageShards(raw, geometry(), backend=args.backend)
    mixed = fastload.ImageShards(half, geometry(), backend=args.backend)
    tars = sorted(str(p) for p in plain.glob("*.tar"))
    return {
        "stock folder": torch.utils.data.DataLoader(
            stock_dataset(data, "train") if args.dtype == "float32" else _stock_uint8(data),
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.workers,
            persistent_workers=True,
        ),
        "fastload folder": fastload_loader(
            fastload.ImageFolder(data, geometry(), backend=args.backend), args
        ),
        "fastload shards": fastload_loader(
            shards, args, sampler=fastload.ShardSampler(shards, window=args.window)
        ),
        "webdataset": webdataset_loader(tars, args),
        f"fastload shards max_side {args.max_side}": fastload_loader(
            resized, args, sampler=fastload.ShardSampler(resized, window=args.window)
        ),
        f"fastload shards raw {args.max_side}": fastload_loader(
            pixels, args, sampler=fastload.ShardSampler(pixels, window=args.window)
        ),
        f"fastload shards raw half {args.max_side}": fastload_loader(
            mixed, args, sampler=fastload.ShardSampler(mixed, window=args.window)
        ),
    }


def measure_read(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    loaders = contenders(args, work)
    share = args.seconds / args.rounds / len(loaders)
    rates = results.loader_rates(
        loaders, rounds=args.rounds, seconds=share, warmup=max(3, args.workers * 2)
    )
    print(
        f"read: {args.data}, {len(fastload.ImageFolder(args.data))} photos, {args.shards} "
        f"shards, {args.workers} workers, batch {args.batch_size}, backend {args.backend}, "
        f"RRC 224 + flip{' + Normalize' if args.dtype == 'float32' else ''} ({args.dtype}), "
        f"{args.rounds} rounds of {share:.1f} s each"
    )
    for name, values in rates.items():
        print(
            f"  {name:<32} {statistics.median(values):8,.0f} images/s  "
            f"(rounds {min(values):,.0f}-{max(values):,.0f})"
        )
    pairs = [
        ("fastload shards", "fastload folder"),
        ("fastload shards", "webdataset"),
        (f"fastload shards max_side {args.max_side}", "fastload folder"),
        (f"fastload shards max_side {args.max_side}", "stock folder"),
        (f"fastload shards raw {args.max_side}", f"fastload shards max_side {args.max_side}"),
        (f"fastload shards raw {args.max_side}", "fastload folder"),
        (f"fastload shards raw half {args.max_side}", f"fastload shards max_side {args.max_side}"),
        ("fastload folder", "stock folder"),
    ]
    for a, b in pairs:
        print(f"  {a} / {b}: median {results.spread(rates[a], rates[b])}")
    stock = rates["stock folder"]
    return [
        results.row(name, r, None if r is stock else stock, group=args.dtype)
        for name, r in rates.items()
    ]


# ---------------------------------------------------------------- packing


def _timed_pack(
    data: Path, out: Path, shard_size: int, args: argparse.Namespace, sync: bool
) -> float:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    began = time.perf_counter()
    fastload.pack(data, out, shard_size=shard_size, progress=False, workers=args.workers)
    if sync:
        os.sync()
    seconds = time.perf_counter() - began
    shutil.rmtree(out)
    return seconds


def _timed_tar(data: Path, target: Path, sync: bool) -> float:
    os.sync()
    began = time.perf_counter()
    subprocess.run(["tar", "cf", str(target), "-C", str(data), "."], check=True)
    if sync:
        os.sync()
    seconds = time.perf_counter() - began
    target.unlink()
    return seconds


def measure_pack(args: argparse.Namespace, work: Path) -> None:
    """MB/s into the page cache, and to the disk (the writes synced before the clock stops)."""
    data = Path(args.data)
    size = folder_bytes(data) / 2**20
    shard_size = folder_bytes(data) // args.shards + 64 * 1024
    _timed_pack(data, work / "pack-round", shard_size, args, sync=False)  # imports, page cache
    print(
        f"pack: {size:,.0f} MiB of photos, {args.shards} shards, {args.workers} threads, "
        f"{args.rounds} rounds"
    )
    for sync in (False, True):
        packs, tars = [], []
        for _ in range(args.rounds):
            packs.append(size / _timed_pack(data, work / "pack-round", shard_size, args, sync))
            tars.append(size / _timed_tar(data, work / "round.tar", sync))
        where = "to the disk (synced)" if sync else "to the page cache"
        print(
            f"  {where}: fastload.pack {statistics.median(packs):,.0f} MB/s "
            f"({min(packs):,.0f}-{max(packs):,.0f}), tar cf {statistics.median(tars):,.0f} MB/s "
            f"({min(tars):,.0f}-{max(tars):,.0f}); pack / tar: median "
            f"{results.spread(packs, tars)}"
        )
    out = work / "pack-resized"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    manifest = fastload.pack(
        data,
        out,
        shard_size=shard_size,
        max_side=args.max_side,
        progress=False,
        workers=args.workers,
    )
    seconds = time.perf_counter() - began
    stored = sum(s.bytes for s in manifest.shards) / 2**20
    print(
        f"  max_side {args.max_side}: {manifest.samples / seconds:,.0f} images/s re-encoding "
        f"({args.workers} processes); {stored:,.0f} MiB stored, {stored / size:.0%} of the "
        "originals"
    )
    shutil.rmtree(out)


# ---------------------------------------------------------------- memory


def _memory(pid: int) -> tuple[float, float, int]:
    """(RSS, USS) in MiB and open descriptors of a process (Linux)."""
    from loader.worker_memory import memory_mib

    return (*memory_mib(pid), len(list(Path(f"/proc/{pid}/fd").iterdir())))


def worker_memory(source: Path, args: argparse.Namespace) -> list[tuple[float, float, int]]:
    """Each worker's memory after two epochs over the shards at ``source``."""
    import multiprocessing

    dataset = fastload.ImageShards(source, T.RandomResizedCrop(64), backend=args.backend)
    loader = fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=fastload.ShardSampler(dataset, window=args.window),
        num_workers=args.workers,
        persistent_workers=True,
    )
    for _ in range(2):
        for _ in loader:
            pass
    found = [_memory(p.pid) for p in multiprocessing.active_children()]
    del loader
    return found


def measure_memory(args: argparse.Namespace, work: Path) -> None:
    data = Path(args.data)
    few = packed(data, work / "packed", args.shards)
    many = packed(data, work / f"packed-{args.many}", args.many)
    print(f"memory: each of {args.workers} workers after two epochs (RSS / USS MiB, open files)")
    for source in (few, many):
        count = len(fastload.ImageShards(source).shards)
        rows = worker_memory(source, args)
        shown = "  ".join(f"{r:,.0f} / {u:,.0f} MiB, {fds} fds" for r, u, fds in rows)
        print(f"  {count:>5} shards: {shown}")


# ---------------------------------------------------------------- shuffle quality


def classes_per_batch(labels: np.ndarray, order: np.ndarray, batch: int) -> float:
    """The mean number of distinct classes in a batch of ``batch`` samples."""
    usable = len(order) // batch * batch
    batches = labels[order[:usable]].reshape(-1, batch)
    return float(np.mean([len(np.unique(b)) for b in batches]))


class _Layout:
    """Stands for shards: only their sizes matter to ShardSampler."""

    def __init__(self, sizes: np.ndarray) -> None:
        self.shard_sizes = sizes


def measure_shuffle(args: argparse.Namespace, work: Path) -> None:
    """ImageNet's shape: 1,000 classes of 128 samples in 128 shards of 1,000 samples."""
    classes, per_class, shards = 1000, 128, 128
    sorted_labels = np.repeat(np.arange(classes), per_class)
    layouts = {
        "class after class": sorted_labels,
        "shuffled by pack": np.random.default_rng(0).permutation(sorted_labels),
    }
    sizes = np.full(shards, len(sorted_labels) // shards)
    print(
        f"shuffle: distinct classes in a batch of {args.batch_size}, {classes} classes, "
        f"{len(sorted_labels):,} samples in {shards} shards (mean of epochs 0-4)"
    )
    for layout, labels in layouts.items():
        full = [
            classes_per_batch(
                labels, np.random.default_rng(e).permutation(len(labels)), args.batch_size
            )
            for e in range(5)
        ]
        row = [f"full shuffle {statistics.mean(full):.1f}"]
        for window in (1, 2, 4, 8, 16, 32):
            sampler = fastload.ShardSampler(_Layout(sizes), window=window)
            values = []
            for epoch in range(5):
                sampler.set_epoch(epoch)
                values.append(classes_per_batch(labels, np.array(list(sampler)), args.batch_size))
            row.append(f"window {window} {statistics.mean(values):.1f}")
        print(f"  {layout}: " + ", ".join(row))


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.float() - b.float()) ** 2).mean())
    return 99.0 if mse == 0 else 10 * float(np.log10(255.0**2 / mse))


def measure_fidelity(args: argparse.Namespace, work: Path) -> None:
    """What re-encoding to ``max_side`` changes in what the model sees: PSNR of the same
    view of each image from the original file and from the re-encoded one."""
    data = Path(args.data)
    reference = fastload.ImageFolder(data)
    where = {p: i for i, (p, _) in enumerate(reference.samples)}
    views = {
        "Resize 256 + CenterCrop 224": T.Compose([T.Resize(256), T.CenterCrop(224)]),
        "Resize 512 + CenterCrop 224 (a close crop)": T.Compose([T.Resize(512), T.CenterCrop(224)]),
    }
    print(
        f"fidelity: PSNR (dB) of the re-encoded images' views against the originals' "
        f"({len(reference)} photos; quality 90; median, 5th percentile; 99: unchanged)"
    )
    for side in sorted({256, args.max_side, 448}):
        pack = packed(data, work / f"packed-{side}", args.shards, max_side=side)
        stored = fastload.ImageShards(pack)
        size = sum(e.bytes for e in stored.manifest.shards) / folder_bytes(data)
        for name, view in views.items():
            original = reference.with_transform(view)
            shrunk = stored.with_transform(view)
            values = []
            for i in range(len(stored)):
                path = str(data / _original(stored, i))  # KEY.json names it
                values.append(_psnr(shrunk[i][0], original[where[path]][0]))
            print(
                f"  max_side {side} ({size:.0%} of the bytes), {name}: "
                f"{statistics.median(values):.1f} dB, 5th percentile "
                f"{float(np.percentile(values, 5)):.1f} dB"
            )


def _original(shards: Any, index: int) -> str:
    import json
    import tarfile

    with tarfile.open(shards.shard_of(index)) as tar:
        member = tar.extractfile(f"{shards.key(index)}.json")
        assert member is not None
        return json.loads(member.read())["path"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder photo set (default: fastload's own set)")
    parser.add_argument(
        "--part", choices=["read", "pack", "memory", "shuffle", "fidelity", "all"], default="all"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--many", type=int, default=1000, help="shards for the memory part")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--max-side", type=int, default=320)
    parser.add_argument(
        "--dtype",
        choices=["float32", "uint8"],
        default="float32",
        help="read: normalized float32 batches (every side normalizes), or uint8",
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--work", help="where the packs are kept (default: a temporary folder)")
    results.add_argument(parser)
    args = parser.parse_args()
    args.data = str(args.data or default_data())
    parts = ["read", "pack", "memory", "shuffle", "fidelity"] if args.part == "all" else [args.part]
    with tempfile.TemporaryDirectory(prefix="fastload-shards-") as temporary:
        work = Path(args.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        for part in parts:
            figures = {
                "read": measure_read,
                "pack": measure_pack,
                "memory": measure_memory,
                "shuffle": measure_shuffle,
                "fidelity": measure_fidelity,
            }[part](args, work)
            if part == "read":  # the part with a ratio to plot
                results.write(
                    args.json,
                    benchmark="shards",
                    title=f"shards against a folder and webdataset's loader, {args.dtype}",
                    baseline="stock folder",
                    rows=figures,
                    settings={
                        k: getattr(args, k)
                        for k in ("workers", "batch_size", "backend", "shards", "max_side")
                    }
                    | {"dtype": args.dtype, "seconds": args.seconds, "rounds": args.rounds},
                )


if __name__ == "__main__":
    main()
