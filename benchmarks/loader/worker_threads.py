"""fastload's workers as threads of one process against worker processes (issue 39).

The same ``fastload.ImageFolder`` with ``RandomResizedCrop(224) + RandomHorizontalFlip`` (fused
with decoding), batch 64, ``N`` workers of each kind, as uint8 batches and as float32 batches
normalized by ``batch_transforms=gpu.Normalize`` (ImageNet's mean and std). The float32 rows
are also set against a hand-written DALI CPU pipeline with ``N`` threads doing the same work
(``decoders.image_random_crop`` -> ``resize`` -> ``crop_mirror_normalize`` with a random
mirror; ``benchmarks/peers/dali_overhead.py``'s), when DALI is installed.

Each row runs in a process of its own, one measuring slice per round, with the rows' order
rotated each round; a slice starts after the loader's first batches (workers started, files
cached). Memory: the sum of the peak resident memory (VmHWM) of the row's process and of each
of its worker processes. Ratios are per round (the same round's slices saw the same load);
each kind's float32 row is also set against its own uint8 row (issue 52: float32 at nearly the
cost of uint8).

Two more rows bound what any kind of worker could give: "one core" runs the samples' own work
a batch at a time, as the workers make them (read, decode fused with the crop into the batch's
slots: ``ImageDataset.load_stacked``; for float32 normalized as it is written, as the
loaders' batches are) in a
loop on one core with no loader at all; ``N`` times it is
the ceiling for ``N`` workers on ``N`` free cores, and the report says which share of it each
kind reaches.

``--gil`` (needs ``pip install py-spy``) attaches py-spy to each thread row's process for its
slice and counts the samples in which some thread holds the GIL: the share of the time the
GIL is held, over the images made, is what one image costs of the one interpreter, and its
inverse the most images/s one process can make however many cores and threads it has.

``--cores 4 8 16`` repeats the whole comparison for each count, the rows' processes pinned
to that many cores (as ``taskset`` would) with as many workers of each kind: how far threads
scale against processes on a larger machine (the GPU check runs it).

Run: python benchmarks/loader/worker_threads.py [--data DIR] [--workers 2] [--seconds 20]
     [--rounds 3] [--gil] [--cores N [N ...]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results as results_json

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ROWS = (
    "process uint8",
    "thread uint8",
    "process float32",
    "thread float32",
    "DALI CPU float32",
    "one core uint8",
    "one core float32",
)
TARGETS = {"thread uint8": 1.1, "thread float32": 1.4}  # issue 39's, against the processes
FLOAT_TO_UINT8 = 0.9  # issue 52's: a float32 batch at nearly the cost of a uint8 one
GIL_HZ = 250  # py-spy's samples a second


def _peak_kib(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fastload_batches(root: Path, kind: str, dtype: str, workers: int, batch: int) -> Any:
    import fastload
    from fastload import gpu
    from fastload import transforms as T
    from fastload.autotune.rates import endless

    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(root, geometry)
    sampler = torch.utils.data.RandomSampler(dataset, num_samples=100 * batch)
    ops = {"batch_transforms": gpu.Normalize(MEAN, STD)} if dtype == "float32" else {}
    loader = fastload.DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        worker_type=kind,
        persistent_workers=True,
        **ops,
    )
    return endless(loader)


def _dali_batches(root: Path, workers: int, batch: int) -> Any:
    from peers.dali_overhead import hand_written

    return hand_written(root, "train-normalize", workers, batch)


def _one_core(root: Path, dtype: str, batch: int, seconds: float) -> dict[str, Any]:
    """The samples' own work in a loop on one core, no loader: images/s. A batch at a time,
    as the workers make them (``load_stacked``: decoded into one batch tensor where it can)."""
    import fastload
    from fastload import gpu
    from fastload import transforms as T
    from fastload.memory.stacked import StackedSamples
    from fastload.sampling import KeyedBatch, SampleKey

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(root, geometry)
    order = torch.randint(0, len(dataset), (1 << 20,), generator=torch.Generator().manual_seed(0))

    # float32: normalized as the decoder writes the batch, as the loaders' is
    normalizing = gpu.functional.normalizing_of(MEAN, STD) if dtype == "float32" else None

    def one(n: int) -> None:
        first = n * batch  # each sample drawn from a seed of its own
        keys = [SampleKey(int(order[k % len(order)]), seed=k) for k in range(first, first + batch)]
        samples = dataset.load_stacked(KeyedBatch(keys, n), normalizing=normalizing)
        if isinstance(samples, StackedSamples):
            images = samples.images
        else:
            images = torch.stack([image for image, _ in samples])
        if normalizing is not None and not isinstance(samples, StackedSamples):
            gpu.functional.normalize(images, MEAN, STD)  # the loaders' kernel, a batch at once

    for n in range(3):  # warm-up, as the loaders' rows: files cached, code run once
        one(len(order) // batch - 1 - n)
    seen, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        one(seen)
        seen += 1
    return {"rate": seen * batch / elapsed, "mib": _peak_kib(os.getpid()) / 1024, "dtype": dtype}


def _gil_share(pid: int, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` for ``seconds``: only samples whose thread holds the GIL."""
    out = Path(f"/tmp/fastload-gil-{pid}.txt")
    command = ["py-spy", "record", "--gil", "--nonblocking", "-r", str(GIL_HZ), "-f", "raw"]
    command += ["-o", str(out), "-p", str(pid), "-d", str(max(1, int(seconds)))]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _gil_samples(pid: int) -> int:
    out = Path(f"/tmp/fastload-gil-{pid}.txt")
    lines = out.read_text().splitlines() if out.exists() else []
    out.unlink(missing_ok=True)
    return sum(int(line.rsplit(" ", 1)[1]) for line in lines if line.strip())


