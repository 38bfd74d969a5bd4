"""Prove every GPU path of fastload on a GPU machine that cannot download anything.

Run through ``scripts/gpu_check.sh`` (see its header). Two steps:

* ``--fetch WHEELDIR``, where the package registry is reachable: download the wheels the GPU
  machine lacks (nvImageCodec and nvJPEG for CUDA 13, PyTurboJPEG, webdataset, pytest and what
  it needs), for CPython 3.12 on manylinux x86-64, into one folder (at most 60 MB).
* ``OUTDIR [--wheels WHEELDIR]`` on the GPU machine: install those wheels into a temporary
  folder, compile fastload's extensions in the source tree where they do not import
  (``scripts/gpu_builds.py``), then run each part (``scripts/gpu_parts.py``), writing its output
  to OUTDIR and one line per part: ``passed``, ``failed`` or ``skipped`` with the reason.
  ``--dry-run`` runs the same script on a machine without a GPU: the parts that need one are
  skipped (their commands are still checked to start), everything else runs.

A device call has a hard limit, and a command killed at it returns nothing it wrote. So
``--budget SECONDS`` bounds the whole check: each part runs for at most what is left of it,
and one with too little left is not started (the summary says so). The summary is written
again after every part, and ``--pack FILE`` writes OUTDIR into one archive after every part
(a device call brings back a few files only). ``--only`` takes part names and plan names
(``gpu_parts.PLANS``), run in the order given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dali_parts as dali_wheels  # beside this script
import gpu_builds
import gpu_parts
from gpu_parts import Part

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MB = 60
# What the GPU machine lacks (it has torch, torchvision, Pillow, OpenCV and numpy). PyTurboJPEG
# 1.x (for libjpeg-turbo 2.x) is published as source only: it is built into a wheel here.
PURE = ["PyTurboJPEG>=1.7,<2"]
WHEELS = [
    "nvidia-nvimgcodec-cu13==0.9.*",
    "nvidia-nvjpeg==13.*",
    # several test modules import webdataset at the top: without it "gpu tests" stops at collection
    "webdataset==1.0.2",
    "braceexpand>=0.1.7",
    # COCO's masks, for the detection part and its GPU test (torchvision's wrapper draws them)
    "pycocotools>=2.0",
    "pytest>=8",
    # the suite's settings name its parallel workers (pyproject.toml); the GPU tests run in one
    # process here (-n 0), on the one device
    "pytest-xdist>=3.5",
    "execnet>=2.1",
    # the GIL's share of the thread workers on every core ("worker threads gil"): 3 MB
    "py-spy>=0.3",
    "pygments>=2.15",
    "pytest-timeout>=2.2",
    "pluggy>=1.5",
    "iniconfig>=2",
    "packaging>=24",
]
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "any",
]


class Budget:
    """The seconds the whole check may take, from its start: each part runs for at most what
    is left, and one left less than it needs to be worth starting (``Part.least``) is not.

    Args:
        seconds: The whole check's time; ``None``: each part has its own limit alone.
        clock: Seconds, monotonic (tests give a clock of their own).
    """

    def __init__(self, seconds: float | None, *, clock: Callable[[], float] = time.monotonic):
        if seconds is not None and seconds <= 0:
            raise ValueError(f"--budget {seconds:g}: give the whole check's seconds, e.g. 570")
        self.seconds = seconds
        self._clock = clock
        self._started = clock()

    def left(self) -> float | None:
        """Seconds left, or ``None`` without a budget."""
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - (self._clock() - self._started))

    def limit(self, part: Part) -> int | None:
        """The part's limit: its own, or what is left when that is less; ``None``: not
        worth starting."""
        left = self.left()
        if left is None or left >= part.timeout:
            return part.timeout
        return int(left) if left >= part.least else None


class Report:
    """The parts' lines: printed as they end, and the summary (and the archive) written again
    after each, so that a check stopped from outside still leaves what it had.

    Args:
        out: OUTDIR.
        pack: The archive of OUTDIR to write after each part (``.tar.gz``); ``None``: none.
    """

    def __init__(self, out: Path, pack: Path | None = None) -> None:
        self.out, self.pack, self.results = out, pack, []

    def add(self, part: str, status: str, detail: str) -> None:
        line = f"{part:<20} {status:<8} {detail}"
        print(line, flush=True)
        self.results.append({"part": part, "status": status, "detail": detail})
        (self.out / "summary.json").write_text(json.dumps(self.results, indent=2))
        lines = [f"{r['part']:<20} {r['status']:<8} {r['detail']}" for r in self.results]
        (self.out / "summary.txt").write_text("\n".join(lines) + "\n")
        if self.pack is not None:
            partial = self.pack.with_name(self.pack.name + ".partial")
            with tarfile.open(partial, "w:gz") as archive:
                archive.add(self.out, arcname=self.out.name)
            os.replace(partial, self.pack)  # never half an archive where the pack is

    def failed(self) -> bool:
        return any(r["status"] == "failed" for r in self.results)


def fetch(folder: Path) -> int:
    """Download the wheels for the GPU machine into ``folder``; fail past LIMIT_MB."""
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(folder),
        *WHEELS,
    ]
    status = subprocess.run(command).returncode
    built = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(folder), *PURE]
    status = status or subprocess.run(built).returncode
    if shutil.which("apt-get"):  # libturbojpeg, for a machine that may lack it (Debian/Ubuntu)
        debs = ["libturbojpeg0", *gpu_builds.REGION_DEBS]
        subprocess.run(["apt-get", "download", *debs], cwd=folder)
    files = [*folder.glob("*.whl"), *folder.glob("*.deb")]
    size = sum(f.stat().st_size for f in files) / 2**20
    print(f"gpu_check: {len(files)} files, {size:.1f} MB in {folder}")
    if size > LIMIT_MB:
        print(f"gpu_check: over the {LIMIT_MB} MB limit", file=sys.stderr)
        return 1
    return status


def install(wheels: Path, env: dict[str, str]) -> Path:
    """Install the wheels into a temporary folder (no index, no dependencies); return it.

    A libturbojpeg .deb beside them is unpacked there too, and FASTLOAD_TURBOJPEG_LIB set in
    ``env`` to it, when the machine has no libturbojpeg of its own.
    """
    import ctypes.util

    target = Path(tempfile.mkdtemp(prefix="fastload-gpu-check-"))
    found = sorted(str(w) for w in wheels.glob("*.whl"))
    if not found:
        raise SystemExit(f"gpu_check: no wheels in {wheels}")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, "--no-compile", "--target", str(target), *found], check=True)
    debs = sorted(wheels.glob("libturbojpeg0_*.deb"))
    if debs and ctypes.util.find_library("turbojpeg") is None and shutil.which("dpkg"):
        unpacked = Path(tempfile.mkdtemp(prefix="fastload-libturbojpeg-"))
        subprocess.run(["dpkg", "-x", str(debs[0]), str(unpacked)], check=True)
        libraries = sorted(unpacked.rglob("libturbojpeg.so*"))
        if libraries:
            env["FASTLOAD_TURBOJPEG_LIB"] = str(libraries[0])
    return target


def cuda_available(env: dict[str, str]) -> bool:
    probe = "import torch; print(torch.cuda.is_available())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    return out.stdout.strip() == "True"


_STARTED: dict[tuple[str, ...], str] = {}  # a program's --help, asked once a check


def starts(program: tuple[str, ...], env: dict[str, str]) -> str:
    """Why ``program --help`` fails ("" where it runs): parts that run one program with
    other options (bench train and val, the train ceiling's rows) ask it once."""
    if program not in _STARTED:
        check = subprocess.run(
            [*program, "--help"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
        )
        _STARTED[program] = "" if check.returncode == 0 else check.stderr.strip()[-300:] or "?"
    return _STARTED[program]


def _keep(part: Part, out: Path, stdout: str, stderr: str) -> None:
    """Write a part's standard output and error into OUTDIR."""
    if part.output is not None:
        (out / part.output).write_text(stdout)
    (out / f"{part.output or part.name}.stderr.txt").write_text(stderr)


def run_part(part: Part, out: Path, env: dict[str, str], gpu: bool) -> tuple[str, str]:
    """Run one part; returns (status, detail)."""
    if part.needs_gpu and not gpu:
        # the command must still start: its script and options exist (--help)
        failed = starts(tuple(part.command[: part.head]), env)
        if failed:
            return "failed", f"the command does not start: {failed}"
        return "skipped", "no CUDA device here (the command starts)"
    if part.needs is not None and shutil.which(part.needs, path=env.get("PATH")) is None:
        return "skipped", f"{part.needs} is not installed (--fetch carries its wheel)"
    command = [*part.command, "--json", str(out / part.figures)] if part.figures else part.command
    env = {**env, **part.env}
    started = time.perf_counter()
    # a session of its own: at the limit its whole process group goes (a benchmark's row
    # processes and their workers too), instead of running on beside the next part
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=part.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        # what it printed before the limit (a benchmark's finished rounds) is kept
        _keep(part, out, stdout, stderr)
        return "failed", f"over its {part.timeout} s limit (its output so far is kept)"
    seconds = time.perf_counter() - started
    _keep(part, out, stdout, stderr)
    if proc.returncode != 0:
        last = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [""]
        return "failed", f"exit {proc.returncode} after {seconds:.0f} s: {last[0][:200]}"
    return "passed", f"{seconds:.0f} s"


def environment(wheels: Path | None, dali: Path | None) -> tuple[dict[str, str], list[str]]:
    """The parts' environment, with the carried wheels (and DALI's) installed; and what the
    wheels installed, by name (empty without wheels)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    paths, installed = [str(ROOT)], []
    if wheels is not None:
        target = install(wheels, env)
        paths.insert(0, str(target))
        # the wheels' programs (py-spy) are installed into the folder's bin
        env["PATH"] = os.pathsep.join([str(target / "bin"), env.get("PATH", "")])
        installed = sorted(
            p.name for p in target.iterdir() if not p.name.endswith(("-info", "bin"))
        )
    if dali is not None:
        paths.insert(0, str(install(dali, env)))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env, installed


def check(
    out: Path,
    wheels: Path | None,
    dry_run: bool,
    only: list[str] | None = None,
    *,
    dali: Path | None = None,
    budget: Budget | None = None,
    pack: Path | None = None,
) -> int:
    """Run the parts (DALI's, when ``dali`` holds its unpacked wheels; else those ``only``
    names, in its order); 0 when none failed."""
    budget = budget or Budget(None)
    out.mkdir(parents=True, exist_ok=True)
    env, installed = environment(wheels, dali)
    gpu = cuda_available(env) and not dry_run
    if not gpu and not dry_run:
        print(
            "gpu_check: no CUDA device; run with --dry-run to check the script itself",
            file=sys.stderr,
        )
        return 2
    report = Report(out, pack)
    if wheels is not None:
        report.add("wheels", "passed", f"installed {', '.join(installed)}")
    for name, (status, detail) in (
        ("region build", gpu_builds.build_region(wheels, env)),
        ("normalize build", gpu_builds.build_normalize(env)),
        ("resize build", gpu_builds.build_resize(env)),
        ("files build", gpu_builds.build_files(env)),
    ):
        report.add(name, status, detail)
    if dali is not None:
        chosen = gpu_parts.dali_parts(sys.executable)
    else:
        by_name = {part.name: part for part in gpu_parts.parts(sys.executable)}
        chosen = [by_name[name] for name in only] if only is not None else [*by_name.values()]
    for part in chosen:
        limit = budget.limit(part)
        if limit is None:
            left = budget.left() or 0.0
            report.add(part.name, "skipped", f"not started: {left:.0f} s of the budget left")
            continue
        status, detail = run_part(dataclasses.replace(part, timeout=limit), out, env, gpu)
        if limit < part.timeout and detail.startswith("over its"):
            detail += ", what was left of the budget"
        report.add(part.name, status, detail)
    return 1 if report.failed() else 0


def arguments(names: list[str]) -> argparse.ArgumentParser:
    """The command line; ``names``: the parts, for ``--only``'s help."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", nargs="?", type=Path, help="where outputs and the summary go")
    parser.add_argument("--fetch", type=Path, metavar="WHEELDIR", help="download the wheels only")
    parser.add_argument("--wheels", type=Path, metavar="WHEELDIR", help="install these first")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: skip the GPU parts")
    parser.add_argument(
        "--fetch-dali", type=Path, metavar="DIR", help="download DALI's wheels, in parts"
    )
    parser.add_argument("--dali-part", type=Path, metavar="PART", help="keep one DALI part")
    parser.add_argument(
        "--dali-finish", type=Path, metavar="OUTDIR", help="install DALI from its parts, run it"
    )
    parser.add_argument(
        "--only",
        metavar="PARTS",
        type=lambda text: [name.strip() for name in text.split(",")],
        help=f"run only these parts or plans, in this order, comma-separated; plans: "
        f"{', '.join(gpu_parts.PLANS)}; parts: {', '.join(names)}",
    )
    parser.add_argument(
        "--budget", type=float, metavar="SECONDS", help="the whole check ends within this"
    )
    parser.add_argument(
        "--pack", type=Path, metavar="FILE", help="OUTDIR as one .tar.gz, after every part"
    )
    return parser


def main() -> int:
    names = [part.name for part in gpu_parts.parts(sys.executable)]
    parser = arguments(names)
    args = parser.parse_args()
    target = args.outdir or args.dali_finish
    if (
        args.pack is not None
        and target is not None
        and args.pack.resolve().is_relative_to(target.resolve())
    ):
        parser.error(f"--pack {args.pack}: put the archive outside OUTDIR ({target})")
    try:
        budget = Budget(args.budget)  # from here: the wheels and the builds count too
    except ValueError as exc:
        parser.error(str(exc))
    only = None
    if args.only is not None:
        try:
            only = gpu_parts.expand(args.only, names)
        except ValueError as exc:
            parser.error(f"--only: {exc}")
    if args.fetch is not None:
        return fetch(args.fetch)
    if args.fetch_dali is not None:
        return dali_wheels.fetch(args.fetch_dali, [a for p in PLATFORMS for a in ("--platform", p)])
    if args.dali_part is not None:
        return dali_wheels.keep_part(args.dali_part)
    if args.dali_finish is not None:
        dali = dali_wheels.assemble()
        return check(
            args.dali_finish, args.wheels, args.dry_run, dali=dali, budget=budget, pack=args.pack
        )
    if args.outdir is None:
        parser.error("give OUTDIR (or --fetch WHEELDIR)")
    if shutil.which("nvidia-smi") and not args.dry_run:
        subprocess.run(["nvidia-smi", "-L"])
    return check(args.outdir, args.wheels, args.dry_run, only, budget=budget, pack=args.pack)


if __name__ == "__main__":
    sys.exit(main())
