"""prefetch_factor against uneven waits: what more batches in flight buy waiting workers.

torch hands batches over in order. When the workers wait on storage and a batch's wait varies
(small batches, a long-tailed latency), the batch due next holds up the rest: the other workers
fill their ``prefetch_factor`` slots and idle. Each sample here waits a seeded log-normal
latency (``--io-latency`` mean, ``--io-sigma`` shape; fastload.synthetic.SlowStorage) and is
then a small tensor, so nothing but the waits limits the rate. ``--workers`` workers load it in
batches of ``--batch-size`` with prefetch_factor 1, 2 (torch's default), 4 and 8, ``--rounds``
rounds interleaved (the order reversed every other round). Printed: images/s per round, each
factor's rate against the default's (mean of the rounds, and the spread of the per-round
ratios), and the ceiling: workers over the mean wait of a batch.

Run: python benchmarks/loader/prefetch_waits.py [--workers 16] [--batch-size 4] [--io-sigma 1]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from fastload.autotune import measure_loader
from fastload.synthetic import SlowStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

FACTORS = (1, 2, 4, 8)


class Small:
    """Samples that cost nothing to make: a 3x8x8 uint8 image and its index."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(3, 8, 8, dtype=torch.uint8), index

    def __repr__(self) -> str:
        return "Small()"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--io-latency", type=float, default=20.0, metavar="MS")
    parser.add_argument("--io-sigma", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    results.add_argument(parser)
    args = parser.parse_args()
    dataset = SlowStorage(Small(), ms=args.io_latency, sigma=args.io_sigma)

    def make(workers: int, factor: int) -> Any:
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=args.batch_size,
            num_workers=workers,
            persistent_workers=True,
            prefetch_factor=factor,
        )

    print(
        f"{args.workers} workers, batches of {args.batch_size}, waits of {args.io_latency:g} ms "
        f"mean (log-normal sigma {args.io_sigma:g}), {args.rounds} rounds of {args.seconds:g} s"
    )
    rates: dict[int, list[float]] = {f: [] for f in FACTORS}
    for r in range(args.rounds):
        for factor in FACTORS if r % 2 == 0 else tuple(reversed(FACTORS)):
            loader = functools.partial(make, factor=factor)
            rates[factor].append(measure_loader(loader, args.workers, args.seconds))
    ceiling = args.workers * 1000.0 / args.io_latency
    print(f"ceiling (workers / mean wait): {ceiling:,.0f} images/s")
    base = rates[2]
    for factor in FACTORS:
        ratios = [a / b for a, b in zip(rates[factor], base, strict=True)]
        mean = statistics.fmean(rates[factor]) / statistics.fmean(base)
        rounds = " ".join(f"{x:>6.0f}" for x in rates[factor])
        print(
            f"  prefetch_factor {factor}: {rounds} images/s; {mean:.2f}x the default's "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f})"
        )
    results.write(
        args.json,
        benchmark="prefetch_waits",
        title=f"prefetch_factor with {args.workers} workers waiting {args.io_latency:g} ms",
        baseline="prefetch_factor 2",
        rows=[
            results.row(f"prefetch_factor {f}", rates[f], None if f == 2 else base) for f in FACTORS
        ],
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "io_latency", "io_sigma")}
        | {"seconds": args.seconds, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
