"""How every benchmark measures and reports: rounds interleaved, ratios against a baseline
measured in the same rounds, and the figures as JSON for the docs' plots and tables.

Measuring: :func:`interleaved` takes each contender once a round, in turn, so that drift on a
shared machine hits them all alike; :func:`loader_rates` does so for loaders (images/s read
with ``fastload.autotune.rates.read_rate``, the loop ``fastload bench`` and autotune measure
with). Printing: :func:`spread`, the median ratio and its range. Writing: a script adds
``--json PATH`` with :func:`add_argument` and, at its end, calls :func:`write` with one
:func:`row` per configuration measured; the file records the machine, the date and the command
beside the figures, so that a plot in the docs always says which run made it. The docs read
``docs/benchmarks/results/<benchmark>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import platform
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastload.autotune.rates import endless, read_rate
from fastload.bench.usage import Spent, counted, settle
from fastload.system import cpu_cores


def interleaved(
    contenders: Mapping[str, Callable[[], float]], rounds: int
) -> dict[str, list[float]]:
    """Each contender's figure, once a round and in turn, for ``rounds`` rounds: what every
    ratio here is taken over."""
    figures: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, measure in contenders.items():
            figures[name].append(measure())
    return figures


def loader_rates(
    loaders: Mapping[str, Iterable[Any]],
    *,
    rounds: int,
    seconds: float,
    warmup: int,
    spent: Mapping[str, Spent] | None = None,
) -> dict[str, list[float]]:
    """Each loader's images/s a round, rounds interleaved, after ``warmup`` batches of each
    (workers started, caches warm, compilers done); every loader is kept alive between its
    rounds, as the same loader in training is. With ``spent``, each round starts once the
    loaders before it are idle, and its CPU (this process's and its workers') and wall time
    go to the loader's :class:`~fastload.bench.usage.Spent`, as ``fastload bench`` counts them.
    """
    streams = {name: endless(loader) for name, loader in loaders.items()}

    def measure(name: str) -> float:
        if spent is None:
            return read_rate(streams[name], seconds=seconds).rate
        settle(limit=2.0)
        with counted(spent[name]):
            return read_rate(streams[name], seconds=seconds).rate

    try:
        for stream in streams.values():
            read_rate(stream, count=warmup)
        return interleaved({name: functools.partial(measure, name) for name in streams}, rounds)
    finally:
        for stream in streams.values():
            stream.close()


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--json PATH`` to a benchmark's arguments."""
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the figures as JSON to PATH (the docs read "
        "docs/benchmarks/results/<benchmark>.json)",
    )


def ratios(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Each round's ratio of ``values`` to ``baseline``, measured in the same rounds (a
    configuration that failed mid-run has fewer rounds than its baseline: the rounds both
    have)."""
    return [a / b for a, b in zip(values, baseline, strict=False)]


def spread(values: Sequence[float], baseline: Sequence[float], *, digits: int = 2) -> str:
    """The per-round ratios of ``values`` to ``baseline`` as every benchmark prints them: the
    median, then the lowest and the highest, ``"1.23x (1.10-1.30)"``."""
    each = ratios(values, baseline)
    median, low, high = statistics.median(each), min(each), max(each)
    return f"{median:.{digits}f}x ({low:.{digits}f}-{high:.{digits}f})"


def row(
    name: str,
    rates: Sequence[float],
    baseline: Sequence[float] | None = None,
    *,
    unit: str = "images/s",
    target: float | None = None,
    group: str = "",
    against: str | None = None,
) -> dict[str, Any]:
    """One configuration: its per-round figures and, against the baseline measured in the same
    rounds, the median per-round ratio and its range.

    Args:
        name: The configuration, as the plot labels it.
        rates: One figure a round.
        baseline: The baseline's figure in the same rounds, in the same order; None for the
            baseline itself.
        unit: What ``rates`` counts.
        target: The ratio the project aims at, drawn on the plot when given.
        group: Rows of one group share a plot (for example "train" and "val" pipelines).
        against: What ``baseline`` measured, when it is not the run's own baseline (the
            plot's axis and the table say so).
    """
    out: dict[str, Any] = {
        "name": name,
        "group": group,
        "unit": unit,
        "rates": [round(r, 3) for r in rates],
        "median": round(statistics.median(rates), 3),
    }
    if baseline is not None:
        each = ratios(rates, baseline)
        out |= {
            "ratio": round(statistics.median(each), 3),
            "low": round(min(each), 3),
            "high": round(max(each), 3),
        }
    if target is not None:
        out["target"] = target
    if against is not None:
        out["against"] = against
    return out


def from_bench(rows: Sequence[Any], *, group: str) -> list[dict[str, Any]]:
    """:func:`row`'s for ``fastload.bench.run``'s rows, each against the first (stock
    torchvision's, measured in the same rounds); rows that did not run are left out."""
    stock = rows[0].rates
    return [
        row(r.backend, r.rates, None if k == 0 else stock, group=group)
        for k, r in enumerate(rows)
        if r.rates
    ]


def machine() -> dict[str, Any]:
    """What ran it: CPU model, the cores this process may use, the GPU if torch sees one."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        # the first processor's fields: a bare model name ("AMD EPYC") names no generation,
        # and the ratios of a run move with it; family and model say which
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (
                line.partition(":") for line in cpuinfo.read_text().split("\n\n")[0].splitlines()
            )
        )
        model = fields.get("model name", model)
        if "cpu family" in fields:
            model += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    info: dict[str, Any] = {"cpu": model, "cores": cpu_cores()}
    if "torch" in sys.modules:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def write(
    path: str | None,
    *,
    benchmark: str,
    title: str,
    baseline: str,
    rows: list[dict[str, Any]],
    settings: dict[str, Any],
) -> None:
    """Write the figures to ``path`` (nothing when it is None).

    Args:
        path: Where; its folder is made.
        benchmark: The script's name, without ``.py``.
        title: One line saying what was measured.
        baseline: The configuration each ratio is taken against.
        rows: :func:`row`'s results.
        settings: The run's options (workers, batch size, rounds, seconds, data).
    """
    if path is None:
        return
    from fastload.version import __version__

    doc = {
        "benchmark": benchmark,
        "title": title,
        "baseline": baseline,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", *sys.argv]),
        "fastload": __version__,
        "machine": machine(),
        "settings": settings,
        "rows": rows,
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"figures written to {out}")