def row(args: argparse.Namespace) -> None:
    """One slice of one row, in this process: its images/s and memory as JSON."""
    root = Path(args.data)
    if args.row.startswith("one core"):
        out = _one_core(root, args.row.split()[-1], args.batch_size, args.seconds)
        print(json.dumps(out), flush=True)
        return
    if args.row.startswith("DALI"):
        batches = _dali_batches(root, args.workers, args.batch_size)
    else:
        kind, dtype = args.row.split()
        batches = _fastload_batches(root, kind, dtype, args.workers, args.batch_size)
    for _ in range(3):  # warm-up: workers started, files in the page cache
        first = next(batches)[0]
    spy = _gil_share(os.getpid(), args.seconds) if args.gil and "thread" in args.row else None
    seen, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < args.seconds:
        seen += len(next(batches)[0])
    children = [int(p) for p in _children(os.getpid())]
    memory = sum(_peak_kib(p) for p in [os.getpid(), *children])
    out = {"rate": seen / elapsed, "mib": memory / 1024, "dtype": str(first.dtype)}
    if spy is not None:
        spy.wait()
        out["gil"] = _gil_samples(os.getpid()) / (GIL_HZ * max(1, int(args.seconds)))
    print(json.dumps(out), flush=True)
    os._exit(0)  # the workers and DALI's threads are not waited for


def _children(pid: int) -> list[str]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += (task / "children").read_text().split()
        except OSError:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2, help="workers of each kind")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0, help="one slice of one row")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--gil", action="store_true", help="measure the GIL's share of the thread rows (py-spy)"
    )
    parser.add_argument(
        "--cores",
        type=int,
        nargs="+",
        help="pin the rows to this many cores, with as many workers, for each count given",
    )
    results_json.add_argument(parser)
    parser.add_argument("--row", help=argparse.SUPPRESS)  # a row's own process
    parser.add_argument("--pin", type=int, help=argparse.SUPPRESS)  # the row's cores
    args = parser.parse_args()
    if args.data is None:
        from fastload.synthetic import default_data

        args.data = str(default_data())
    if args.row:
        if args.pin:
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.pin])
        row(args)
        return
    if args.gil and shutil.which("py-spy") is None:
        raise SystemExit(
            "--gil samples the GIL with py-spy, which is not installed: pip install py-spy"
        )
    rows = [r for r in ROWS if not r.startswith("DALI") or _has_dali()]
    available = len(os.sched_getaffinity(0))
    figures_all: list[dict[str, Any]] = []
    for count in args.cores or [None]:
        if count is not None and count > available:
            print(f"\n{count} cores: skipped, this process may run on {available}")
            continue
        if count is not None:
            args.pin = args.workers = count
            print(f"\npinned to {count} cores:")
        where = f"{args.workers} workers" + (f" on {count} cores" if count else "")
        figures_all += figures(compare(rows, args), where)
    results_json.write(
        args.json,
        benchmark="worker_threads",
        title="worker threads against worker processes (RandomResizedCrop 224 + flip)",
        baseline="process",
        rows=figures_all,
        settings={k: getattr(args, k) for k in ("batch_size", "seconds", "rounds", "data")},
    )


