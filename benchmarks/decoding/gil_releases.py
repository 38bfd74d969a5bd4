"""How many times a thread worker's sample lets go of the GIL, and where (issue 52, item 3).

On many cores, worker threads wait on the GIL's hand-overs: a thread that lets go of the GIL
(around a system call, a decode, a torch call, a tensor's free) must take it back among all
the others. This counts them: perf puts a probe on CPython's ``PyEval_SaveThread`` (which every
release goes through) and records each call with its stack while a thread loader
(``fastload.ImageFolder`` with ``RandomResizedCrop(224)`` + flip, batch 64, ``--workers``
threads) makes ``--batches`` batches. The recording is switched on only for that epoch, after a
warm-up epoch of a loader of its own (imports, files in the page cache, code run once), through
perf's control FIFO; its count over the images is what one image costs. A count, not a timing:
it is the same on 2 cores as on 64.

Needs ``perf`` (Debian: ``apt-get install linux-perf``; ``--control``, perf 5.10 or later) and
the right to add probes (root).

Run: python benchmarks/decoding/gil_releases.py [--data DIR] [--workers 2] [--batches 20] [--top 12]
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
WARM_UP = 3  # batches, in an epoch of their own before the recording
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


def _callers(event: str, args: argparse.Namespace, out: Path) -> collections.Counter[str]:
    """Each release's two innermost callers, counted, over the measured epoch."""
    data, control, ack = out / "releases.data", out / "control", out / "ack"
    os.mkfifo(control)
    os.mkfifo(ack)
    command = [sys.executable, __file__, "--row", str(args.batches), "--data", args.data]
    command += ["--workers", str(args.workers), "--control", str(control), "--ack", str(ack)]
    perf = ["perf", "record", "-q", "-e", event, "--call-graph", "dwarf", "-o", str(data)]
    perf += ["-D", "-1", "--control", f"fifo:{control},{ack}"]  # on only when the row says
    recorded = subprocess.run([*perf, *command], capture_output=True, text=True)
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


def _tell_perf(args: argparse.Namespace, command: str) -> None:
    """Switch perf's recording on or off, and wait until it has."""
    with open(args.control, "w") as control:
        control.write(f"{command}\n")
    with open(args.ack) as ack:
        ack.readline()


def _row(args: argparse.Namespace) -> None:
    """The loader, in perf's process: a warm-up epoch, then ``--batches`` batches recorded."""
    import torch

    import fastload
    from fastload import transforms as T

    geometry = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(args.data, geometry)

    def epoch(batches: int) -> None:
        order = torch.Generator().manual_seed(batches)
        sampler = torch.utils.data.RandomSampler(
            dataset, num_samples=batches * BATCH, generator=order
        )
        loader = fastload.DataLoader(
            dataset,
            batch_size=BATCH,
            sampler=sampler,
            num_workers=args.workers,
            worker_type="thread",
        )
        for _ in loader:
            pass

    epoch(WARM_UP)
    _tell_perf(args, "enable")
    epoch(args.row)
    _tell_perf(args, "disable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: the cached default)")
    parser.add_argument("--workers", type=int, default=2, help="worker threads")
    parser.add_argument("--batches", type=int, default=20, help="batches recorded")
    parser.add_argument("--top", type=int, default=12, help="callers to list")
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--control", help=argparse.SUPPRESS)
    parser.add_argument("--ack", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data is None:
        from fastload.synthetic import default_data

        args.data = str(default_data())
    if args.row is not None:
        _row(args)
        return
    if args.batches < 1:
        sys.exit(f"--batches {args.batches}: at least 1")
    if shutil.which("perf") is None:
        sys.exit(
            "this benchmark counts with perf, which is not installed: apt-get install linux-perf"
        )
    library = _library()
    event, added = _probe(library)
    try:
        with tempfile.TemporaryDirectory() as folder:
            counts = _callers(event, args, Path(folder))
    finally:
        if added:
            subprocess.run(["perf", "probe", "-d", event.split(":")[-1]], capture_output=True)
    images = args.batches * BATCH
    total = sum(counts.values()) / images
    print(f"GIL releases an image: {total:.2f} ({args.workers} worker threads, {images} images)")
    for caller, count in counts.most_common(args.top):
        print(f"  {count / images:6.2f}  {caller[:120]}")


if __name__ == "__main__":
    main()
