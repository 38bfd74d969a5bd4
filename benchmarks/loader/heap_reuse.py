"""What kept batch memory does to the memory a batch's samples are made in: fastload's loader
against the same loader with glibc's malloc left as it finds itself, and torch's ``DataLoader``.

A batch stacked into kept memory (a worker thread's or the loader's own ring, a worker
process's shared slots) is never freed, so glibc never raises its mmap and trim thresholds
past a sample's size, as freeing a batch made anew does: in some processes, then, the samples
freed after each batch go back to the system and are faulted in again for the next. Which
processes do depends on how their heap lies, so each figure here is one fresh process (each
read in a process of its own, rounds interleaved), and the spread is the point: "heap as
left" is fastload with ``fastload.system.keep_freed_heap`` made to do nothing, what it was
before that function.

The cases: copies of one 3 x 224 x 224 picture with an int label, batch 64, batches left on
the CPU; uint8, or float32 (as ``ToTensor`` makes them); no workers, two worker processes or
two worker threads; torch's ``default_collate``, or a function of one's own around it. Two
cases have samples of two float32 views of the picture (SimCLR's, say), whose second batch
is past glibc's largest mmap threshold (32 MiB): made anew, its pages are faulted in every
batch. Their baseline is "images alone": fastload with only the first field stacked into the
ring, as it was before every field past 64 KiB went there. One more holds the last three
batches (as the prefetcher does with ``device="cuda"``, or a loop keeping the previous
batch): its baseline is "a buffer a batch", a ring that keeps as many buffers as batches,
as it was before it counted a batch's fields. torch's ``DataLoader`` has no
worker threads: against fastload's two, it runs two worker processes. Figures a round:
images/s and the minor page faults a batch (the process's and its workers'); ratios
fastload's over the case's baseline, and over torch's ``DataLoader``, in the same round.

Run: python benchmarks/loader/heap_reuse.py [--seconds 3] [--rounds 6] [--cases ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

import fastload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results

import results

BATCH = 64
TORCH_LOADER = "torch's DataLoader"
LEFT = "fastload, heap as left"
ALONE = "fastload, images alone"
ONE_EACH = "fastload, a buffer a batch"
OURS = "fastload"
CASES: dict[str, dict[str, Any]] = {
    "no workers, uint8": {"dtype": "uint8", "workers": 0},
    "no workers, float32": {"dtype": "float32", "workers": 0},
    "no workers, own collate, uint8": {"dtype": "uint8", "workers": 0, "own": True},
    "2 worker processes, uint8": {"dtype": "uint8", "workers": 2},
    "no workers, two float32 views": {
        "dtype": "float32",
        "workers": 0,
        "views": 2,
        "baseline": ALONE,
    },
    "no workers, two float32 views, 3 batches held": {
        "dtype": "float32",
        "workers": 0,
        "views": 2,
        "held": 3,
        "baseline": ONE_EACH,
    },
    "2 worker threads, two float32 views": {
        "dtype": "float32",
        "workers": 2,
        "views": 2,
        "threads": True,
        "baseline": ALONE,
    },
}


def ways(case: str) -> tuple[str, str, str]:
    """The case's baseline, fastload, torch's loader."""
    return CASES[case].get("baseline", LEFT), OURS, TORCH_LOADER


class Pictures(torch.utils.data.Dataset):
    """Copies of one random picture (uint8, or float32 in [0, 1]), ``views`` times a sample,
    each sample with an int label."""

    def __init__(self, dtype: str, views: int = 1, *, threads: bool = False) -> None:
        # it draws nothing, so worker threads may run it; elsewhere left unkeyed, as a user's
        # dataset is (a keyed one is sent each index's seed, a cost of its own)
        self.sample_keys = threads
        picture = torch.randint(
            0, 256, (3, 224, 224), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
        )
        self.picture = picture if dtype == "uint8" else picture.float() / 255
        self.views = views

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return *(self.picture.clone() for _ in range(self.views)), index % 1000


def own_collate(samples: list[Any]) -> dict[str, torch.Tensor]:
    """A collate function of one's own around torch's ``default_collate``."""
    images, labels = torch.utils.data.default_collate(samples)
    return {"image": images, "label": labels}


def one(case: str, way: str, seconds: float) -> dict[str, float]:
    """One read, in this process: images/s and minor page faults a batch."""
    spec = CASES[case]
    if way == LEFT:  # before the loader (and its workers' fork) takes any kept memory
        from fastload.memory import buffers, shared_buffers

        buffers.keep_freed_heap = shared_buffers.keep_freed_heap = lambda nbytes: False
    if way == ALONE:  # the first field alone found to stack, as before the other fields went
        from fastload.loader import collate

        every_field = collate.stackable_fields
        collate.stackable_fields = lambda samples: every_field(samples)[:1]
    if way == ONE_EACH:  # no batch marked: the ring counts a buffer a batch
        from fastload.memory import buffers

        buffers.one_batch = contextlib.nullcontext
    options: dict[str, Any] = {"batch_size": BATCH, "num_workers": spec["workers"]}
    if spec.get("own"):
        options["collate_fn"] = own_collate
    if spec.get("threads") and way != TORCH_LOADER:
        options["worker_type"] = "thread"
    kind = torch.utils.data.DataLoader if way == TORCH_LOADER else fastload.DataLoader
    data = Pictures(spec["dtype"], spec.get("views", 1), threads=bool(spec.get("threads")))
    batches = iter(kind(data, **options))
    held: deque[Any] = deque(maxlen=spec.get("held", 1))  # the last batch is held anyway
    for _ in range(4 + 4 * spec["workers"]):  # workers started, kept memory made
        held.append(next(batches))
    before = _faults_with_workers(batches)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        held.append(next(batches))
        count += 1
    rate = count * BATCH / (time.perf_counter() - start)
    return {"rate": rate, "faults": (_faults_with_workers(batches) - before) / count}


def _faults_with_workers(batches: Any) -> int:
    """This process's minor faults and its live workers' (read from /proc)."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for worker in getattr(batches, "_workers", []):
        stat = Path(f"/proc/{worker.pid}/stat").read_text()
        total += int(stat.rsplit(")", 1)[1].split()[7])  # minflt, after the command's name
    return total


