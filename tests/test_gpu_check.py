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

sys.path.insert(0, str(ROOT / "scripts"))
try:
    import gpu_check
    import gpu_parts
finally:
    sys.path.remove(str(ROOT / "scripts"))


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
    assert "no part or plan named 'bench x'" in refused.stderr
    assert "gpu tests" in refused.stderr and "gpu path" in refused.stderr
    assert not (tmp_path / "other").exists()
    inside = check("--pack", str(tmp_path / "o" / "a.tgz"), str(tmp_path / "o"))
    assert inside.returncode == 2 and "outside OUTDIR" in inside.stderr
    nothing = check("--budget", "0", str(tmp_path / "o"))
    assert nothing.returncode == 2 and "--budget 0: give the whole check's seconds" in (
        nothing.stderr
    )
    assert not (tmp_path / "o").exists()


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
    # prints its first round, then waits far past the part's limit on a process of its own (a
    # benchmark's row process), which must not outlive the part
    pid_file = tmp_path / "row.pid"
    script = (
        f"echo 'round 1: 1234 images/s'; echo warming >&2; sleep 600 & echo $! > {pid_file}; wait"
    )
    part = gpu_parts.Part("slow", ["sh", "-c", script], False, 10, "slow.txt")
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
    env = {**os.environ, "PATH": str(tmp_path)}
    part = gpu_parts.Part("spy", ["sh", "-c", "echo ran"], False, 10, "spy.txt", needs="py-spy")
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
    names = [p.name for p in gpu_parts.parts(sys.executable)]
    assert "worker threads gil" in names


def test_the_scaling_parts_name_core_counts_the_machine_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker threads at each count; the train ceiling on every core, then at the counts below
    it (which ran past the part's limit when one part measured them all)."""
    for machine, counts, below in (
        (2, ["2"], ["2"]),
        (4, ["4"], ["4"]),
        (12, ["4", "8"], ["4", "8"]),
        (16, ["4", "8", "16"], ["4", "8"]),
    ):
        monkeypatch.setattr(gpu_parts, "cores", lambda machine=machine: machine)
        by_name = {p.name: p.command for p in gpu_parts.parts(sys.executable)}
        for name, want in (
            ("worker threads", counts),
            ("train ceiling", [str(machine)]),
            ("train ceiling cores", below),
        ):
            command = by_name[name]
            assert command[command.index("--cores") + 1 :] == want, (name, machine)


def test_a_budget_cuts_a_parts_limit_to_what_is_left_and_starts_none_it_cannot_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts of 60 s limits under a 100 s budget, each taking 50 s of a fake clock: the first
    runs with its own limit, the second with the 50 s left (and runs past it), the third is
    not started; the summary and the archive say so after every part."""
    now = [0.0]
    ran: list[tuple[str, int]] = []

    def run(part: gpu_parts.Part, out: Path, env: dict[str, str], gpu: bool) -> tuple[str, str]:
        ran.append((part.name, part.timeout))
        now[0] += 50
        if part.name == "b":
            return "failed", f"over its {part.timeout} s limit (its output so far is kept)"
        return "passed", "50 s"

    made = [gpu_parts.Part(name, ["true"], False, 60, least=30) for name in "abc"]
    monkeypatch.setattr(gpu_parts, "parts", lambda python: made)
    monkeypatch.setattr(gpu_check, "run_part", run)
    budget = gpu_check.Budget(100, clock=lambda: now[0])
    out, pack = tmp_path / "out", tmp_path / "out.tgz"
    status = gpu_check.check(out, None, True, ["a", "b", "c"], budget=budget, pack=pack)
    assert status == 1  # "b" failed
    assert ran == [("a", 60), ("b", 50)]
    summary = {r["part"]: r for r in json.loads((out / "summary.json").read_text())}
    assert summary["a"]["status"] == "passed"
    assert summary["b"]["detail"] == (
        "over its 50 s limit (its output so far is kept), what was left of the budget"
    )
    assert summary["c"] == {
        "part": "c",
        "status": "skipped",
        "detail": "not started: 0 s of the budget left",
    }
    import tarfile

    with tarfile.open(pack) as archive:
        packed = archive.extractfile("out/summary.json")
        assert packed is not None and json.loads(packed.read()) == list(summary.values())


def test_the_summary_and_the_archive_are_written_after_each_part(tmp_path: Path) -> None:
    import tarfile

    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.txt").write_text("round 1: 1234 images/s\n")
    report = gpu_check.Report(out, tmp_path / "check.tgz")
    report.add("info", "passed", "3 s")
    with tarfile.open(tmp_path / "check.tgz") as archive:
        assert sorted(archive.getnames()) == ["out", "out/bench.txt", "out/summary.json",
                                              "out/summary.txt"]  # fmt: skip
        lines = archive.extractfile("out/summary.txt")
        assert lines is not None and lines.read().decode().split() == ["info", "passed", "3", "s"]
    assert not (tmp_path / "check.tgz.partial").exists()


def test_a_parts_own_environment_reaches_its_command(tmp_path: Path) -> None:
    part = gpu_parts.Part(
        "env",
        ["sh", "-c", "echo $FASTLOAD_PIN_IN_PLACE"],
        False,
        10,
        "env.txt",
        env={"FASTLOAD_PIN_IN_PLACE": "1"},
    )
    environment = {**os.environ, "FASTLOAD_PIN_IN_PLACE": "0"}
    assert gpu_check.run_part(part, tmp_path, environment, gpu=False)[0] == "passed"
    assert (tmp_path / "env.txt").read_text() == "1\n"


def test_plans_expand_to_their_parts_in_order_once_each() -> None:
    names = [p.name for p in gpu_parts.parts(sys.executable)]
    for plan, members in gpu_parts.PLANS.items():
        assert gpu_parts.expand([plan], names) == list(members)
    assert gpu_parts.expand(["delivery", "gpu path"], names) == [
        "delivery",
        *(name for name in gpu_parts.PLANS["gpu path"] if name != "delivery"),
    ]
    with pytest.raises(ValueError, match=r"no part or plan named 'gpu pth'; plans: gpu path"):
        gpu_parts.expand(["gpu pth"], names)
