"""Fault soak: many epochs per backend, then the faults a long run meets, each with its outcome.

Soak, per backend: ``--epochs`` epochs with ``--workers`` workers (threads for an executor) over
a real folder. After each epoch: the resident memory (RSS) of this process plus its children.
After the loader is deleted: open file descriptors, ``/dev/shm`` entries, threads and child
processes, against the figures before it was built. Memory after the first epoch must stay
within 5% of the first epoch's; everything else must be back where it started.

Faults (the per-sample backend ``--fault-backend``), each checked:

* a worker killed with SIGKILL mid-epoch: an error naming the worker, no hang;
* SIGINT in the main process mid-epoch: a clean exit, no worker left, no ``/dev/shm`` leak;
* a file deleted and another overwritten with garbage after listing: ``on_error="skip"`` names
  both in ``bad_files``, ``on_error="raise"`` raises naming the file;
* the process killed (SIGKILL) mid-epoch after saving ``loader.state_dict()``, then resumed
  from it in a new process: every sample of the epoch seen exactly once across the two.

Linux only (reads /proc). Exit status 1 when a check fails.

Run: python benchmarks/loader/fault_soak.py [--data DIR] [--images 2000] [--epochs 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import fastload
from fastload import backends
from fastload import transforms as T
from fastload.synthetic import make_image_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

FAILED: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  {'PASS' if ok else 'FAIL'}  {what}", flush=True)
    if not ok:
        FAILED.append(what)


def children() -> list[int]:
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        pids += [int(p) for p in text]
    return pids


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


def resources() -> dict[str, int]:
    shm = len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "/dev/shm": shm,
        "threads": threading.active_count(),
        "children": len(children()),
    }


def settle(before: dict[str, int], timeout: float = 15.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        multiprocessing.active_children()  # reaps
        now = resources()
        if all(now[k] <= before[k] for k in before) or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def augment() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(160), T.RandomHorizontalFlip()])


def soak(
    data: Path, name: str, epochs: int, workers: int, batch_size: int
) -> dict[str, Any] | None:
    """Soak one backend; returns its memory row for ``--json`` (each later epoch's RSS against
    the first's), None with a single epoch."""
    print(f"\n{name}: {epochs} epochs, {workers} workers", flush=True)
    before = settle(resources())
    loader = fastload.DataLoader(
        fastload.ImageFolder(data, augment()),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0 and name not in backends.names("executor"),
        backend=name,
    )
    memory = []
    for _ in range(epochs):
        for _batch in loader:
            pass
        memory.append(rss_mib([os.getpid(), *children()]))
    print("  RSS per epoch (MiB, this process + workers): " + ", ".join(f"{m:.0f}" for m in memory))
    if len(memory) > 1:
        growth = max(memory[1:]) / memory[0] - 1
        check(growth <= 0.05, f"RSS after the first epoch within 5% of it ({growth:+.1%})")
    del loader, _batch
    after = settle(before)
    print(f"  before: {before}\n  after:  {after}")
    for key in before:
        check(
            after[key] <= before[key], f"{key} back to where it started after deleting the loader"
        )
    if len(memory) < 2:
        return None
    later = memory[1:]
    return results.row(name, later, [memory[0]] * len(later), unit="MiB RSS", target=1.05)


# batches of one: each worker still owes most of its share when one is killed after the second
# batch (with batches of four, a set of 24 was all prefetched by then on a loaded machine, and
# the epoch could end without an error)
KILLED_WORKER = """
import os, signal, sys, time, torch, fastload
from fastload import transforms as T
loader = fastload.DataLoader(fastload.ImageFolder(sys.argv[1], T.RandomResizedCrop(64),
    backend=sys.argv[2]), batch_size=1, num_workers=2, shuffle=True)
for i, batch in enumerate(loader):
    if i == 1:
        from multiprocessing import active_children
        os.kill(active_children()[0].pid, signal.SIGKILL)
print("NO ERROR")
"""

INTERRUPTED = """
import os, sys, time, torch, fastload
from multiprocessing import active_children
from fastload import transforms as T
loader = fastload.DataLoader(fastload.ImageFolder(sys.argv[1], T.RandomResizedCrop(64),
    backend=sys.argv[2]), batch_size=4, num_workers=2, shuffle=True)
for i, batch in enumerate(loader):
    if i == 1:
        print("WORKERS", *[p.pid for p in active_children()], flush=True)
    time.sleep(0.2)
"""

RESUMABLE = """
import json, os, sys, torch, fastload
from fastload import transforms as T
data, state, log, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
loader = fastload.DataLoader(fastload.ImageFolder(data, T.RandomResizedCrop(64),
    backend=sys.argv[5]), batch_size=4, num_workers=2, shuffle=True,
    generator=torch.Generator().manual_seed(1))
if os.path.exists(state):
    loader.load_state_dict(torch.load(state, weights_only=True))
for i, (x, y) in enumerate(loader):
    with open(log, "a") as f:
        f.write(json.dumps(x.double().sum(dim=(1, 2, 3)).tolist()) + "\\n")
    torch.save(loader.state_dict(), state + ".tmp")
    os.replace(state + ".tmp", state)  # a kill never leaves half a state
    if i + 1 == kill_at:
        os.kill(os.getpid(), 9)
"""


def run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
    )


