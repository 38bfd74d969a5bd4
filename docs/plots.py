"""The benchmark pages' plots and tables, drawn from the JSON the benchmark scripts write.

Each ``benchmarks/<name>.py --json docs/benchmarks/results/<name>.json`` run leaves one file
(``benchmarks/results.py`` writes it); this script turns every such file into
``<out>/<name>.png`` (the ratios to the run's baseline, with their per-round range) and
``<out>/<name>.md`` (a table with the machine, date and command that made the figures), which
the benchmark pages include. The docs build runs it (``docs/conf.py``); by hand:

    python docs/plots.py [RESULTS_DIR] [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def render(results: Path, out: Path) -> list[Path]:
    """Draw every ``*.json`` in ``results`` into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(results.glob("*.json")):
        doc = json.loads(path.read_text())
        name = doc["benchmark"]
        table = out / f"{name}.md"
        table.write_text(markdown(doc))
        figure = out / f"{name}.png"
        plot(doc, figure)
        written += [table, figure]
    return written


def _groups(doc: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows by (group, unit), in the file's order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in doc["rows"]:
        groups.setdefault((row["group"], row["unit"]), []).append(row)
    return groups


def markdown(doc: dict[str, Any]) -> str:
    """The figures as a Markdown table, under the run's provenance."""
    where = doc["machine"]
    machine = f"{where['cpu']}, {where['cores']} cores" + (
        f", {where['gpu']}" if "gpu" in where else ""
    )
    lines = [
        f"*{doc['title']}.* Run {doc['date']} on {machine}; fastload {doc['fastload']}; "
        f"ratios are per round against **{doc['baseline']}** measured in the same rounds "
        "(median, lowest-highest).",
        "",
        f"`{doc['command']}`",
        "",
        "| group | configuration | median | ratio (range) |",
        "|---|---|---:|---|",
    ]
    for (group, unit), rows in _groups(doc).items():
        for row in rows:
            ratio = (
                f"{row['ratio']:.2f}x ({row['low']:.2f}-{row['high']:.2f})"
                if "ratio" in row
                else "baseline"
            )
            if "against" in row:
                ratio += f" against {row['against']}"
            target = f", target {row['target']}x" if "target" in row else ""
            median = f"{row['median']:,.0f} {unit}"
            lines.append(f"| {group} | {row['name']} | {median} | {ratio}{target} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    """One panel per (group, unit): each configuration's ratio to the baseline as a bar, its
    per-round range as an error bar, and the target where there is one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(doc)
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(7, 0.5 + 0.45 * len(doc["rows"]) + 0.6 * len(groups))
    )
    axes = [axes] if len(groups) == 1 else list(axes)
    for ax, ((group, unit), rows) in zip(axes, groups.items(), strict=True):
        names = [row["name"] for row in rows]
        ratios = [row.get("ratio", 1.0) for row in rows]
        below = [r - row.get("low", r) for r, row in zip(ratios, rows, strict=True)]
        above = [row.get("high", r) - r for r, row in zip(ratios, rows, strict=True)]
        ax.barh(names, ratios, xerr=[below, above], color="#4c72b0", capsize=3)
        ax.axvline(1.0, color="black", linewidth=0.8)
        targets = [(k, row["target"]) for k, row in enumerate(rows) if "target" in row]
        for n, (k, target) in enumerate(targets):
            label = "target" if n == 0 else None
            ax.plot([target] * 2, [k - 0.4, k + 0.4], color="#c44e52", label=label)
        if targets:
            ax.legend(loc="lower right", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{group} ({unit})" if group else unit, fontsize=10)
        ax.set_xlabel(f"x {rows[-1].get('against', doc['baseline'])}", fontsize=9)
    fig.suptitle(f"{doc['benchmark']}: {doc['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


if __name__ == "__main__":
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "benchmarks" / "results"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "_generated"
    for written in render(results, out):
        print(written)
