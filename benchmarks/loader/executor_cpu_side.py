"""What the batch executors' CPU side costs per sample, and what it sustains.

A GPU decoder is only as fast as the CPU work that feeds it. For each sample the executor
(``backends/executor/``, then the nvImageCodec engine) runs, on the CPU:

1. **read**: the file's bytes;
2. **header**: ``check_header`` (format from the content, ``max_pixels``, a truncated JPEG) and
   the shown size;
3. **plan**: the dataset's transform planned with torchvision's draws from the sample's own
   seed (``RandomResizedCrop(224)`` + ``RandomHorizontalFlip``, as ``plan_views`` does);
4. **region**: where the view lies in the file and the region to decode (``plan_sample``);
5. **code stream**: nvImageCodec's ``CodeStream`` over the bytes, limited to the region
   (skipped without nvImageCodec);
6. **render plan**: the batch renderer's two weight axes for the sample (``_plan``; the
   weights themselves are built on the device, a whole batch at once).

Each step is timed alone over the same files (one thread, medians of ``--rounds``), then steps
1-4 run in ``--processes`` worker processes at once over shares of the set, to show what the
machine sustains when that work is spread (the shape of DALI's proxy: plan and read in
processes, feed the GPU from one).

Run: python benchmarks/loader/executor_cpu_side.py [--data DIR] [--processes 1 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastload import transforms as T
from fastload.backends.executor import shown_size
from fastload.backends.files import read_file
from fastload.backends.headers import check_header
from fastload.backends.nvimgcodec import rendering
from fastload.pixels.resampling import View
from fastload.sampling import sample_seed
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

TRANSFORM = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])


def files_of(root: Path, limit: int) -> list[str]:
    found = sorted(str(p) for p in root.glob("*/*") if p.suffix.lower() in (".jpg", ".jpeg"))
    return found[:limit]


def read(path: str) -> bytes:
    return read_file(path)


def header(data: bytes) -> tuple[Any, tuple[int, int]]:
    info = check_header(data)
    return info, shown_size(data, info)


def plan(position: int, size: tuple[int, int]) -> View:
    # fastload's own ops draw from torch only, so plan_views seeds torch alone (and puts its
    # stream back once a batch)
    torch.default_generator.manual_seed(sample_seed(0, position))
    return TRANSFORM.plan(View.full(*size))


def region(view: View, info: Any, size: tuple[int, int]) -> rendering.Sample:
    return rendering.plan_sample(view, info, size)


def code_stream_maker() -> Callable[[np.ndarray, Any], Any] | None:
    try:
        from fastload.backends.nvimgcodec.decoder import code_stream

        code_stream(np.frombuffer(read(__file__), np.uint8)[:0], None)  # imports the codec
    except Exception:  # nvImageCodec missing: the step is skipped, and said so
        return None
    return code_stream


def cpu_side(paths: list[str]) -> int:
    """Steps 1-4 for ``paths``, as one executor's reader does them; the count done."""
    for position, path in enumerate(paths):
        data = read(path)
        info, size = header(data)
        region(plan(position, size), info, size)
    return len(paths)


def per_sample(paths: list[str], rounds: int) -> dict[str, float]:
    """Each step's median cost in microseconds a sample."""
    datas = [read(p) for p in paths]
    headers = [header(d) for d in datas]
    views = [plan(k, size) for k, (_, size) in enumerate(headers)]
    samples = [region(v, i, s) for v, (i, s) in zip(views, headers, strict=True)]
    arrays = [np.frombuffer(d, np.uint8) for d in datas]
    steps: dict[str, Callable[[], Any]] = {
        "read": lambda: [read(p) for p in paths],
        "header": lambda: [header(d) for d in datas],
        "plan": lambda: [plan(k, s) for k, (_, s) in enumerate(headers)],
        "region": lambda: [region(v, i, s) for v, (i, s) in zip(views, headers, strict=True)],
    }
    make_stream = code_stream_maker()
    if make_stream is not None:
        steps["code stream"] = lambda: [
            make_stream(a, s.region) for a, s in zip(arrays, samples, strict=True)
        ]
    shapes = [
        (s.region[3] - s.region[1], s.region[2] - s.region[0])
        if s.region is not None
        else (i.height, i.width)
        for s, (i, _) in zip(samples, headers, strict=True)
    ]
    steps["render plan"] = lambda: [
        rendering.plan_render(h, w, s, True) for (h, w), s in zip(shapes, samples, strict=True)
    ]
    costs: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():  # interleaved: each round times every step once
            start = time.perf_counter()
            step()
            costs[name].append((time.perf_counter() - start) / len(paths) * 1e6)
    return {name: statistics.median(values) for name, values in costs.items()}


def spread(paths: list[str], processes: int, rounds: int) -> list[float]:
    """Samples/s of steps 1-4 in ``processes`` processes at once, a share each; per round."""
    shares = [paths[k::processes] for k in range(processes)]
    rates = []
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(cpu_side, shares))  # warm-up: imports, the page cache
        for _ in range(rounds):
            start = time.perf_counter()
            done = sum(pool.map(cpu_side, shares))
            rates.append(done / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: the cached default)")
    parser.add_argument("--images", type=int, default=2000, help="files used, at most")
    parser.add_argument("--processes", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    results.add_argument(parser)
    args = parser.parse_args()
    root = Path(args.data or default_data())
    paths = files_of(root, args.images)
    print(f"{len(paths)} JPEGs from {root}; RandomResizedCrop(224) + RandomHorizontalFlip")
    costs = per_sample(paths, args.rounds)
    print("per sample, one thread (median of rounds):")
    for name, micros in costs.items():
        print(f"  {name:<12} {micros:8.1f} us")
    missing = "" if "code stream" in costs else " (no nvImageCodec: code stream not timed)"
    total = sum(costs.values())
    print(f"  {'all':<12} {total:8.1f} us = {1e6 / total:,.0f} samples/s per core{missing}")
    reader = sum(costs[name] for name in ("read", "header", "plan", "region"))
    print(f"  steps 1-4 (the readers' part): {1e6 / reader:,.0f} samples/s per core")
    figures, first = [], None
    for processes in args.processes:
        rates = spread(paths, processes, args.rounds)
        print(
            f"steps 1-4 in {processes} process(es): median {statistics.median(rates):,.0f} "
            f"samples/s (range {min(rates):,.0f}-{max(rates):,.0f})"
        )
        # the counts run one after another, not interleaved: each round's ratio is to the
        # first count's round of the same index
        figures.append(results.row(f"{processes} process(es)", rates, first, unit="samples/s"))
        first = first or rates
    results.write(
        args.json,
        benchmark="executor_cpu_side",
        title="what a batch executor's CPU side sustains (steps 1-4: read, header, plan, region)",
        baseline=f"{args.processes[0]} process(es)",
        rows=figures,
        settings={"images": len(paths), "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
