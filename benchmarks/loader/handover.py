"""What receiving a batch from a worker process costs the main process: torch's way (every
storage a file descriptor, each one a round trip to the worker's resource-sharer thread) against
fastload's (:mod:`fastload.memory.handover`: the kept slots the main process maps named, small
storages sent by value).

The workers do almost nothing (each sample a copy of one picture), so that what is measured is
the handing over: where the main process is the wall, as on a machine with many cores feeding
one loop. The cases, each a ``fastload.DataLoader`` with worker processes, batches left on the
CPU:

* classification: 3 x 224 x 224 uint8 images and int labels, batch 64 (two storages a batch);
* image-text: the same images, each with a caption's 77 tokens as a tensor (OpenCLIP's
  samples), batch 64 (two storages a batch, both made in shared memory by torch's
  ``default_collate``);
* classification, own collate: the classification samples collated by a function of the
  user's own that calls torch's ``default_collate`` and returns its fields as a dict of its
  own (what ``default_collate`` stacks inside it goes into the kept slots, or by value);
* detection: 3 x 480 x 640 uint8 images, each with a target dict of boxes and labels, batch 8,
  the references' ``tuple(zip(*batch))`` collate (three storages an image);
* segmentation: dicts as a Hugging Face image processor makes them, 3 x 256 x 256 float32
  ``pixel_values`` and a 256 x 256 int64 ``labels`` mask, batch 16 (two storages a batch, each
  stacked into a kept slot by fastload's collate).

"torch's way" is the same loader with torch's reducer put back in its workers (their
``worker_init_fn``): what the handing over itself gives. Beside them, torch's own
``DataLoader`` of the same samples: what the swap gives, fastload's collate (a batch's large
fields stacked into kept slots) included. Figures a round: images/s and the main process's CPU
milliseconds a batch; ratios fastload's over torch's way, and over torch's ``DataLoader``, in
the same round, rounds interleaved.

Run: python benchmarks/loader/handover.py [--workers 2] [--seconds 4] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing import reductions

import fastload
from fastload.autotune.rates import endless

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


class Pictures(torch.utils.data.Dataset):
    """Copies of one random picture, with an int label, a caption's tokens or a detection
    target dict (``targets``: "label", "tokens" or "boxes"); or, as float pixels, in a dict
    with a class a pixel ("mask")."""

    def __init__(self, size: tuple[int, int], *, targets: str) -> None:
        generator = torch.Generator().manual_seed(0)
        self.picture = torch.randint(0, 256, (3, *size), dtype=torch.uint8, generator=generator)
        self.targets = targets
        if targets == "mask":
            self.pixels = self.picture.float() / 255
            self.mask = torch.randint(0, 150, size, generator=generator)

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> Any:
        if self.targets == "mask":
            return {"pixel_values": self.pixels.clone(), "labels": self.mask.clone()}
        if self.targets == "label":
            return self.picture.clone(), index % 1000
        if self.targets == "tokens":
            return self.picture.clone(), torch.arange(77, dtype=torch.int64) + index % 1000
        boxes = torch.tensor([[10.0, 20.0, 200.0, 300.0]] * 5) + index % 7
        return self.picture.clone(), {"boxes": boxes, "labels": torch.ones(5, dtype=torch.int64)}


def detection_collate(batch: list[Any]) -> tuple[Any, ...]:
    """The detection references' collate."""
    return tuple(zip(*batch))  # noqa: B905 (theirs)


def own_collate(samples: list[Any]) -> dict[str, torch.Tensor]:
    """A collate function of one's own around torch's ``default_collate``."""
    images, labels = torch.utils.data.default_collate(samples)
    return {"image": images, "label": labels}


def torchs_way(worker_id: int) -> None:
    """A ``worker_init_fn`` that puts torch's reducer back (it runs after fastload's)."""
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(torch.UntypedStorage, reductions.reduce_storage)


