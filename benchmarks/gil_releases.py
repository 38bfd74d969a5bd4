"""How many times a thread worker's sample lets go of the GIL, and where (issue 52, item 3).

On many cores, worker threads wait on the GIL's hand-overs: a thread that lets go of the GIL
(around a system call, a decode, a torch call, a tensor's free) must take it back among all
the others. This counts them: perf puts a probe on CPython's ``PyEval_SaveThread`` (which every
release goes through) and records each call with its stack while a thread loader
(``fastload.ImageFolder`` with ``RandomResizedCrop(224)`` + flip, batch 64, ``--workers``
threads) makes ``--batches`` batches; the same is run with fewer batches, and the difference,
over the images between them, is what one image costs (the start-up's imports and threads
fall out). A count, not a timing: it is the same on 2 cores as on 64.

Needs ``perf`` (Debian: ``apt-get install linux-perf``) and the right to add probes (root).

Run: python benchmarks/gil_releases.py [--data DIR] [--workers 2] [--batches 5 25] [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

BATCH = 64
EVENT = "PyEval_SaveThread"


def _library() -> str:
    """The file holding CPython's ``PyEval_SaveThread``: libpython, or the executable."""
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
        folder = sysconfig.get_config_var("LIBDIR")
        if name and folder and (Path(folder) / name).exists():
            return str(Path(folder) / name)
    return os.path.realpath(sys.executable)


def _probe(library: str) -> tuple[str, bool]:
    """The perf event of a probe on ``PyEval_SaveThread`` (added if missing), and whether it
    was added here (to remove it after)."""
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        if f"{EVENT} " in line + " " and library in line:
            return line.split()[0], False
    added = subprocess.run(
        ["perf", "probe", "-x", library, "-a", EVENT], capture_output=True, text=True
    )
    if added.returncode != 0:
        sys.exit(f"perf could not add a probe on {EVENT} in {library}: {added.stderr.strip()}")
    for line in added.stderr.splitlines():
        if line.strip().startswith(("probe_", "probe:")):
            return line.split()[0], True
    sys.exit(f"perf added a probe but did not name it: {added.stderr.strip()}")


def _callers(
    event: str, batches: int, args: argparse.Namespace, out: Path
) -> collections.Counter[str]:
    """Each release's two innermost callers, counted, for a loader of ``batches`` batches."""
    data = out / f"releases-{batches}.data"
    command = [sys.executable, __file__, "--row", str(batches), "--data", args.data]
    command += ["--workers", str(args.workers)]
    recorded = subprocess.run(
        ["perf", "record", "-q", "-e", event, "--call-graph", "dwarf", "-o", str(data), *command],
        capture_output=True,
        text=True,
    )
    if recorded.returncode != 0:
        sys.exit(f"perf record failed: {(recorded.stdout + recorded.stderr)[-2000:]}")
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True
    ).stdout
    counts: collections.Counter[str] = collections.Counter()
    for stack in script.split("\n\n"):
        frames = [
            line.split(None, 1)[1]
            for line in stack.strip().splitlines()[1:3]
            if " " in line.strip()
        ]
        if frames:
            counts[" <- ".join(f.split("(")[0].strip() for f in frames)] += 1
    return counts


def _row(batches: int, args: argparse.Namespace) -> None:
    """The loader, in its own process: ``batches`` batches of a thread loader."""
    import torch

    import fastload
    from fastload import transforms as T

    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(args.data, geometry)
    order = torch.Generator().manual_seed(0)
    sampler = torch.utils.data.RandomSampler(dataset, num_samples=batches * BATCH, generator=order)
    loader = fastload.DataLoader(
        dataset, batch_size=BATCH, sampler=sampler, num_workers=args.workers, worker_type="thread"
    )
    for _ in loader:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2, help="worker threads")
    parser.add_argument(
        "--batches", type=int, nargs=2, default=(5, 25), help="the two runs' batch counts"
    )
    parser.add_argument("--top", type=int, default=12, help="callers to list")
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data is None:
        from fastload.synthetic import default_data

        args.data = str(default_data())
    if args.row is not None:
        _row(args.row, args)
        return
    short, long = sorted(args.batches)
    if long <= short:
        sys.exit(f"--batches {short} {long}: the second run needs more batches than the first")
    if shutil.which("perf") is None:
        sys.exit(
            "this benchmark counts with perf, which is not installed: apt-get install linux-perf"
        )
    library = _library()
    event, added = _probe(library)
    try:
        with tempfile.TemporaryDirectory() as folder:
            few = _callers(event, short, args, Path(folder))
            many = _callers(event, long, args, Path(folder))
    finally:
        if added:
            subprocess.run(["perf", "probe", "-d", event.split(":")[-1]], capture_output=True)
    images = (long - short) * BATCH
    total = (sum(many.values()) - sum(few.values())) / images
    print(f"GIL releases an image: {total:.2f} ({args.workers} worker threads, {images} images)")
    by_caller = {k: (many[k] - few[k]) / images for k in set(many) | set(few)}
    for caller, count in sorted(by_caller.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {count:6.2f}  {caller[:120]}")


if __name__ == "__main__":
    main()
