"""Worker processes' kept batch memory (``fastload.memory.shared_buffers``) against fresh memory for
each batch, as torch makes it (``FASTLOAD_SHARED_RING=0``).

Pipelines, each with the ring on and off, ``N`` worker processes:

* ``classification float32``: ``fastload.ImageFolder`` with ``RandomResizedCrop(224) +
  RandomHorizontalFlip`` fused with decoding, ``batch_transforms=gpu.Normalize`` (ImageNet's
  mean and std), batch 64: one float32 batch of 38.5 MB a storage;
* ``classification uint8``: the same without the normalize (torch's ``default_collate``,
  whose images the workers stack into their ring);
* ``detection multiscale`` and ``detection ssd``: torchvision's detection reference presets
  with masks on a v2-wrapped ``CocoDetection`` (``benchmarks/peers/detection_swap.py``'s), with
  ``accelerate=True``, the references' collate, batch 4: one storage a float32 image, of
  varying sizes.

Each row runs in a process of its own, one slice a round, the rows' order rotated each round;
a slice starts after the loader's first batches. Its figures: images/s, and the most shared
memory the machine held beyond what it held before the row began (``Shmem`` of
``/proc/meminfo``, read after every batch; run it on an otherwise idle machine). Ratios are per
round, the ring on against off.

Run: python benchmarks/loader/shared_ring.py [--data DIR] [--workers 2] [--seconds 15] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results as results_json

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
PIPELINES = ("classification uint8", "classification float32", "detection multiscale")
PIPELINES += ("detection ssd",)


def _shmem_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _classification(root: Path, dtype: str, workers: int) -> Any:
    import fastload
    from fastload import gpu
    from fastload import transforms as T

    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(root, geometry)
    ops = {"batch_transforms": gpu.Normalize(MEAN, STD)} if dtype == "float32" else {}
    return fastload.DataLoader(
        dataset,
        batch_size=64,
        sampler=torch.utils.data.RandomSampler(dataset, num_samples=1 << 20),
        num_workers=workers,
        persistent_workers=True,
        **ops,
    )


def _detection(coco: Path, augmentation: str, workers: int) -> Any:
    from peers.detection_swap import collate, dataset

    import fastload

    data = dataset(coco / "images", coco / "annotations.json", augmentation, True)
    sampler = torch.utils.data.RandomSampler(data, num_samples=1 << 20)
    return fastload.DataLoader(
        data,
        batch_size=4,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=True,
        collate_fn=collate,
        accelerate=True,
    )


def row(args: argparse.Namespace) -> None:
    """One slice of one row, in this process: images/s and the shared memory's peak, as JSON."""
    from fastload.autotune.rates import endless

    pipeline = args.row
    before = _shmem_mib()
    if pipeline.startswith("classification"):
        loader = _classification(Path(args.data), pipeline.split()[-1], args.workers)
    else:
        loader = _detection(Path(args.coco), pipeline.split()[-1], args.workers)
    batches = endless(loader)
    peak = 0.0
    for _ in range(3 * args.workers):  # warm-up: workers started, files in the page cache
        next(batches)
    seen, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < args.seconds:
        images = next(batches)[0]
        seen += len(images)
        peak = max(peak, _shmem_mib() - before)
    print(json.dumps({"rate": seen / elapsed, "shm": peak}), flush=True)
    os._exit(0)  # the workers are not waited for


def _slice(args: argparse.Namespace, pipeline: str, ring: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--row", pipeline, "--data", args.data]
    command += ["--coco", args.coco, "--workers", str(args.workers)]
    command += ["--seconds", str(args.seconds)]
    env = {**os.environ, "FASTLOAD_SHARED_RING": "1" if ring else "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{pipeline} (ring {ring}) failed:\n{done.stderr[-3000:]}")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _report(
    pipeline: str, on: list[dict[str, float]], off: list[dict[str, float]]
) -> list[dict[str, Any]]:
    """Print one pipeline's ring-on against ring-off figures; its rows for the JSON."""
    rows = []
    for unit, key in (("images/s", "rate"), ("MiB", "shm")):
        fresh = [f[key] for f in off]
        rows.append(results_json.row(f"{pipeline}, fresh", fresh, unit=unit, group=pipeline))
        kept = [f[key] for f in on]
        rows.append(results_json.row(f"{pipeline}, ring", kept, fresh, unit=unit, group=pipeline))
    speed, memory = rows[1], rows[3]
    print(
        f"{pipeline}: ring {speed['median']:.0f} images/s against {rows[0]['median']:.0f}: "
        f"{speed['ratio']:.2f}x ({speed['low']:.2f}-{speed['high']:.2f}); shared memory at the "
        f"peak {memory['median']:.0f} against {rows[2]['median']:.0f} MiB"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: made here)")
    parser.add_argument("--coco", help="a COCO-like set made by make_coco (default: made here)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0, help="one slice of one row")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    results_json.add_argument(parser)
    parser.add_argument("--row", help=argparse.SUPPRESS)  # a row's own process
    args = parser.parse_args()
    if args.row:
        row(args)
        return
    from fastload.synthetic import make_coco, make_image_folder

    made = Path(tempfile.mkdtemp(prefix="fastload-ring-"))
    args.data = args.data or str(make_image_folder(made / "folder", images=400))
    if not args.coco:
        make_coco(made / "coco", images=200)
        args.coco = str(made / "coco")
    slices = [(p, ring) for p in args.pipelines for ring in (True, False)]
    figures: dict[tuple[str, bool], list[dict[str, float]]] = {key: [] for key in slices}
    for r in range(args.rounds):
        shift = r % len(slices)
        for key in slices[shift:] + slices[:shift]:
            figures[key].append(_slice(args, *key))
    print(f"{args.workers} worker processes, {args.rounds} interleaved rounds of {args.seconds} s")
    rows = []
    for pipeline in args.pipelines:
        rows += _report(pipeline, figures[(pipeline, True)], figures[(pipeline, False)])
    results_json.write(
        args.json,
        benchmark="shared_ring",
        title="worker processes' kept batch memory against fresh memory",
        baseline="FASTLOAD_SHARED_RING=0",
        rows=rows,
        settings={"workers": args.workers, "seconds": args.seconds, "rounds": args.rounds},
    )


if __name__ == "__main__":
    main()
