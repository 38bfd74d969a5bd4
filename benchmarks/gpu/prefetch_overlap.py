"""Does fastload.DataLoader overlap loading with the training step, and what does it cost?

1. Overlap. A loader of known speed (each batch takes LOAD ms to make in a worker) feeds a
   training step of fixed duration (STEP ms). Loading and stepping one after the other takes
   n * (LOAD + STEP); overlapped, n * max(LOAD, STEP). Printed: the epoch's time over
   n * max(LOAD, STEP) (1.00 is perfect overlap) and over n * (LOAD + STEP). With CUDA the
   step is a GPU kernel of STEP ms, batches arrive through the CUDA prefetcher, and the loop
   reads a value back from the GPU every step, as a loss.item() would; without CUDA the step
   is a sleep and batches pass through.
2. Pass-through cost (always). fastload.DataLoader(device="cpu") against
   torch.utils.data.DataLoader on the same in-memory data, runs interleaved, medians compared.
3. Copy overlap (CUDA only). Large uint8 image batches, host to device, feeding a GPU step of
   fixed duration: a plain loop (`batch.cuda()` from pageable memory), a plain loop from pinned
   memory, and the CUDA prefetcher.

Run: python benchmarks/gpu/prefetch_overlap.py [--device auto|cpu|cuda] [--batches N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

import fastload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results


class TimedBatches(torch.utils.data.Dataset):
    """Each item is a whole batch that takes ``load_s`` seconds to make."""

    def __init__(self, n: int, load_s: float, shape: tuple[int, ...] = (32, 3, 64, 64)) -> None:
        self.n, self.load_s, self.shape = n, load_s, shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.load_s)
        return torch.full(self.shape, i % 256, dtype=torch.uint8), torch.full((self.shape[0],), i)


class InMemory(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.images[i], i


def gpu_sleep_cycles(seconds: float) -> int:
    """How many cycles of torch.cuda._sleep take ``seconds`` on this GPU."""
    cycles = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # warm up
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return int(cycles * seconds / (start.elapsed_time(end) / 1e3))


def make_step(device: torch.device, step_s: float) -> Callable[[object], None]:
    if device.type == "cuda":
        cycles = gpu_sleep_cycles(step_s)

        def step(batch: object) -> None:
            torch.cuda._sleep(cycles)
            images = batch[0]
            images[0, 0, 0, :1].float().sum().item()  # read back, as loss.item() would

        return step

    def step(batch: object) -> None:
        time.sleep(step_s)

    return step


def epoch_time(batches: Iterable[object], step: Callable[[object], None]) -> float:
    start = time.perf_counter()
    for batch in batches:
        step(batch)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def overlap(device: torch.device, n: int) -> None:
    print(f"\n1. overlap of loading and the step (device={device}, {n} batches)")
    print(
        f"   {'load ms':>8} {'step ms':>8} {'workers':>8} {'epoch s':>8} "
        f"{'/ max(load,step)':>17} {'/ (load+step)':>14}"
    )
    for load_ms, step_ms in [(30, 15), (15, 30), (25, 25)]:
        step = make_step(device, step_ms / 1e3)
        ds = TimedBatches(n, load_ms / 1e3)
        # 0 workers: batches are made in the main process, between steps (the serial
        # baseline). 1 worker: one batch per LOAD ms, made while the step runs.
        for n_workers in (0, 1):
            loader = fastload.DataLoader(ds, batch_size=None, num_workers=n_workers, device=device)
            epoch_time(loader, step)  # warm up: worker start, CUDA context
            t = epoch_time(loader, step)
            ideal = n * max(load_ms, step_ms) / 1e3
            serial = n * (load_ms + step_ms) / 1e3
            print(
                f"   {load_ms:>8} {step_ms:>8} {n_workers:>8} {t:>8.3f} "
                f"{t / ideal:>17.2f} {t / serial:>14.2f}"
            )


def passthrough(n_samples: int, trials: int) -> list[dict[str, Any]]:
    print(f"\n2. cost of fastload.DataLoader(device='cpu') against torch's, {trials} trials")
    ds = InMemory(n_samples)
    print(f"   {'workers':>8} {'torch s':>9} {'fastload s':>11} {'ratio':>7}")
    rows: list[dict[str, Any]] = []
    for workers in (0, 2):
        loaders = {
            "torch": torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers),
            "fastload": fastload.DataLoader(ds, batch_size=64, num_workers=workers, device="cpu"),
        }
        times: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():  # warm up
            epoch_time(loader, lambda b: None)
        for _ in range(trials):
            for name, loader in loaders.items():
                times[name].append(epoch_time(loader, lambda b: None))
        t, f = statistics.median(times["torch"]), statistics.median(times["fastload"])
        print(f"   {workers:>8} {t:>9.4f} {f:>11.4f} {f / t:>7.3f}")
        epochs = {name: [1 / x for x in values] for name, values in times.items()}  # a second
        group = f"pass-through, {workers} workers"
        rows += [
            results.row("torch", epochs["torch"], unit="epochs/s", group=group),
            results.row(
                "fastload", epochs["fastload"], epochs["torch"], unit="epochs/s", group=group
            ),
        ]
    return rows


def copy_overlap(device: torch.device, n: int, batch: int) -> list[dict[str, Any]]:
    print(f"\n3. host-to-device copy against a GPU step ({n} batches of {batch}x3x224x224 uint8)")
    host = [torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8) for _ in range(4)]
    pinned = [t.pin_memory() for t in host]
    mb = host[0].numel() / 2**20

    def timed(label: str, batches: Iterable[torch.Tensor], step: Callable[[object], None]) -> float:
        t = epoch_time(batches, step)
        print(f"   {label:<34} {t / n * 1e3:>8.2f} ms/batch")
        return t

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(n):
        pinned[i % 4].to(device, non_blocking=True)
    end.record()
    torch.cuda.synchronize()
    copy_s = start.elapsed_time(end) / 1e3 / n
    print(f"   copy alone: {copy_s * 1e3:.2f} ms/batch ({mb / copy_s / 1024:.1f} GiB/s pinned)")
    step_s = max(copy_s, 0.002)
    cycles = gpu_sleep_cycles(step_s)

    def step(images: torch.Tensor) -> None:
        torch.cuda._sleep(cycles)
        images[0, 0, 0, :1].float().sum().item()

    print(f"   step: {step_s * 1e3:.2f} ms of GPU work, then a read-back")
    plain = timed("plain .cuda() from pageable", (host[i % 4].to(device) for i in range(n)), step)
    pin = timed("plain .cuda() from pinned", (pinned[i % 4].to(device) for i in range(n)), step)
    ahead = fastload.CUDAPrefetcher((pinned[i % 4] for i in range(n)), device=device)
    pre = timed("CUDAPrefetcher (side stream)", ahead, step)
    ideal = n * max(copy_s, step_s)
    print(
        f"   prefetcher / max(copy, step): {pre / ideal:.2f};  plain pageable / prefetcher: "
        f"{plain / pre:.2f};  plain pinned / prefetcher: {pin / pre:.2f}"
    )
    group, unit = f"copies of {batch} images against a GPU step", "batches/s"
    pageable = [n / plain]  # one epoch each
    return [
        results.row("plain .cuda() from pageable", pageable, unit=unit, group=group),
        results.row("plain .cuda() from pinned", [n / pin], pageable, unit=unit, group=group),
        results.row("CUDAPrefetcher", [n / pre], pageable, unit=unit, group=group),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--batches", type=int, default=30, help="batches per overlap epoch")
    parser.add_argument("--trials", type=int, default=7, help="runs per pass-through median")
    results.add_argument(parser)
    args = parser.parse_args()
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    print(f"fastload {fastload.__version__}, torch {torch.__version__}, device {device}")
    overlap(device, args.batches)
    figures = passthrough(16384, args.trials)
    if device.type == "cuda":
        figures += copy_overlap(device, 100, 256)
    else:
        print("\n3. host-to-device copy overlap: skipped, no CUDA device here")
    results.write(
        args.json,
        benchmark="prefetch_overlap",
        title=f"the loader's pass-through cost and the prefetcher's copies, {device}",
        baseline="torch's loader (pass-through); plain .cuda() from pageable memory (copies)",
        rows=figures,
        settings={"device": str(device), "batches": args.batches, "trials": args.trials},
    )


if __name__ == "__main__":
    main()
