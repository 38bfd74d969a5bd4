"""``fastload scan / bench / autotune / doctor`` given shards instead of a folder, as real
subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shardsets import class_folder, samples, tar_of

import fastload


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastload", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cmd")
    class_folder(root / "photos", classes=3, per_class=12, size=72)
    fastload.pack(root / "photos", root / "packed", shard_size=40_000, progress=False)
    return root / "packed"


def test_scan_names_the_broken_members_of_shards(tmp_path: Path) -> None:
    members = samples(4)
    members[3] = ("s0001.jpg", b"\xff\xd8\xff\xe0" + b"\x17" * 300)  # a JPEG cut to nothing
    tar_of(tmp_path / "a.tar", members)
    tar_of(tmp_path / "b.tar", samples(2, start=4))
    (tmp_path / "c.tar").write_text("not a tar\n" * 60)
    proc = run("scan", str(tmp_path), "--json", "--workers", "1")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["files"] == 6
    found = {f["path"]: f["kind"] for f in report["findings"]}
    assert found == {f"{tmp_path}/a.tar:s0001.jpg": "unreadable", f"{tmp_path}/c.tar": "unreadable"}
    text = run("scan", str(tmp_path / "{a,b}.tar"))
    assert text.returncode == 1 and f"{tmp_path}/a.tar:s0001.jpg" in text.stdout


def test_bench_measures_shards_against_stock_on_the_same_members(packed: Path) -> None:
    proc = run(
        "bench",
        str(packed),
        "--backend",
        "pillow",
        "--batch-size",
        "8",
        "--seconds",
        "4",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads(proc.stdout)["results"]}
    assert rows["stock torchvision"]["images_per_sec"] > 0
    assert rows["pillow"]["error"] is None and rows["pillow"]["images_per_sec"] > 0


def test_autotune_and_doctor_take_shards(packed: Path) -> None:
    tuned = run(
        "autotune", str(packed), "--batch-size", "8", "--budget", "6", "--no-cache", "--json"
    )
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["num_workers"] >= 0
    args = ["--model", "resnet18", "--batch-size", "4", "--steps", "2", "--image-size", "32"]
    doctor = run("doctor", str(packed), *args, "--device", "cpu", "--json")
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["steps"] == 2


def test_a_path_that_is_neither_is_one_line(tmp_path: Path) -> None:
    proc = run("bench", str(tmp_path / "nothing-here"))
    assert proc.returncode == 2 and "is not a folder or shards" in proc.stderr
