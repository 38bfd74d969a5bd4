"""The benchmark pages' figures: a benchmark's JSON (benchmarks/results.py) becomes the plot and
table docs/plots.py draws (tests/test_benchmark_scripts.py runs the scripts that write it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

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
    assert len(list((ROOT / "benchmarks").glob(f"*/{path.stem}.py"))) == 1
    assert doc["rows"] and all(row["rates"] for row in doc["rows"])
    assert any("ratio" in row for row in doc["rows"])
