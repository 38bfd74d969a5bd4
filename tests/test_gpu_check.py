"""scripts/gpu_check.sh cannot rot: its dry run executes the whole script here, without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without a GPU")
def test_dry_run_runs_the_cpu_parts_and_checks_the_gpu_commands_start(tmp_path: Path) -> None:
    """Every part's command is started (about 25 commands, each a process that imports torch):
    near a minute on 2 cores, what CI pays to know the GPU check will start there."""
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
    # the extensions import here (the install built them): nothing to compile
    for built in ("region build", "normalize build", "resize build", "files build"):
        assert summary[built] == {"part": built, "status": "passed", "detail": "already built"}
    gpu_parts = set(summary) - {
        "info",
        "region build",
        "normalize build",
        "resize build",
        "files build",
    }
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
    assert [r["part"] for r in summary] == [
        "region build",
        "normalize build",
        "resize build",
        "files build",
        "info",
        "bench val",
    ]
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


# one part after the wheels: what the wheels part does is the same whatever runs after it
WITH_WHEELS = [sys.executable, "scripts/gpu_check.py", "--dry-run", "--wheels"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without a GPU")
def test_the_carried_wheels_are_installed_into_a_temporary_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "fastload_carried_probe", "VALUE = 42\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [*WITH_WHEELS, str(wheels), "--only", "info", str(out)],
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


def _dali_parts():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dali_parts", ROOT / "scripts" / "dali_parts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dali_wheels_travel_in_checked_parts_and_join_again(tmp_path: Path) -> None:
    parts = _dali_parts()
    rng = np.random.default_rng(0)
    wheels = []
    for name, size in (("a-1.0-py3-none-any.whl", 150_000), ("b-2.0-cp312.whl", 70_000)):
        wheels.append(tmp_path / name)
        wheels[-1].write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    manifest = parts.split(wheels, tmp_path / "parts", part_bytes=64 * 1024)
    assert len(manifest["parts"]) == 4 and all(p["bytes"] <= 64 * 1024 for p in manifest["parts"])
    store = tmp_path / "store"
    names = [p["name"] for p in manifest["parts"]]
    for name in names[:-1]:
        assert parts.keep_part(tmp_path / "parts" / name, store=store) == 0
    with pytest.raises(SystemExit, match=rf"DALI parts missing in .*: {names[-1]}"):
        parts.assemble(store=store)
    damaged = tmp_path / "damaged" / names[-1]
    damaged.parent.mkdir()
    (damaged.parent / parts.MANIFEST).write_bytes(
        (tmp_path / "parts" / parts.MANIFEST).read_bytes()
    )
    damaged.write_bytes(b"x" + (tmp_path / "parts" / names[-1]).read_bytes()[1:])
    assert parts.keep_part(damaged, store=store) == 1  # refused: not what was cut
    assert parts.keep_part(tmp_path / "parts" / names[-1], store=store) == 0
    joined = parts.assemble(store=store)
    for wheel in wheels:
        assert (joined / wheel.name).read_bytes() == wheel.read_bytes()


def test_a_part_past_its_limit_keeps_what_it_printed(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    # prints its first round, then waits far past the part's limit on a process of its own (a
    # benchmark's row process), which must not outlive the part
    pid_file = tmp_path / "row.pid"
    script = (
        f"echo 'round 1: 1234 images/s'; echo warming >&2; sleep 600 & echo $! > {pid_file}; wait"
    )
    part = gpu_check.Part("slow", ["sh", "-c", script], False, 10, "slow.txt")
    status, detail = gpu_check.run_part(part, tmp_path, dict(os.environ), gpu=False)
    assert (status, detail) == ("failed", "over its 10 s limit (its output so far is kept)")
    assert (tmp_path / "slow.txt").read_text() == "round 1: 1234 images/s\n"
    assert (tmp_path / "slow.txt.stderr.txt").read_text() == "warming\n"
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    # killed with its group: gone, or a zombie its new parent has not reaped yet. A process
    # killed shows "R" while the kernel tears it down (its pipes are closed before that ends,
    # so the part can return first): it gets a while to get there, not forever
    for _ in range(200):
        if not _running(stat):
            break
        time.sleep(0.05)
    assert not _running(stat)


def _running(stat: Path) -> bool:
    """Whether the process of ``/proc/PID/stat`` exists and is not a zombie."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_part_whose_program_is_missing_is_skipped_with_the_reason(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    env = {**os.environ, "PATH": str(tmp_path)}
    part = gpu_check.Part("spy", ["sh", "-c", "echo ran"], False, 10, "spy.txt", needs="py-spy")
    assert gpu_check.run_part(part, tmp_path, env, gpu=True) == (
        "skipped",
        "py-spy is not installed (--fetch carries its wheel)",
    )
    assert not (tmp_path / "spy.txt").exists()
    program = tmp_path / "py-spy"  # the program on the PATH: the part runs
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(tmp_path), os.environ["PATH"]])
    assert gpu_check.run_part(part, tmp_path, env, gpu=True)[0] == "passed"
    assert (tmp_path / "spy.txt").read_text() == "ran\n"
    names = [p.name for p in gpu_check.parts(sys.executable)]
    assert "worker threads gil" in names


def test_the_scaling_parts_name_core_counts_the_machine_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for machine, counts in ((2, ["2"]), (4, ["4"]), (12, ["4", "8"]), (16, ["4", "8", "16"])):
        monkeypatch.setattr(gpu_check, "cores", lambda machine=machine: machine)
        by_name = {p.name: p.command for p in gpu_check.parts(sys.executable)}
        for name in ("worker threads", "train ceiling"):
            command = by_name[name]
            assert command[command.index("--cores") + 1 :] == counts, (name, machine)