def faults(data: Path, name: str, work: Path) -> None:
    print(f"\nfaults ({name})", flush=True)
    started = time.monotonic()
    try:
        done = run(KILLED_WORKER, str(data), name, timeout=60)
        named = "DataLoader worker (pid" in done.stderr and "killed by signal" in done.stderr
        check(done.returncode != 0 and named, "a worker killed with SIGKILL: an error naming it")
        if done.returncode == 0 or not named:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["(no output)"]
            print(f"        (exit {done.returncode}: {last[0][:200]})")
    except subprocess.TimeoutExpired:
        check(False, "a worker killed with SIGKILL: the loop hung")
    print(f"        ({time.monotonic() - started:.1f} s to the error)")

    shm_before = set(os.listdir("/dev/shm"))
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, str(data), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    workers = [int(p) for p in line[1:]]
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
        exited = "KeyboardInterrupt" in err
    except subprocess.TimeoutExpired:
        proc.kill()
        exited = False
    time.sleep(1.0)
    orphans = [p for p in workers if Path(f"/proc/{p}").exists()]
    leaked = set(os.listdir("/dev/shm")) - shm_before
    check(exited, "SIGINT mid-epoch: the process exits (KeyboardInterrupt)")
    check(workers != [] and orphans == [], f"SIGINT mid-epoch: no orphan worker ({orphans})")
    check(not leaked, f"SIGINT mid-epoch: no /dev/shm entry left ({sorted(leaked)[:3]})")

    copy = work / "changed"
    shutil.copytree(data, copy)
    for mode in ("skip", "raise"):
        dataset = fastload.ImageFolder(copy, augment(), on_error=mode, backend="auto")
        files = sorted(copy.rglob("*.jpg"))
        deleted, garbage = files[0], files[1]
        deleted.unlink(missing_ok=True)
        garbage.write_bytes(b"\xff\xd8 not a jpeg any more")
        loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2, backend=name)
        if mode == "skip":
            import warnings

            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                count = sum(len(y) for _, y in loader)
            named = {str(deleted), str(garbage)} <= set(dataset.bad_files)
            check(
                named and count == len(dataset) - 2,
                "a file deleted and one overwritten after listing: skipped and named",
            )
        else:
            try:
                for _ in loader:
                    pass
                check(False, "on_error='raise': no error for a deleted file")
            except fastload.ImageDecodeError as exc:
                check(
                    str(deleted) in str(exc) or str(garbage) in str(exc),
                    "on_error='raise': the error names the file",
                )

    state, log = work / "state.pt", work / "log"
    want_log = work / "want"
    run(RESUMABLE, str(data), str(work / "none.pt"), str(want_log), "0", name)
    first = run(RESUMABLE, str(data), str(state), str(log), "5", name)
    second = run(RESUMABLE, str(data), str(state), str(log), "0", name)

    def seen(path: Path) -> list[float]:
        import json

        return sorted(round(v, 3) for ln in path.read_text().splitlines() for v in json.loads(ln))

    check(
        first.returncode == -9 and second.returncode == 0 and seen(log) == seen(want_log),
        "killed mid-epoch and resumed: every sample of the epoch seen exactly once "
        f"({len(seen(log))} of {len(seen(want_log))})",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="an image folder (default: a synthetic one)")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backends", nargs="*", default=None, help="default: every usable one")
    parser.add_argument("--fault-backend", default="auto")
    results.add_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = args.data or make_image_folder(work / "set", images=args.images, classes=10)
        names = args.backends or [n for n in backends.names() if backends.check(n).usable]
        figures = []
        for name in names:
            if name == "auto":
                continue
            row = soak(data, name, args.epochs, args.workers, args.batch_size)
            figures += [row] if row is not None else []
        faults(data, backends.resolve(args.fault_backend), work)
    print(f"\n{len(FAILED)} check(s) failed" if FAILED else "\nevery check passed")
    results.write(
        args.json,
        benchmark="fault_soak",
        title=f"memory over {args.epochs} epochs a backend: each later epoch against the first",
        baseline="the first epoch's RSS",
        rows=figures,
        settings={k: getattr(args, k) for k in ("images", "epochs", "workers", "batch_size")},
    )
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
