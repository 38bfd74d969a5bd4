"""What the GPU check runs: each part's command, whether it needs a GPU, its time limit, and
the plans that name parts in the order one device call should run them (``scripts/gpu_check.py``
runs them; docs/gpu-check.md says which call runs which plan)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


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
    # the fewest seconds worth starting it with, where a --budget leaves less than its limit:
    # its start and its first round or row
    least: int = 30
    env: dict[str, str] = field(default_factory=dict)  # set for its command, over the check's


# Parts in the order one device call runs them, most wanted first: each fits what the session
# has left after the machine's start (docs/gpu-check.md, "Plans under a budget").
PLANS = {
    # the GPU path's figures that need only the carried wheels: the GPU-marked tests (faults
    # inside device-decoded batches, a worker killed with batches in flight), delivery against
    # the batches left on the CPU, the train ceiling on every core, each nvImageCodec decoder
    # against fastload's mix, what receiving a batch costs, then the train recipe's rows
    "gpu path": (
        "info",
        "gpu tests",
        "delivery",
        "train ceiling",
        "nvimgcodec decoders",
        "handover",
        "bench train",
    ),
    # the detection target (the references' input on the device against the same left on the
    # CPU), then what decides FASTLOAD_PIN_IN_PLACE's default beside delivery: the step itself
    # with each batch copied to the device from its worker's slot
    "detection and pinning": (
        "detection",
        "detection cpu side",
        "ceiling pin copying",
        "ceiling pin in place",
    ),
}


def expand(names: list[str], known: list[str]) -> list[str]:
    """Part names, each plan among ``names`` replaced by its parts, in order, once each.

    Raises:
        ValueError: A name is neither a part nor a plan (the message lists both).
    """
    unknown = [name for name in names if name not in known and name not in PLANS]
    if unknown:
        raise ValueError(
            f"no part or plan named {', '.join(map(repr, unknown))}; plans: "
            f"{', '.join(PLANS)}; parts: {', '.join(known)}"
        )
    expanded = [part for name in names for part in PLANS.get(name, (name,))]
    return list(dict.fromkeys(expanded))


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
    ceiling = [python, "benchmarks/training/train_ceiling.py", "--device", "cuda"]
    ceiling += ["--precision", "bf16", "--steps", "12"]
    region = [*ceiling, "--archs", "resnet50", "--backend", "region", "--no-stock"]
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
                "4",
                "--rounds",
                "3",
                "--where",
                "3",
            ],
            True,
            240,
            "delivery.txt",
            figures="delivery.json",
            least=60,
        ),
        Part(
            "handover",
            # what receiving a batch from a worker process costs the main process, torch's way
            # (a file descriptor a storage) against fastload's (kept slots named, labels by
            # value) and torch's own loader, with workers that do almost nothing: where the
            # main process is the wall; four cases of three loaders, 3 rounds of 2 s
            [
                python,
                "benchmarks/loader/handover.py",
                "--workers",
                "8",
                "--seconds",
                "2",
                "--rounds",
                "3",
            ],
            True,
            120,
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
        # ResNet-18 and ResNet-50 (and stock) on every core, a process a row: 2 of the 6 rows
        # that ran past 330 s with the smaller core counts, which the next part measures
        Part(
            "train ceiling",
            [*ceiling, "--cores", n],
            True,
            240,
            "train_ceiling.txt",
            figures="train_ceiling.json",
            least=90,
        ),
        Part(
            "train ceiling cores",
            [*ceiling, "--no-stock", "--cores", *([c for c in core_counts() if c != n] or [n])],
            True,
            240,
            "train_ceiling_cores.txt",
            figures="train_ceiling_cores.json",
            least=90,
        ),
        # with worker processes, pinning in place keeps each slot until the copy from it is
        # done: whether the step gains what delivery does (docs/gpu-check.md, "Deciding
        # FASTLOAD_PIN_IN_PLACE's default")
        *(
            Part(
                name,
                [*region, "--cores", n],
                True,
                150,
                f"{stem}.txt",
                figures=f"{stem}.json",
                least=60,
                env={"FASTLOAD_PIN_IN_PLACE": value},
            )
            for name, stem, value in (
                ("ceiling pin copying", "ceiling_pin_copying", "0"),
                ("ceiling pin in place", "ceiling_pin_in_place", "1"),
            )
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