CASES: dict[str, dict[str, Any]] = {
    "classification": {"size": (224, 224), "targets": "label", "batch_size": 64},
    "classification, own collate": {
        "size": (224, 224),
        "targets": "label",
        "batch_size": 64,
        "collate_fn": own_collate,
    },
    "image-text": {"size": (224, 224), "targets": "tokens", "batch_size": 64},
    "detection": {
        "size": (480, 640),
        "targets": "boxes",
        "batch_size": 8,
        "collate_fn": detection_collate,
    },
    "segmentation": {"size": (256, 256), "targets": "mask", "batch_size": 16},
}


TORCH_LOADER = "torch's DataLoader"


def loader(case: str, workers: int, way: str) -> Any:
    """The case's loader, ``way``: fastload's, "torch's" (torch's reducer) or torch's own."""
    spec = CASES[case]
    dataset = Pictures(spec["size"], targets=spec["targets"])
    common: dict[str, Any] = {
        "batch_size": spec["batch_size"],
        "num_workers": workers,
        "persistent_workers": True,
        "collate_fn": spec.get("collate_fn"),
    }
    if way == TORCH_LOADER:
        return torch.utils.data.DataLoader(dataset, **common)
    init = torchs_way if way == "torch's" else None
    return fastload.DataLoader(dataset, worker_init_fn=init, device="cpu", **common)


def read(batches: Iterator[Any], seconds: float, batch_size: int) -> tuple[float, float]:
    """Images/s and the main process's CPU milliseconds a batch, over ``seconds``."""
    count, cpu, start = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(batches)
        count += 1
    wall = time.perf_counter() - start
    return count * batch_size / wall, 1000 * (time.process_time() - cpu) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0, help="per loader per round")
    parser.add_argument("--rounds", type=int, default=4)
    results.add_argument(parser)
    args = parser.parse_args()
    print(
        f"fastload {fastload.__version__}; {args.workers} worker processes, {args.rounds} "
        f"interleaved rounds of {args.seconds:g} s; batches left on the CPU"
    )
    figures = []
    for case, spec in CASES.items():
        ways = ("torch's", "fastload's", TORCH_LOADER)
        streams = {way: endless(loader(case, args.workers, way)) for way in ways}
        for stream in streams.values():  # workers started, their slots made and mapped
            for _ in range(8 * args.workers):
                next(stream)
        rates: dict[str, list[float]] = {way: [] for way in ways}
        cpu: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.rounds):
            for way, stream in streams.items():
                rate, per_batch = read(stream, args.seconds, spec["batch_size"])
                rates[way].append(rate)
                cpu[way].append(per_batch)
        for stream in streams.values():
            stream.close()
        print(f"{case} (batch {spec['batch_size']}):")
        for way in ways:
            print(
                f"  {way:>18}: {statistics.median(rates[way]):,.0f} images/s, main process "
                f"{statistics.median(cpu[way]):.2f} ms CPU a batch"
            )
        for values, unit in ((rates, "images/s"), (cpu, "ms CPU a batch")):
            ours, theirs, stock = values["fastload's"], values["torch's"], values[TORCH_LOADER]
            print(f"  fastload's / torch's, {unit}: {results.spread(ours, theirs)}")
            print(f"  fastload's / {TORCH_LOADER}, {unit}: {results.spread(ours, stock)}")
            group = f"{case}, {unit}"
            figures.append(results.row("torch's", theirs, unit=unit, group=group))
            figures.append(results.row("fastload's", ours, theirs, unit=unit, group=group))
            figures.append(
                results.row(
                    "fastload's",
                    ours,
                    stock,
                    unit=unit,
                    group=f"{case} against {TORCH_LOADER}, {unit}",
                    against=TORCH_LOADER,
                )
            )
    results.write(
        args.json,
        benchmark="handover",
        title="a batch received from a worker process: fastload's handover against torch's",
        baseline="torch's",
        rows=figures,
        settings={"workers": args.workers, "seconds": args.seconds, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
