"""Prove every GPU path of fastload on a GPU machine that cannot download anything.

Run through ``scripts/gpu_check.sh`` (see its header). Two steps:

* ``--fetch WHEELDIR``, where the package registry is reachable: download the wheels the GPU
  machine lacks (nvImageCodec and nvJPEG for CUDA 13, PyTurboJPEG, webdataset, pytest and what
  it needs), for CPython 3.12 on manylinux x86-64, into one folder (at most 60 MB).
* ``OUTDIR [--wheels WHEELDIR]`` on the GPU machine: install those wheels into a temporary
  folder, then run each part below, writing its output to OUTDIR and one line per part:
  ``passed``, ``failed`` or ``skipped`` with the reason. ``--dry-run`` runs the same script
  on a machine without a GPU: the parts that need one are skipped (their commands are still
  checked to start), everything else runs.

First, where fastload's extensions do not import (the GPU machine runs fastload from the source
tree), they are compiled in place: the region backend's with the libjpeg-turbo .debs ``--fetch``
carries, and the normalize kernel of float32 batches. The parts: the GPU-marked tests; ``fastload
bench --device cuda --backend all`` (train and val, stock torchvision with one worker per core as
the baseline); the prefetcher's overlap; ``fastload.gpu`` against torchvision v2's per-image loop;
torchvision's detection and segmentation reference input on the device
(``benchmarks/peers/detection_swap.py``); the training recipe side by side (ResNet-50, 224 px, bf16,
channels-last); how close ResNet-18 and ResNet-50 train to their synthetic-data speed fed by the
loader on 4, 8 and 16 cores (``benchmarks/training/train_ceiling.py``); worker threads against
worker processes pinned to 4, 8 and 16 cores (``benchmarks/loader/worker_threads.py``), and on every
core with the GIL's share sampled by py-spy (carried as a wheel); what the batch executors' CPU side
sustains (``benchmarks/loader/executor_cpu_side.py``); ``fastload autotune`` on every core.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dali_parts as dali_wheels  # beside this script

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MB = 60
# libjpeg-turbo's library and headers (Debian's packages), for compiling the region backend there.
REGION_DEBS = ["libjpeg62-turbo", "libjpeg62-turbo-dev"]
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


@dataclass
class Part:
    """One step of the check: a command, whether it needs a GPU, its time limit."""

    name: str
    command: list[str]
    needs_gpu: bool
    timeout: int
    output: str | None = None  # the file in OUTDIR its standard output goes to
    head: int = 2  # how many items of the command name the program (the rest are options)
    figures: str | None = None  # the JSON file in OUTDIR a benchmark writes (its --json PATH)
    needs: str | None = None  # a program it runs, which must be on the PATH (else skipped)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def core_counts() -> list[str]:
    """The core counts the scaling parts measure: 4, 8 and 16 where the machine has them, its
    own count where it has fewer than 4 (a flag with no value would fail the part)."""
    n = cores()
    return [str(c) for c in (4, 8, 16) if c <= n] or [str(n)]


DETECTION_PRESETS = ("multiscale", "ssd, masks", "segmentation")


def parts(python: str) -> list[Part]:
    n = str(cores())
    bench = [
        python,
        "-m",
        "fastload",
        "bench",
        "--device",
        "cuda",
        "--backend",
        "all",
        "--num-workers",
        n,
        "--seconds",
        "40",
        "--accelerated",
        "--json",
    ]
    gpu_tests = [python, "-m", "pytest", "-m", "gpu", "-n", "0", "-q", "-rs"]
    gpu_tests += ["-p", "no:cacheprovider"]
    threads = [python, "benchmarks/loader/worker_threads.py", "--seconds", "5", "--rounds", "1"]
    return [
        Part("info", [python, "-m", "fastload", "info", "--json"], False, 60, "info.json", 4),
        Part(
            "gpu tests",
            # tests/ray needs Ray, an 80 MB wheel that a device call (64 MiB) cannot carry
            [*gpu_tests, "--ignore", "tests/ray", "tests"],
            True,
            240,
            "gpu_tests.txt",
            3,
        ),
        Part(
            "nvimgcodec decoders",
            # each decoder alone and fastload's mix: the hardware engine, nvJPEG's CUDA decoder
            # with its Huffman decoding on the CPU (nvImageCodec's setting) and on the GPU
            [python, "benchmarks/decoding/seekable_nvimgcodec.py", "--rounds", "3"],
            True,
            150,
            "nvimgcodec_decoders.txt",
        ),
        Part(
            "delivery",
            # the same loader left on the CPU, on the device pinned by copying, and pinned in
            # place (worker processes' kept slots registered with CUDA, worker threads' ring
            # allocated pinned); then where each one's process spends its time (py-spy)
            [
                python,
                "benchmarks/gpu/delivery.py",
                "--seconds",
                "6",
                "--rounds",
                "3",
                "--where",
                "4",
            ],
            True,
            300,
            "delivery.txt",
            figures="delivery.json",
        ),
        Part(
            "handover",
            # what receiving a batch from a worker process costs the main process, torch's way
            # (a file descriptor a storage) against fastload's (kept slots named, labels by
            # value), with workers that do almost nothing: where the main process is the wall
            [python, "benchmarks/loader/handover.py", "--workers", "8", "--seconds", "3"],
            True,
            90,
            "handover.txt",
            figures="handover.json",
        ),
        Part("bench train", [*bench, "--pipeline", "train"], True, 150, "bench_train.json", 4),
        Part("bench val", [*bench, "--pipeline", "val"], True, 150, "bench_val.json", 4),
        Part(
            "prefetch overlap",
            [python, "benchmarks/gpu/prefetch_overlap.py", "--device", "cuda"],
            True,
            90,
            "prefetch_overlap.txt",
            figures="prefetch_overlap.json",
        ),
        Part(
            "gpu augment",
            [python, "benchmarks/gpu/gpu_augment.py", "--device", "cuda"],
            True,
            90,
            "gpu_augment.txt",
            figures="gpu_augment.json",
        ),
        # three presets of seven: all of them, 3 loaders x 2 rounds each, ran past 240 s on an
        # H200 (3 done); the same presets with the images left on the CPU, to tell the copy's
        # cost from the workers'
        *(
            Part(
                name,
                [
                    python,
                    "benchmarks/peers/detection_swap.py",
                    "--device",
                    device,
                    "--workers",
                    n,
                    "--batch-size",
                    "8",
                    "--seconds",
                    "5",
                    "--rounds",
                    "2",
                    "--pipelines",
                    *DETECTION_PRESETS,
                    "--where",  # then each loader's threads sampled (py-spy): 3 s each
                    "3",
                ],
                True,
                300,
                f"{stem}.txt",
                figures=f"{stem}.json",
            )
            for name, device, stem in (
                ("detection", "cuda", "detection_swap"),
                ("detection cpu side", "cpu", "detection_cpu_side"),
            )
        ),
        Part(
            "handover bytes",
            # float32 against uint8 images handed to the main process, pinned and copied to
            # the device: what the detection device path gained by carrying uint8
            [python, "benchmarks/loader/handover_bytes.py", "--workers", "8", "--seconds", "5"],
            True,
            90,
            "handover_bytes.txt",
            figures="handover_bytes.json",
        ),
        Part(
            "train side by side",
            [
                python,
                "benchmarks/training/train_side_by_side.py",
                "--arch",
                "resnet50",
                "--image-size",
                "224",
                "--precision",
                "bf16",
                "--device",
                "cuda",
                "--workers",
                n,
                "--rounds",
                "3",
            ],
            True,
            150,
            "train_side_by_side.txt",
            figures="train_side_by_side.json",
        ),
        Part(
            "train ceiling",
            [
                python,
                "benchmarks/training/train_ceiling.py",
                "--device",
                "cuda",
                "--precision",
                "bf16",
                "--steps",
                "12",
                "--cores",
                *core_counts(),
            ],
            True,
            330,
            "train_ceiling.txt",
            figures="train_ceiling.json",
        ),
        Part(
            "worker threads",
            [*threads, "--cores", *core_counts()],
            True,  # it measures the GPU machine's cores
            # 18 slices (6 rows at 3 core counts), each a fresh process with its workers: an H200
            # machine ran past 240 s
            360,
            "worker_threads.txt",
            figures="worker_threads.json",
        ),
        Part(
            "worker threads gil",
            # the share of the time some thread holds the GIL, sampled by py-spy (carried as a
            # wheel): whether the held time or the hand-overs are the wall on every core
            [*threads, "--gil", "--cores", n],
            True,
            180,
            "worker_threads_gil.txt",
            figures="worker_threads_gil.json",
            needs="py-spy",
        ),
        Part(
            "executor cpu side",
            [python, "benchmarks/loader/executor_cpu_side.py", "--processes", "1", "8"],
            True,  # it measures the GPU machine's cores
            120,
            "executor_cpu_side.txt",
            figures="executor_cpu_side.json",
        ),
        Part(
            "autotune",
            [python, "-m", "fastload", "autotune", "--budget", "40", "--no-cache", "--json"],
            True,
            90,
            "autotune.json",
            4,
        ),
        Part(
            "doctor",
            [
                python,
                "-m",
                "fastload",
                "doctor",
                "--model",
                "resnet50",
                "--device",
                "cuda",
                "--num-workers",
                n,
                "--json",
            ],
            True,
            120,
            "doctor.json",
            4,
        ),
    ]


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
        subprocess.run(["apt-get", "download", "libturbojpeg0", *REGION_DEBS], cwd=folder)
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


def build_region(wheels: Path | None, env: dict[str, str]) -> tuple[str, str]:
    """Compile the region backend's extension into the source tree when it does not import.

    The GPU machine runs fastload from the source tree, where nothing is compiled; libjpeg-turbo's
    headers and library come from the .debs ``--fetch`` carries when the machine has none.

    Returns:
        (status, detail) for the summary.
    """
    flags: list[str] = []
    debs = sorted(wheels.glob("libjpeg62-turbo*.deb")) if wheels is not None else []
    if debs and shutil.which("dpkg"):
        unpacked = Path(tempfile.mkdtemp(prefix="fastload-libjpeg-"))
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        flags += [f"-I{d}" for d in sorted({h.parent for h in unpacked.rglob("j*.h")})]
        for folder in sorted({lib.parent for lib in unpacked.rglob("libjpeg.so*")}):
            flags += [f"-L{folder}", f"-Wl,-rpath,{folder}"]
    sources = ["backends/jpegregion.c", "backends/restarts.c"]  # as setup.py builds it
    status, detail = build_extension(
        "fastload.backends._jpegregion", sources, env, [*flags, "-O3", "-ljpeg"]
    )
    if status == "skipped":
        return status, f"{detail}: the region backend is left out"
    if status == "failed" and detail.startswith("built, but"):
        return status, "built, but it does not import (libjpeg.so.62 missing?)"
    if status == "passed" and detail != "already built" and debs:
        detail += " with the carried libjpeg-turbo"
    return status, detail


def build_normalize(env: dict[str, str]) -> tuple[str, str]:
    """Compile the normalize kernel of float32 batches into the source tree when it does not
    import (without it OpenCV normalizes them, at twice the cost)."""
    status, detail = build_extension("fastload.gpu._normalizing", ["gpu/normalizing.c"], env, [])
    return status, f"{detail}: OpenCV normalizes" if status == "skipped" else detail


def build_resize(env: dict[str, str]) -> tuple[str, str]:
    """Compile the resize kernel into the source tree when it does not import (without it torch
    resizes, the same pixels)."""
    status, detail = build_extension(
        "fastload.pixels._resizing", ["pixels/resizing.c"], env, ["-O3"]
    )
    return status, f"{detail}: torch resizes" if status == "skipped" else detail


def build_files(env: dict[str, str]) -> tuple[str, str]:
    """Compile the file reader into the source tree when it does not import (without it ``os``
    reads, the same bytes)."""
    status, detail = build_extension("fastload.backends._files", ["backends/files.c"], env, [])
    return status, f"{detail}: os reads" if status == "skipped" else detail


def build_extension(
    module: str, sources: list[str], env: dict[str, str], flags: list[str]
) -> tuple[str, str]:
    """Compile ``fastload/<source>`` for each of ``sources`` into ``module`` beside the first,
    unless it already imports.

    Returns:
        (status, detail) for the summary.
    """
    probe = [sys.executable, "-c", f"import {module}"]
    if subprocess.run(probe, cwd=ROOT, env=env, capture_output=True).returncode == 0:
        return "passed", "already built"
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if compiler is None:
        return "skipped", "no C compiler"
    if not (Path(include) / "Python.h").is_file():
        return "skipped", f"no Python.h in {include}"
    folder, name = module.removeprefix("fastload.").rpartition(".")[::2]
    target = (
        ROOT
        / "fastload"
        / folder.replace(".", "/")
        / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    )
    command = [compiler, "-shared", "-fPIC", "-O2", "-std=c99", f"-I{include}"]
    paths = [str(ROOT / "fastload" / source) for source in sources]
    built = subprocess.run(
        [*command, *paths, *flags, "-o", str(target)], capture_output=True, text=True
    )
    if built.returncode != 0:
        last = built.stderr.strip().splitlines()[-1:] or [""]
        names = ", ".join(Path(source).name for source in sources)
        return "failed", f"compiling {names}: {last[0][:200]}"
    if subprocess.run(probe, cwd=ROOT, env=env, capture_output=True).returncode != 0:
        target.unlink()
        return "failed", "built, but it does not import"
    return "passed", f"built {target.name}"


def cuda_available(env: dict[str, str]) -> bool:
    probe = "import torch; print(torch.cuda.is_available())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    return out.stdout.strip() == "True"


def _keep(part: Part, out: Path, stdout: str, stderr: str) -> None:
    """Write a part's standard output and error into OUTDIR."""
    if part.output is not None:
        (out / part.output).write_text(stdout)
    (out / f"{part.output or part.name}.stderr.txt").write_text(stderr)


