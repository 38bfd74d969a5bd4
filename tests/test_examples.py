"""examples/train_imagenet.py runs end to end, and a rerun resumes from its checkpoint."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastload import train
from fastload.synthetic import make_image_folder

ROOT = Path(__file__).resolve().parents[1]
LR = 1e-3  # the example's default --lr


def run(*args: str, script: str = "train_imagenet.py") -> subprocess.CompletedProcess:
    """Run ``examples/<script>`` with ``args`` from the project's root."""
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_train_imagenet_trains_then_resumes(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=24, classes=3)
    args = [
        "--data", str(data), "--arch", "resnet18", "--image-size", "32", "--epochs", "2",
        "--batch-size", "8", "--workers", "0", "--backend", "pillow",
        "--checkpoint", str(tmp_path / "ck.pt"),
    ]  # fmt: skip
    first = run(*args)
    assert first.returncode == 0, first.stderr
    assert "resnet18: 24 training images, 3 classes; 1 process(es) on cpu" in first.stdout
    assert "done: val accuracy" in first.stdout and "images/s" in first.stdout
    # the peak of the schedule, not its first warm-up step's LR
    peak = float(re.search(r"peak lr ([0-9.e+-]+)", first.stdout).group(1))
    assert peak == pytest.approx(train.scale_lr(LR, 8), rel=1e-2)
    assert (tmp_path / "ck.pt").exists()
    again = run(*args)  # all epochs done: it resumes, trains nothing, evaluates
    assert again.returncode == 0, again.stderr
    assert "last epoch resumed: done" in again.stdout


def test_train_imagenet_under_torchrun_with_two_processes(tmp_path: Path) -> None:
    """The same script, launched by torchrun: DDP over gloo, shards, rank 0 prints and saves."""
    data = make_image_folder(tmp_path / "set", images=24, classes=3)
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", str(ROOT / "examples" / "train_imagenet.py"),
            "--data", str(data), "--arch", "resnet18", "--image-size", "32", "--epochs", "1",
            "--batch-size", "4", "--workers", "0", "--backend", "pillow",
            "--checkpoint", str(tmp_path / "ck.pt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # printed once (rank 0), with both processes counted
    assert proc.stdout.count("resnet18: 24 training images") == 1
    assert "2 process(es) on cpu" in proc.stdout and "global batch 8" in proc.stdout
    assert proc.stdout.count("done: val accuracy") == 1
    assert "Grad strides do not match bucket view strides" not in proc.stderr
    assert (tmp_path / "ck.pt").exists()


@pytest.mark.parametrize(
    "task, extra",
    [
        ("detection", ["--augmentation", "ssdlite", "--model", "maskrcnn_resnet50_fpn"]),
        ("segmentation", ["--model", "lraspp_mobilenet_v3_large"]),
    ],
)
def test_train_detection_trains_a_torchvision_model_through_the_swap(
    task: str, extra: list[str]
) -> None:
    """The references' input with fastload's loader trains torchvision's own models: the
    targets (boxes, masks, class maps) are what those models take."""
    done = run(
        "--task", task, "--synthetic", "6", "--steps", "1", "--batch-size", "2",
        "--workers", "1", *extra, script="train_detection.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accelerated in part" in done.stdout
    assert re.search(r"step 1/1: loss \d+\.\d+", done.stdout)
    assert "fastload loader: 1 steps" in done.stdout