def compare(rows: list[str], args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every row, ``args.rounds`` times in rotated order, then the report."""
    print(
        f"torch {torch.__version__}; {args.workers} workers / threads, batch "
        f"{args.batch_size}, {args.rounds} rounds of {args.seconds:g} s slices; data: {args.data}"
    )
    results: dict[str, list[dict[str, float]]] = {r: [] for r in rows}
    for k in range(args.rounds):
        for name in rows[k % len(rows) :] + rows[: k % len(rows)]:
            results[name].append(_slice(name, args))
            print(f"  round {k + 1}: {name}: {results[name][-1]['rate']:.0f} images/s", flush=True)
    report(results, args.workers)
    return results


def figures(results: dict[str, list[dict[str, Any]]], where: str) -> list[dict[str, Any]]:
    """The rows for ``--json``: each kind of worker against the process workers, per dtype, in
    images/s and in peak memory."""
    out = []
    for kind in ("uint8", "float32"):
        base = results[f"process {kind}"]
        for name in (f"process {kind}", f"thread {kind}", f"DALI CPU {kind}"):
            if name not in results:
                continue
            slices = results[name]
            for unit, key in (("images/s", "rate"), ("MiB", "mib")):
                out.append(
                    results_json.row(
                        name.replace(f" {kind}", ""),
                        [s[key] for s in slices],
                        None if slices is base else [s[key] for s in base],
                        unit=unit,
                        target=TARGETS.get(name) if unit == "images/s" else None,
                        group=f"{kind}, {where}",
                    )
                )
    for kind in ("process", "thread"):  # the same loader's float32 against its uint8
        float32, uint8 = results[f"{kind} float32"], results[f"{kind} uint8"]
        out.append(
            results_json.row(
                kind,
                [s["rate"] for s in float32],
                [s["rate"] for s in uint8],
                target=FLOAT_TO_UINT8,
                group=f"float32 against uint8, {where}",
                against=f"{kind} uint8",
            )
        )
    return out


def _has_dali() -> bool:
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        print("DALI is not installed: no DALI row (pip install nvidia-dali-cuda130)")
        return False
    return True


def _slice(name: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--row", name, "--data", args.data]
    command += ["--workers", str(args.workers), "--batch-size", str(args.batch_size)]
    command += ["--seconds", str(args.seconds)] + (["--gil"] if args.gil else [])
    command += ["--pin", str(args.pin)] if args.pin else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"row {name!r} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(results: dict[str, list[dict[str, Any]]], workers: int) -> None:
    """Medians, and the per-round ratios of the targets with their range."""
    print(f"\n  {'row':<18} {'images/s':>9} {'peak MiB (all processes)':>26}")
    for name, slices in results.items():
        rate = statistics.median(s["rate"] for s in slices)
        mib = statistics.median(s["mib"] for s in slices)
        print(f"  {name:<18} {rate:>9.0f} {mib:>26.0f}")
    pairs = [
        ("thread float32", "process float32", 1.4),
        ("thread uint8", "process uint8", 1.1),
        ("thread float32", "DALI CPU float32", 1.3),
        ("process float32", "process uint8", FLOAT_TO_UINT8),
        ("thread float32", "thread uint8", FLOAT_TO_UINT8),
    ]
    for ours, base, target in pairs:
        if base not in results:
            continue
        spread = results_json.spread(
            [a["rate"] for a in results[ours]], [b["rate"] for b in results[base]]
        )
        print(f"  {ours} / {base}: {spread}; target {target}x")
    for kind in ("uint8", "float32"):
        threads, processes = results[f"thread {kind}"], results[f"process {kind}"]
        pairs_mib = zip(threads, processes, strict=True)
        ratio = statistics.median(t["mib"] / p["mib"] for t, p in pairs_mib)
        print(f"  memory, threads / processes, {kind}: {ratio:.2f}x")
    _ceilings(results, workers)
    _gil_walls(results)


def _ceilings(results: dict[str, list[dict[str, Any]]], workers: int) -> None:
    """Each kind's share of ``workers`` cores doing the samples' own work and nothing else."""
    for kind in ("uint8", "float32"):
        core = statistics.median(s["rate"] for s in results[f"one core {kind}"])
        shares = []
        for name in (f"process {kind}", f"thread {kind}"):
            rate = statistics.median(s["rate"] for s in results[name])
            shares.append(f"{name.split()[0]}es {rate / (core * workers):.0%}")
        print(
            f"  ceiling, {kind}: one core {core:.0f} images/s, x{workers} = "
            f"{core * workers:.0f}; reached: {', '.join(shares).replace('threades', 'threads')}"
        )


def _gil_walls(results: dict[str, list[dict[str, Any]]]) -> None:
    """Where the GIL's share was measured: its cost an image and the wall it makes."""
    for kind in ("uint8", "float32"):
        slices = [s for s in results[f"thread {kind}"] if "gil" in s]
        if not slices:
            continue
        share = statistics.median(s["gil"] for s in slices)
        rate = statistics.median(s["rate"] for s in slices)
        core = statistics.median(s["rate"] for s in results[f"one core {kind}"])
        wall = rate / max(share, 1e-9)
        print(
            f"  GIL, threads {kind}: held {share:.0%} of the time, {1e3 * share / rate:.2f} ms "
            f"an image; wall {wall:.0f} images/s for one process, about {wall / core:.1f} "
            f"cores at {core:.0f} images/s a core"
        )


if __name__ == "__main__":
    main()
