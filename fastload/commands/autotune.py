"""``fastload autotune``: measure which num_workers gives the most images/s here."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from fastload.commands.arguments import (
    add_data,
    data_argument,
    data_folder,
    image_dataset,
    positive_float,
    positive_int,
)
from fastload.options import WORKER_TYPE

__all__ = ["HELP", "add", "run"]

HELP = "measure which num_workers gives the most images/s here"


def add(sub: Any) -> None:
    from fastload.backends import choices

    tune = sub.add_parser(
        "autotune",
        help=HELP,
        description="Measure the training pipeline (RandomResizedCrop 224) with several worker "
        "counts, within a time budget, and choose the fewest workers within 3% of the best. "
        "The answer is cached; the next call for the same data returns at once.",
    )
    add_data(tune)
    tune.add_argument(
        "--backend", choices=choices(), default="auto", help="decoding backend (default: auto)"
    )
    tune.add_argument(
        "--batch-size", type=positive_int, default=64, help="images per batch (default: 64)"
    )
    tune.add_argument(
        "--budget",
        type=positive_float,
        default=30.0,
        help="seconds of measuring at most (default: 30)",
    )
    tune.add_argument(
        "--worker-type",
        choices=WORKER_TYPE,
        default="process",
        help="the workers as processes or threads; auto: both measured at the chosen count, "
        "the faster kept (default: process)",
    )
    tune.add_argument("--no-cache", action="store_true", help="measure even if an answer is cached")
    tune.add_argument(
        "--remeasure-loaded",
        action="store_true",
        help="measure again if the cached answer was taken under load (load average above "
        "the core count)",
    )
    tune.add_argument("--json", action="store_true", help="print one JSON object")
    tune.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.autotune import autotune
    from fastload.loader import DataLoader
    from fastload.system import cpu_cores
    from fastload.transforms import RandomResizedCrop

    data = data_folder(data_argument(args), "making the default image set")
    # unreadable files are skipped: they would stop the measurement, not change the answer
    dataset = image_dataset(
        data, RandomResizedCrop(224), backend=args.backend, command="autotune", on_error="skip"
    )
    kind = args.worker_type
    progress = Progress(
        "autotune",
        rate=False,
        log=f"fastload autotune: measuring worker counts, {args.budget:.0f} s at most",
    )
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            result = autotune(
                dataset,
                batch_size=args.batch_size,
                budget=args.budget,
                cache=not args.no_cache,
                progress=progress,
                loader=DataLoader,
                # the default is left out: the same question as num_workers="auto" asks
                loader_kwargs={} if kind == "process" else {"worker_type": kind},
                remeasure_loaded=args.remeasure_loaded,
            )
    finally:
        progress.close()
    for note in notes:  # a note about the measurement, not a Python warning with a source line
        print(f"fastload autotune: note: {note.message}", file=sys.stderr)
    if args.json:
        print(json.dumps({**result.to_dict(), "backend": dataset.backend, "data": data}, indent=2))
        return 0
    source = "measured now"
    if result.cached and result.loaded:
        source = (
            f"from the cache, measured under load ({result.load:.1f} on {cpu_cores()} cores); "
            "--remeasure-loaded or --no-cache measures again"
        )
    elif result.cached:
        source = "from the cache; --no-cache measures again"
    print(f"{dataset.backend} backend, batch {args.batch_size}, {data} ({source})")
    _table(result)
    setting = f"num_workers={result.num_workers}"
    if result.prefetch_factor is not None:
        setting += f", prefetch_factor={result.prefetch_factor}"
    if result.worker_type is not None:
        setting += f", worker_type={result.worker_type!r}"
    print(f"{setting}: {result.reason}")
    return 0


def _table(result: Any) -> None:
    """One line a measurement; prefetch and kind columns only when tried (blank: the
    loader's own)."""
    tried = any(m.prefetch_factor is not None for m in result.table)
    kinds = any(m.worker_type is not None for m in result.table)
    extra = (f" {'prefetch':>8}" if tried else "") + (f" {'workers':>8}" if kinds else "")
    print(f"  {'num_workers':>11} {'images/s':>9} {'seconds':>8} {'busy':>5}{extra}")

    def place(m: Any) -> tuple[int, int, str]:
        return m.num_workers, m.prefetch_factor or 0, m.worker_type or ""

    def chosen(m: Any) -> bool:
        if (m.num_workers, m.prefetch_factor) != (result.num_workers, result.prefetch_factor):
            return False
        return not kinds or m.worker_type == result.worker_type  # then the kinds' rows

    for m in sorted(result.table, key=place):
        mark = "  <- chosen" if chosen(m) else ""
        busy = "" if m.busy is None else f"{m.busy:.0%}"
        factor = f" {m.prefetch_factor or '':>8}" if tried else ""
        kind = f" {m.worker_type or '':>8}" if kinds else ""
        print(
            f"  {m.num_workers:>11} {m.images_per_sec:>9,.0f} {m.seconds:>8.1f} {busy:>5}"
            f"{factor}{kind}{mark}"
        )
