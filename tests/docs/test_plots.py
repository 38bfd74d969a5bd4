"""The benchmark pages' figures: a benchmark's JSON (benchmarks/results.py) becomes the plot and
table docs/plots.py draws, and a real benchmark run writes that JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fastload.synthetic import make_image_folder

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results = load(ROOT / "benchmarks" / "results.py")
plots = load(ROOT / "docs" / "plots.py")


def test_a_row_holds_the_per_round_ratios_to_the_baseline_of_the_same_round() -> None:
    row = results.row("threads", [120.0, 90.0, 200.0], [100.0, 100.0, 100.0], target=1.4)
    assert row["median"] == 120.0
    assert (row["ratio"], row["low"], row["high"]) == (1.2, 0.9, 2.0)
    assert row["target"] == 1.4
    assert "ratio" not in results.row("baseline", [100.0, 100.0])


def test_the_json_becomes_a_plot_and_a_table_that_say_which_run_made_them(
    tmp_path: Path,
) -> None:
    rows = [
        results.row("stock", [100.0, 110.0], group="train"),
        results.row("region", [200.0, 231.0], [100.0, 110.0], group="train"),
    ]
    path = tmp_path / "results" / "made_up.json"
    settings = {"workers": 2}
    results.write(
        str(path), benchmark="made_up", title="t", baseline="stock", rows=rows, settings=settings
    )
    doc = json.loads(path.read_text())
    assert doc["machine"]["cores"] >= 1 and doc["date"] and doc["command"].startswith("python")

    written = plots.render(tmp_path / "results", tmp_path / "out")
    assert sorted(p.name for p in written) == ["made_up.md", "made_up.png"]
    assert (tmp_path / "out" / "made_up.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "out" / "made_up.md").read_text()
    assert doc["date"] in table and doc["command"] in table
    assert "| train | region | 216 images/s | 2.05x (2.00-2.10) |" in table
    assert "| train | stock | 105 images/s | baseline |" in table


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "docs" / "benchmarks" / "results").glob("*.json")),
    ids=lambda p: p.stem,
)
def test_the_committed_figures_are_a_benchmarks_output(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == path.stem
    assert (ROOT / "benchmarks" / f"{path.stem}.py").exists()
    assert doc["rows"] and all(row["rates"] for row in doc["rows"])
    assert any("ratio" in row for row in doc["rows"])


def test_decode_pipeline_writes_its_figures_as_json(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    out = tmp_path / "decode_pipeline.json"
    args = ["--data", str(data), "--workers", "0", "--batch-size", "4", "--seconds", "1"]
    args += ["--rounds", "2", "--pipelines", "val", "--backends", "opencv", "--json", str(out)]
    script = ROOT / "benchmarks" / "decode_pipeline.py"
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    names = [row["name"] for row in doc["rows"]]
    assert names[:2] == ["stock torchvision", "opencv"]
    stock, opencv = doc["rows"][0], doc["rows"][1]
    assert len(opencv["rates"]) == len(stock["rates"]) == 2
    ratios = [a / b for a, b in zip(opencv["rates"], stock["rates"], strict=True)]
    assert opencv["low"] == pytest.approx(min(ratios), abs=1e-3)
    assert opencv["high"] == pytest.approx(max(ratios), abs=1e-3)


def run_benchmark(name: str, *args: str) -> dict[str, Any]:
    """Run ``benchmarks/<name>.py`` with ``--json`` into a temporary file; its figures."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"{name}.json"
        script = ROOT / "benchmarks" / f"{name}.py"
        done = subprocess.run(
            [sys.executable, str(script), *args, "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["benchmark"] == name
    return doc


def test_gpu_augment_writes_each_pipeline_against_torchvisions_loop() -> None:
    doc = run_benchmark("gpu_augment", "--device", "cpu", "--batch-size", "4", "--repeats", "1")
    assert [(row["group"], "ratio" in row) for row in doc["rows"]] == [
        ("jitter", False),
        ("jitter", True),
        ("jitter", True),
        ("crop+jitter", False),
        ("crop+jitter", True),
        ("crop+jitter", True),
    ]


def test_train_side_by_side_writes_the_stock_and_fastload_rates(tmp_path: Path) -> None:
    data = make_image_folder(tmp_path / "set", images=16, classes=2)
    args = ["--data", str(data), "--arch", "resnet18", "--device", "cpu", "--batch-size", "4"]
    args += ["--workers", "0", "--image-size", "32", "--steps", "1", "--rounds", "2"]
    args += ["--precision", "fp32"]
    doc = run_benchmark("train_side_by_side", *args)
    stock, ours = doc["rows"]
    assert (stock["name"], ours["name"]) == ("stock", "fastload")
    assert len(ours["rates"]) == len(stock["rates"]) == 2
    assert doc["settings"]["precision"] == "fp32"