def read_in_a_fresh_process(case: str, way: str, seconds: float) -> dict[str, float]:
    """:func:`one` in a process of its own: malloc's thresholds are the process's."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", case, way, "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        timeout=120 + 4 * seconds,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{case}, {way}: {done.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per read")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--one", nargs=2, metavar=("CASE", "WAY"), help=argparse.SUPPRESS)
    results.add_argument(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.seconds)))
        return
    print(
        f"fastload {fastload.__version__}; batch {BATCH}, {args.rounds} interleaved rounds of "
        f"{args.seconds:g} s, each read in a fresh process; batches left on the CPU"
    )
    figures = []
    for case in args.cases:
        spec = CASES[case]
        pages = Pictures(spec["dtype"]).picture.nbytes * BATCH // 4096  # one field's batch
        baseline, _, _ = case_ways = ways(case)
        reads: dict[str, list[dict[str, float]]] = {way: [] for way in case_ways}
        for _ in range(args.rounds):
            for way in case_ways:
                reads[way].append(read_in_a_fresh_process(case, way, args.seconds))
        rates = {way: [r["rate"] for r in reads[way]] for way in case_ways}
        print(f"{case}:")
        for way in case_ways:
            each = [r["faults"] for r in reads[way]]
            again = sum(f > pages / 2 for f in each)
            print(
                f"  {way:>22}: {statistics.median(rates[way]):,.0f} images/s "
                f"({min(rates[way]):,.0f}-{max(rates[way]):,.0f}), page faults a batch "
                f"{statistics.median(each):,.0f} ({min(each):,.0f}-{max(each):,.0f}); a field's "
                f"batch faulted in afresh in {again} of {args.rounds} processes"
            )
            figures.append(
                results.row(way, each, unit="page faults a batch", group=f"{case}, faults")
            )
        print(f"  {OURS} / {baseline}: {results.spread(rates[OURS], rates[baseline])}")
        print(f"  {OURS} / {TORCH_LOADER}: {results.spread(rates[OURS], rates[TORCH_LOADER])}")
        figures.append(results.row(baseline, rates[baseline], group=case))
        against = None if baseline == LEFT else baseline  # LEFT: the run's own baseline
        figures.append(results.row(OURS, rates[OURS], rates[baseline], group=case, against=against))
        figures.append(
            results.row(
                OURS,
                rates[OURS],
                rates[TORCH_LOADER],
                group=f"{case} against {TORCH_LOADER}",
                against=TORCH_LOADER,
            )
        )
    results.write(
        args.json,
        benchmark="heap_reuse",
        title=(
            "the samples' memory under kept batches: malloc's thresholds raised or as left; "
            "every large field kept or the images alone"
        ),
        baseline=LEFT,
        rows=figures,
        settings={"seconds": args.seconds, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
