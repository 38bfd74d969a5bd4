"""fastload on Ray Data against Ray's own image pipeline, and against fastload's loader alone.

The same class-folder photos, RandomResizedCrop 224 + flip, normalized float32 batches of
``--batch-size``, labels from the folders, on a local Ray with ``--cpus`` CPUs; each row reads
whole epochs, rounds interleaved, after one untimed epoch of each (the processes of every kind
started, the files in the page cache), and the figure is images/s over an epoch (each epoch's
own start-up included, as a training epoch pays it):

* ``Ray's pipeline``: what Ray's documentation and its image-classification benchmark do:
  ``ray.data.read_images`` (Pillow decodes each whole image), torchvision's train transform in
  ``map`` (RandomResizedCrop, flip, ToTensor, Normalize on each row), ``iter_torch_batches``;
* ``fastload on Ray``: ``fastload.ray.epoch_dataset`` of a ``fastload.DataLoader`` over
  ``fastload.ImageFolder`` (the crop fused with decoding, in Ray tasks), read back with
  ``fastload.ray.batches`` (``gpu.Normalize`` on each batch in the Ray tasks, as the loader's
  workers run it);
* ``Ray's, no reserve``: the same with Ray Data's per-operator resource reservation turned
  off, as ``fastload.ray`` runs its epochs;
* ``fastload alone``: the same loader iterated on this machine with ``--cpus`` worker processes.

Also each row's memory: the peak, during one more epoch after the timed rounds (sampling it
costs CPU, kept out of the timed epochs), of the summed proportional set size (PSS: shared
memory such as Ray's object store counted once) of this process and all its children (Ray's
processes, the loader's workers), less that sum measured idle after the untimed epochs (all of
them started and waiting).

Run: python benchmarks/peers/ray_data.py --data DIR [--cpus 2] [--rounds 3] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import torch

import fastload
from fastload import gpu
from fastload import transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def rays_pipeline(root: Path, batch_size: int, *, reservation: bool = True) -> Any:
    """An epoch of Ray's own pipeline: its batches; ``reservation=False`` with Ray Data's
    per-operator resource reservation off, as ``fastload.ray`` runs its epochs."""
    import ray
    import torchvision.transforms as TV
    from PIL import Image

    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    index = {name: k for k, name in enumerate(classes)}
    transform = TV.Compose(
        [
            TV.RandomResizedCrop(224),
            TV.RandomHorizontalFlip(),
            TV.ToTensor(),
            TV.Normalize(MEAN, STD),
        ]
    )

    def prepare(row: dict[str, Any]) -> dict[str, Any]:
        image = transform(Image.fromarray(row["image"]))
        return {"image": image.numpy(), "label": index[Path(row["path"]).parent.name]}

    dataset = ray.data.read_images(str(root), mode="RGB", include_paths=True)
    dataset.context.op_resource_reservation_enabled = reservation
    dataset = dataset.map(prepare)
    return dataset.iter_torch_batches(batch_size=batch_size, drop_last=False)


def fastload_loader(root: Path, args: argparse.Namespace, workers: int) -> fastload.DataLoader:
    dataset = fastload.ImageFolder(
        root, T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    )
    return fastload.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        batch_transforms=gpu.Normalize(MEAN, STD),
        generator=torch.Generator().manual_seed(0),
    )


def epoch_rate(batches: Any) -> float:
    """Images/s over one epoch of ``batches``."""
    start, images = time.perf_counter(), 0
    for batch in batches:
        images += len(batch["image"] if isinstance(batch, dict) else batch[0])
    return images / (time.perf_counter() - start)


def total_memory() -> int:
    """The proportional set size (PSS) of this process and all its descendants (Ray's
    processes are its children), summed: shared memory (the object store, the loader's
    batches) counts once, split among the processes that map it."""
    me = psutil.Process()
    total = 0
    for process in [me, *me.children(recursive=True)]:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            continue
    return total


class PeakMemory:
    """The largest :func:`total_memory` while in the block, sampled every 0.2 s."""

    def __enter__(self) -> PeakMemory:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, total_memory())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a class folder of photos")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    results.add_argument(parser)
    args = parser.parse_args()
    import ray

    root = Path(args.data)
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    on_ray, alone = fastload_loader(root, args, 0), fastload_loader(root, args, args.cpus)
    rows = {
        "Ray's pipeline": lambda: rays_pipeline(root, args.batch_size),
        "Ray's, no reserve": lambda: rays_pipeline(root, args.batch_size, reservation=False),
        "fastload on Ray": lambda: fastload.ray.batches(fastload.ray.epoch_dataset(on_ray), on_ray),
        "fastload alone": lambda: iter(alone),
    }
    for epoch in rows.values():  # workers of every kind started, the files in the page cache
        epoch_rate(epoch())
    idle = total_memory() / 2**20  # Ray's processes and the loader's workers, waiting
    rates: dict[str, list[float]] = {name: [] for name in rows}
    for k in range(args.rounds):
        for name, epoch in rows.items():
            rates[name].append(epoch_rate(epoch()))
            print(f"  round {k + 1}: {name}: {rates[name][-1]:,.0f} images/s", flush=True)
    # the memory in an epoch of its own: sampling every process's PSS costs tens of ms of CPU
    # each time, which taken from the timed epochs on 2 CPUs lowered the rows unevenly
    memory: dict[str, list[float]] = {}
    for name, epoch in rows.items():
        with PeakMemory() as peak:
            epoch_rate(epoch())
        memory[name] = [peak.peak / 2**20 - idle]
    ray.shutdown()
    report(rates, memory, args)


def report(
    rates: dict[str, list[float]], memory: dict[str, list[float]], args: argparse.Namespace
) -> None:
    print(
        f"\n{args.data}, {args.cpus} CPUs, batch {args.batch_size}, RandomResizedCrop 224 + flip "
        f"+ Normalize (float32), {args.rounds} rounds of one epoch each"
    )
    for name in rates:
        print(
            f"  {name:<18} {statistics.median(rates[name]):7,.0f} images/s   peak memory "
            f"{memory[name][0]:7,.0f} MiB above idle"
        )
    for ours, base in (
        ("fastload on Ray", "Ray's pipeline"),
        ("fastload on Ray", "Ray's, no reserve"),
        ("fastload on Ray", "fastload alone"),
    ):
        print(f"  {ours} / {base}: {results.spread(rates[ours], rates[base])}")
    base = rates["Ray's pipeline"]
    rows = [
        results.row(name, values, None if values is base else base)
        for name, values in rates.items()
    ]
    rows += [
        results.row(
            name, values, None if name == "Ray's pipeline" else memory["Ray's pipeline"], unit="MiB"
        )
        for name, values in memory.items()
    ]
    results.write(
        args.json,
        benchmark="ray_data",
        title="fastload on Ray Data against Ray's own image pipeline (RRC 224 + flip)",
        baseline="Ray's pipeline",
        rows=rows,
        settings={"cpus": args.cpus, "rounds": args.rounds, "batch_size": args.batch_size},
    )


if __name__ == "__main__":
    main()