def run_part(part: Part, out: Path, env: dict[str, str], gpu: bool) -> tuple[str, str]:
    """Run one part; returns (status, detail)."""
    if part.needs_gpu and not gpu:
        # the command must still start: its script and options exist (--help)
        check = subprocess.run(
            [*part.command[: part.head], "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if check.returncode != 0:
            return "failed", f"the command does not start: {check.stderr.strip()[-300:]}"
        return "skipped", "no CUDA device here (the command starts)"
    if part.needs is not None and shutil.which(part.needs, path=env.get("PATH")) is None:
        return "skipped", f"{part.needs} is not installed (--fetch carries its wheel)"
    command = [*part.command, "--json", str(out / part.figures)] if part.figures else part.command
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


def dali_parts(python: str) -> list[Part]:
    """What ``--dali-finish`` runs once DALI is installed from its parts."""
    bench = [python, "-m", "fastload", "bench", "--device", "cuda", "--backend", "dali"]
    bench += ["--num-workers", str(cores()), "--seconds", "30", "--json"]
    return [
        Part(
            "dali gpu tests",
            [
                python,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-n",
                "0",
                "-q",
                "-p",
                "no:cacheprovider",
                "-rs",
                "-k",
                "dali",  # test_dali.py whole, and DALI's rows of the executors' fault tests
                "tests/backends/test_dali.py",
                "tests/backends/test_executor_faults.py",
            ],
            True,
            240,
            "dali_gpu_tests.txt",
            3,
        ),
        Part("dali bench train", [*bench, "--pipeline", "train"], True, 120, "dali_train.json", 4),
        Part("dali bench val", [*bench, "--pipeline", "val"], True, 120, "dali_val.json", 4),
        Part(
            "dali overhead",
            [
                python,
                "benchmarks/peers/dali_overhead.py",
                "--device",
                "cuda",
                "--threads",
                "8",
                "--seconds",
                "60",
            ],
            True,
            150,
            "dali_overhead.txt",
        ),
    ]


def check(
    out: Path,
    wheels: Path | None,
    dry_run: bool,
    only: list[str] | None = None,
    *,
    dali: Path | None = None,
) -> int:
    """Run the parts (DALI's, when ``dali`` holds its unpacked wheels); 0 when none failed."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    paths = [str(ROOT)]
    if wheels is not None:
        target = install(wheels, env)
        paths.insert(0, str(target))
        # the wheels' programs (py-spy) are installed into the folder's bin
        env["PATH"] = os.pathsep.join([str(target / "bin"), env.get("PATH", "")])
    if dali is not None:
        paths.insert(0, str(install(dali, env)))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    gpu = cuda_available(env) and not dry_run
    if not gpu and not dry_run:
        print(
            "gpu_check: no CUDA device; run with --dry-run to check the script itself",
            file=sys.stderr,
        )
        return 2
    results = []
    if wheels is not None:
        installed = sorted(
            p.name for p in Path(paths[0]).iterdir() if not p.name.endswith(("-info", "bin"))
        )
        print(f"{'wheels':<20} passed   installed {', '.join(installed)}", flush=True)
        results.append(
            {"part": "wheels", "status": "passed", "detail": f"installed {', '.join(installed)}"}
        )
    for name, (status, detail) in (
        ("region build", build_region(wheels, env)),
        ("normalize build", build_normalize(env)),
        ("resize build", build_resize(env)),
        ("files build", build_files(env)),
    ):
        print(f"{name:<20} {status:<8} {detail}", flush=True)
        results.append({"part": name, "status": status, "detail": detail})
    for part in dali_parts(sys.executable) if dali is not None else parts(sys.executable):
        if only is not None and part.name not in only:
            continue
        status, detail = run_part(part, out, env, gpu)
        line = f"{part.name:<20} {status:<8} {detail}"
        print(line, flush=True)
        results.append({"part": part.name, "status": status, "detail": detail})
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    (out / "summary.txt").write_text(
        "\n".join(f"{r['part']:<20} {r['status']:<8} {r['detail']}" for r in results) + "\n"
    )
    return 1 if any(r["status"] == "failed" for r in results) else 0


def main() -> int:
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
    names = [part.name for part in parts(sys.executable)]
    parser.add_argument(
        "--only",
        metavar="PARTS",
        type=lambda text: [name.strip() for name in text.split(",")],
        help=f"run only these parts, comma-separated: {', '.join(names)}",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(
            f"--only: no part named {', '.join(map(repr, unknown))}; parts: {', '.join(names)}"
        )
    if args.fetch is not None:
        return fetch(args.fetch)
    if args.fetch_dali is not None:
        return dali_wheels.fetch(args.fetch_dali, [a for p in PLATFORMS for a in ("--platform", p)])
    if args.dali_part is not None:
        return dali_wheels.keep_part(args.dali_part)
    if args.dali_finish is not None:
        return check(args.dali_finish, args.wheels, args.dry_run, dali=dali_wheels.assemble())
    if args.outdir is None:
        parser.error("give OUTDIR (or --fetch WHEELDIR)")
    if shutil.which("nvidia-smi") and not args.dry_run:
        subprocess.run(["nvidia-smi", "-L"])
    return check(args.outdir, args.wheels, args.dry_run, args.only)


if __name__ == "__main__":
    sys.exit(main())
