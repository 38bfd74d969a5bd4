"""Worker memory over epochs: fastload's sample arrays against a Python list of (path, label).

Reading an item of a Python list in a forked worker writes the item's reference count, which
copies the memory page it lives on: over an epoch each worker ends up with a private copy of
the whole list (pytorch/pytorch issue 13246). fastload keeps paths and labels in numpy arrays.

Both datasets below run the same per-item work except the sample lookup; file reading is
replaced by a constant so that a million made-up paths can be used. For each, two persistent
workers go through several shuffled epochs, and after each epoch the script reads every
worker's resident memory (RSS) and private memory (USS: the pages it no longer shares with the
main process, where copy-on-read shows) from /proc. Linux only.

Run: python benchmarks/loader/worker_memory.py [--files 1000000] [--epochs 4]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import sys
from pathlib import Path

import torch

import fastload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


class NoDiskImageList(fastload.ImageList):
    """fastload.ImageList with the same lookup, but without touching the (made-up) files."""

    def read_sample(self, index: int) -> tuple[bytes, int]:
        return self.path(index).encode(), int(self.labels[index])

    def _decode(self, data: bytes) -> torch.Tensor:
        return torch.tensor(len(data))


class ListOfTuples(torch.utils.data.Dataset):
    """How torchvision's ImageFolder keeps its samples."""

    def __init__(self, paths: list[str], labels: list[int]) -> None:
        self.samples = list(zip(paths, labels, strict=True))

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return torch.tensor(len(path)), label


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, USS) of a process in MiB, from /proc/PID/smaps_rollup."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0])  # kB
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    return fields["Rss"] / 1024, uss / 1024


def run(name: str, dataset: torch.utils.data.Dataset, epochs: int, batch_size: int) -> list[float]:
    """Print the workers' memory after each epoch; returns the largest worker's private
    memory (USS, MiB) after each."""
    loader = fastload.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=2, persistent_workers=True
    )
    it = iter(loader)
    next(it)  # workers started and warmed up
    workers = sorted(p.pid for p in multiprocessing.active_children())
    start = [memory_mib(pid) for pid in workers]
    rows = []
    for _epoch in range(epochs):
        for _ in it:
            pass
        rows.append([memory_mib(pid) for pid in workers])
        it = iter(loader)
    print(f"\n{name}")
    print(f"  {'after':<10} " + "  ".join(f"worker {i} RSS / USS MiB" for i in range(len(workers))))
    print(f"  {'start':<10} " + "  ".join(f"{r:>9.0f} / {u:<9.0f}   " for r, u in start))
    for epoch, row in enumerate(rows, 1):
        print(f"  {f'epoch {epoch}':<10} " + "  ".join(f"{r:>9.0f} / {u:<9.0f}   " for r, u in row))
    first, last = rows[0], rows[-1]
    growth = max(lr / fr - 1 for (fr, _), (lr, _) in zip(first, last, strict=True))
    uss_growth = max(lu - fu for (_, fu), (_, lu) in zip(first, last, strict=True))
    print(
        f"  RSS growth from epoch 1 to {epochs}: {growth:+.1%} (largest of the workers); "
        f"private memory gained since the start: "
        f"{max(lu - su for (_, su), (_, lu) in zip(start, last, strict=True)):.0f} MiB; "
        f"after epoch 1: {uss_growth:+.0f} MiB"
    )
    del it, loader
    gc.collect()
    return [max(uss for _, uss in row) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1000)
    results.add_argument(parser)
    args = parser.parse_args()
    paths = [
        f"/data/imagenet/train/n{i % 1000:08d}/n{i % 1000:08d}_{i:07d}.JPEG"
        for i in range(args.files)
    ]
    labels = [i % 1000 for i in range(args.files)]
    print(f"{args.files:,} samples, 2 persistent workers, {args.epochs} shuffled epochs")
    ours = run(
        "fastload.ImageList (numpy arrays)",
        NoDiskImageList(paths, labels),
        args.epochs,
        args.batch_size,
    )
    base = "list of (path, label) tuples"
    theirs = run(base, ListOfTuples(paths, labels), args.epochs, args.batch_size)
    unit = "MiB private, largest worker"  # one figure an epoch
    results.write(
        args.json,
        benchmark="worker_memory",
        title=f"worker memory over {args.epochs} epochs of {args.files:,} samples",
        baseline=base,
        rows=[
            results.row(base, theirs, unit=unit),
            results.row("fastload.ImageList", ours, theirs, unit=unit),
        ],
        settings={"files": args.files, "epochs": args.epochs, "batch_size": args.batch_size},
    )


if __name__ == "__main__":
    main()
