"""scripts/gpu_check.sh cannot rot: its dry run executes the whole script here, without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without a GPU")
def test_dry_run_runs_the_cpu_parts_and_checks_the_gpu_commands_start(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = {r["part"]: r for r in json.loads((out / "summary.json").read_text())}
    assert summary["info"]["status"] == "passed"
    assert json.loads((out / "info.json").read_text())["cuda"]["available"] is False
    # the region backend's extension imports here (the install built it): nothing to compile
    assert summary["region build"] == {
        "part": "region build",
        "status": "passed",
        "detail": "already built",
    }
    gpu_parts = set(summary) - {"info", "region build"}
    assert {"gpu tests", "bench train", "bench val", "autotune"} <= gpu_parts
    for name in gpu_parts:
        assert summary[name]["status"] == "skipped", summary[name]
        assert summary[name]["detail"] == "no CUDA device here (the command starts)"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(summary) and lines[0].startswith("region build")
    assert (out / "summary.txt").read_text().splitlines() == lines


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without a GPU")
def test_only_runs_the_named_parts_and_refuses_unknown_names(tmp_path: Path) -> None:
    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "scripts/gpu_check.py", "--dry-run", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = check("--only", "info, bench val", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["part"] for r in summary] == ["region build", "info", "bench val"]
    refused = check("--only", "info,bench x", str(tmp_path / "other"))
    assert refused.returncode == 2
    assert "no part named 'bench x'" in refused.stderr and "gpu tests" in refused.stderr
    assert not (tmp_path / "other").exists()


def test_without_a_gpu_and_without_dry_run_it_says_so(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no CUDA device; run with --dry-run" in proc.stderr


def wheel(folder: Path, name: str, source: str) -> Path:
    """A minimal pure-Python wheel holding one module."""
    import zipfile

    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", source)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without a GPU")
def test_the_carried_wheels_are_installed_into_a_temporary_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "fastload_carried_probe", "VALUE = 42\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry-run", "--wheels", str(wheels), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0] == {
        "part": "wheels",
        "status": "passed",
        "detail": "installed fastload_carried_probe.py",
    }
