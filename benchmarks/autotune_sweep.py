"""autotune against an exhaustive sweep of num_workers (0 to 2x cores), same data, same run.

The sweep measures every worker count for the same time per candidate that autotune uses; then
autotune runs (cache off) with its default budget, and once more with the cache on. Printed:
the throughput of autotune's choice as a share of the sweep's best (from the sweep's own
measurements, so both are judged alike; target >= 90 %), autotune's time as a share of the
sweep's (target <= 1/3), and the cached call's time (target < 1 s).

Run: python benchmarks/autotune_sweep.py [--data DIR] [--budget 30]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import fastload
from fastload import transforms as T
from fastload.autotune import _coarse, autotune, measure_loader
from fastload.bench import default_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--budget", type=float, default=30.0)
    args = parser.parse_args()
    dataset = fastload.ImageFolder(args.data or default_data(), transform=T.RandomResizedCrop(224))
    cores = len(os.sched_getaffinity(0))
    max_workers = 2 * cores
    per_candidate = max(0.5, args.budget / (len(_coarse(max_workers)) + 2) - 0.5)

    def make(workers: int) -> fastload.DataLoader:
        return fastload.DataLoader(
            dataset, batch_size=args.batch_size, num_workers=workers, persistent_workers=workers > 0
        )

    start = time.perf_counter()
    sweep = {w: measure_loader(make, w, per_candidate) for w in range(max_workers + 1)}
    sweep_s = time.perf_counter() - start
    best = max(sweep, key=sweep.__getitem__)
    print(
        f"{dataset.backend} backend, batch {args.batch_size}, {cores} cores, {len(dataset)} images"
    )
    print(f"exhaustive sweep (0..{max_workers}), {per_candidate:.1f} s each, {sweep_s:.1f} s:")
    for w, rate in sweep.items():
        print(f"  {w:>3} workers {rate:>8.0f} images/s{'  <- best' if w == best else ''}")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["FASTLOAD_CACHE_DIR"] = cache
        start = time.perf_counter()
        result = autotune(dataset, batch_size=args.batch_size, budget=args.budget)
        tune_s = time.perf_counter() - start
        start = time.perf_counter()
        cached = autotune(dataset, batch_size=args.batch_size, budget=args.budget)
        cached_s = time.perf_counter() - start
    print(f"autotune: {tune_s:.1f} s, chose {result.num_workers}; measured, in order:")
    for m in result.table:
        print(f"  {m.num_workers:>3} workers {m.images_per_sec:>8.0f} images/s ({m.seconds:.1f} s)")
    share = sweep[result.num_workers] / sweep[best]
    print(f"  choice / sweep best (sweep's figures): {share:.1%}  (target >= 90 %)")
    print(f"  autotune time / sweep time:           {tune_s / sweep_s:.2f}  (target <= 0.33)")
    same = cached.num_workers == result.num_workers
    print(f"  cached call: {cached_s * 1000:.1f} ms, same choice: {same}")


if __name__ == "__main__":
    main()
