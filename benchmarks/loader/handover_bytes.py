"""What a detection image costs the main process as it arrives from a worker process: float32
(the image made float in the worker, as the references' ``ToDtype`` does there) against uint8
(made float on the device after the copy, as ``fastload.DataLoader`` does with
``device="cuda"``).

Two worker processes hand over ``H x W`` images (800 x 1066 by default: a COCO image after the
references' multiscale resize) with a small target dict, collated by the references'
``tuple(zip(*batch))``. With CUDA, torch's pin-memory thread pins each image (one copy, on one
op thread, as torch sets it) and the main process copies it to the device, as
``fastload.DataLoader`` does; without, the main process copies each image once on one op
thread. The loaders stay up; the rounds alternate between them. Figures a round: images/s, and
the main process's CPU time an image (all its threads); ratios uint8 over float32 in the same
round.

Run: python benchmarks/loader/handover_bytes.py [--size 800 1066] [--workers 2] [--seconds 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from fastload.autotune.rates import endless
from fastload.system import single_threaded_ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


class Images(torch.utils.data.Dataset):
    """One random picture, handed over as a fresh tensor each time, uint8 or made float32
    the references' way (a cast, then ``mul_(1 / 255)``)."""

    def __init__(self, size: tuple[int, int], dtype: torch.dtype) -> None:
        generator = torch.Generator().manual_seed(0)
        self.picture = torch.randint(0, 256, (3, *size), dtype=torch.uint8, generator=generator)
        self.dtype = dtype

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        image = self.picture.clone()
        if self.dtype == torch.float32:
            image = image.to(torch.float32).mul_(1.0 / 255)
        target = {"boxes": torch.rand(5, 4), "labels": torch.ones(5, dtype=torch.int64)}
        return image, target


def collate(batch: list[Any]) -> tuple[Any, ...]:
    """The detection references' collate."""
    return tuple(zip(*batch))  # noqa: B905 (theirs)


def copier() -> Callable[[torch.Tensor], Any]:
    """What the main process does with each image once it has it (pinned already with CUDA)."""
    if torch.cuda.is_available():
        return lambda image: image.to("cuda", non_blocking=True)
    # as torch's pin-memory thread copies: one op thread (all of them would spin on 16 cores)
    single_threaded_ops()
    return torch.Tensor.clone


def read(batches: Iterator[Any], seconds: float, copy: Callable[[torch.Tensor], Any]) -> Any:
    """Images/s and the main process's CPU milliseconds an image, over ``seconds``."""
    images, cpu, start = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        for image in next(batches)[0]:
            copy(image)
            images += 1
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return images / wall, 1000 * (time.process_time() - cpu) / images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, nargs=2, default=(800, 1066), metavar=("H", "W"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6.0, help="per loader per round")
    parser.add_argument("--rounds", type=int, default=3)
    results.add_argument(parser)
    args = parser.parse_args()
    size = tuple(args.size)
    streams = {}
    for dtype in (torch.float32, torch.uint8):
        loader = torch.utils.data.DataLoader(
            Images(size, dtype),
            batch_size=args.batch_size,
            num_workers=args.workers,
            persistent_workers=args.workers > 0,
            collate_fn=collate,
            pin_memory=torch.cuda.is_available(),
        )
        streams[str(dtype).replace("torch.", "")] = endless(loader)
    copy = copier()
    for stream in streams.values():  # warm up: workers started, first batches out
        for _ in range(2 * max(args.workers, 1)):
            next(stream)
    rates: dict[str, list[float]] = {name: [] for name in streams}
    cpu: dict[str, list[float]] = {name: [] for name in streams}
    for _ in range(args.rounds):
        for name, stream in streams.items():
            rate, per_image = read(stream, args.seconds, copy)
            rates[name].append(rate)
            cpu[name].append(per_image)
    where = "pinned, then copied to the device" if torch.cuda.is_available() else "copied once"
    print(
        f"{args.workers} worker processes, {size[0]} x {size[1]} images, batch "
        f"{args.batch_size}, {args.rounds} interleaved rounds of {args.seconds:g} s; in the main "
        f"process each image {where}"
    )
    figures = []
    for name in streams:
        print(
            f"  {name}: {statistics.median(rates[name]):,.0f} images/s, main process "
            f"{statistics.median(cpu[name]):.2f} ms CPU an image"
        )
    for values, unit, group in ((rates, "images/s", "rate"), (cpu, "ms CPU an image", "main")):
        print(f"  uint8 / float32, {unit}: {results.spread(values['uint8'], values['float32'])}")
        figures.append(results.row("float32", values["float32"], unit=unit, group=group))
        figures.append(
            results.row("uint8", values["uint8"], values["float32"], unit=unit, group=group)
        )
    results.write(
        args.json,
        benchmark="handover_bytes",
        title=f"a {size[0]} x {size[1]} detection image handed to the main process, {where}",
        baseline="float32",
        rows=figures,
        settings={
            "size": list(size),
            "workers": args.workers,
            "batch_size": args.batch_size,
            "seconds": args.seconds,
            "rounds": args.rounds,
        },
    )


if __name__ == "__main__":
    main()
