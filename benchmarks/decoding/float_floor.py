"""What a float32 batch costs over a uint8 one at the least: the float32 bytes written.

Issue 52 asks for float32 batches "at the cost of uint8", by a resampling kernel that writes
normalized floats straight into the batch. A float32 batch is four times the bytes of its uint8
batch, and those bytes are written whatever writes them. This script measures, per image of
``--size`` x ``--size`` x 3 on one thread, in kept memory (as the loader's workers write them),
rounds interleaved:

* ``float32 written``: every value of a float32 batch in kept memory stored, nothing read
  (torch's ``fill_``): the floor any float32 path pays, a fused kernel included (the
  baseline);
* ``fastload normalize``: ``gpu.Normalize`` on the CPU, the uint8 batch into kept float32
  memory (fastload's compiled kernel: each uint8 read once, each float32 streamed to memory;
  OpenCV's planes where it is not built), as the loader's workers run it;
* ``uint8 stack``: the samples stacked into a uint8 batch, the pass a fused kernel would skip
  besides reading the uint8 values back.

Then, from ``--uint8-rate`` (a loader's uint8 images/s, for example ``ffcv_peer.py``'s) and
``--workers``, the float32 / uint8 ratio that loader could reach with a normalize that cost
only the float32 writes, against the one it reaches with fastload's.

Run: python benchmarks/decoding/float_floor.py [--batch-size 64] [--size 224] [--rounds 5]
    [--uint8-rate 4644 --workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fastload import gpu
from fastload.memory import buffers
from fastload.system import single_threaded_ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def rate(fn: Callable[[], object], images: int, seconds: float) -> float:
    """Images/s of ``fn`` (which handles ``images`` images a call), over about ``seconds``."""
    fn()  # the kept memory taken, caches warm
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * images / elapsed


def contenders(batch: int, size: int) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(0)
    samples = [
        torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=generator)
        for _ in range(batch)
    ]
    written = torch.empty((batch, 3, size, size))
    stacked = torch.empty((batch, 3, size, size), dtype=torch.uint8)
    torch.stack(samples, out=stacked)
    normalize = gpu.Normalize(MEAN, STD)
    ring = buffers.BatchRing(2)

    def normalized() -> torch.Tensor:
        buffers.use(ring)  # kept memory, as a worker's batches (fastload.memory.buffers)
        try:
            return normalize(stacked)
        finally:
            buffers.use(None)

    return {
        "float32 written": lambda: written.fill_(0.5),
        "fastload normalize": normalized,
        "uint8 stack": lambda: torch.stack(samples, out=stacked),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per contender per round")
    parser.add_argument("--uint8-rate", type=float, help="a loader's uint8 images/s")
    parser.add_argument("--workers", type=int, default=2, help="the cores that rate used")
    results.add_argument(parser)
    args = parser.parse_args()
    single_threaded_ops()  # one thread, as in each worker
    funcs = contenders(args.batch_size, args.size)
    rates = results.interleaved(
        {name: lambda fn=fn: rate(fn, args.batch_size, args.seconds) for name, fn in funcs.items()},
        args.rounds,
    )
    floor = rates["float32 written"]
    print(
        f"one thread, batches of {args.batch_size} x 3 x {args.size} x {args.size}, "
        f"{args.rounds} interleaved rounds"
    )
    rows = []
    for name, values in rates.items():
        us = 1e6 / statistics.median(values)
        print(
            f"  {name:<20} {us:7.1f} us an image  "
            f"({results.spread(floor, values)} the time of the float32 writes)"
        )
        rows.append(results.row(name, values, None if values is floor else floor))
    if args.uint8_rate:
        core_us = 1e6 * args.workers / args.uint8_rate  # a core's time for a uint8 image
        for name in ("float32 written", "fastload normalize"):
            extra = 1e6 / statistics.median(rates[name])
            print(
                f"  float32 / uint8 at {args.uint8_rate:,.0f} uint8 images/s on "
                f"{args.workers} cores, the float32 costing {name}: "
                f"{core_us / (core_us + extra):.2f}"
            )
    results.write(
        args.json,
        benchmark="float_floor",
        title="float32 batches' cost over uint8 at the least: the float32 bytes written",
        baseline="float32 written",
        rows=rows,
        settings={k: getattr(args, k) for k in ("batch_size", "size", "rounds", "seconds")},
    )


if __name__ == "__main__":
    main()
