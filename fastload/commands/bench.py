"""``fastload bench``: images/s of each backend against the stock torchvision pipeline."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

from fastload.commands.arguments import (
    CLIError,
    add_data,
    data_argument,
    data_folder,
    positive_float,
    positive_int,
    workers,
)

__all__ = ["HELP", "add", "run"]

HELP = "images/s of each backend against the stock torchvision pipeline"


def add(sub: Any) -> None:
    from fastload.backends import choices
    from fastload.bench import PIPELINES

    bench = sub.add_parser(
        "bench",
        help=HELP,
        description="Measure images/s of a pipeline for each decoding backend and for the stock "
        "torchvision pipeline, in the same run. Without --data, a set of ImageNet-like JPEGs is "
        "made once and cached.",
    )
    add_data(bench)
    bench.add_argument(
        "--backend",
        choices=[*choices(), "all"],
        default="all",
        help="the backend to measure beside the stock pipeline: auto (the one fastload "
        "chooses here), a backend's name, or all (default: all)",
    )
    bench.add_argument(
        "--pipeline",
        choices=PIPELINES,
        default="train",
        help="train: RandomResizedCrop 224; val: Resize 256 + CenterCrop 224; decode: decoding "
        "only (default: train)",
    )
    bench.add_argument(
        "--batch-size", type=positive_int, default=64, help="images per batch (default: 64)"
    )
    bench.add_argument(
        "--num-workers",
        type=workers,
        default=2,
        metavar="N|auto",
        help="worker processes per loader, or auto to tune each (default: 2)",
    )
    bench.add_argument(
        "--device", default="cpu", help="where batches go: cpu or cuda[:N] (default: cpu)"
    )
    bench.add_argument(
        "--seconds",
        type=positive_float,
        default=20.0,
        help="measuring time in all, shared by the loaders and rounds (default: 20)",
    )
    bench.add_argument(
        "--accelerated",
        action="store_true",
        help="also measure the stock torchvision dataset, unchanged, through "
        "fastload.DataLoader(accelerate=True) (train and val)",
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--plot", metavar="FILE.png", help="also write a bar chart")
    bench.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.backends import names as registered
    from fastload.backends import resolve
    from fastload.bench import (
        StockFailed,
        format_table,
        notes,
        run,
        write_plot,
    )
    from fastload.shards.sources import is_shards
    from fastload.system import cpu_cores, load_average

    data = data_folder(data_argument(args), "making the default image set")
    # shards' broken members are met as they are read (skipped, or stood in for)
    bad: list[str] = [] if is_shards(data) else _checked(data)
    # "auto": the backend a dataset made with backend="auto" decodes with here
    names = tuple(registered()) if args.backend == "all" else (resolve(args.backend),)
    load_before = load_average() or 0.0
    # the rounds are timed by the clock: a count per second would say nothing
    progress = Progress("bench", rate=False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            rows = run(
                data,
                names=names,
                pipeline=args.pipeline,
                batch_size=args.batch_size,
                num_workers=args.num_workers,
                device=args.device,
                seconds=args.seconds,
                accelerated=args.accelerated,
                progress=progress,
                exclude=bad,
            )
    except StockFailed as exc:  # e.g. a file it cannot read
        raise CLIError(f"{exc}; 'fastload scan {data}' finds unreadable files", status=1) from None
    except (ValueError, RuntimeError) as exc:  # e.g. a CUDA device on a machine without one
        raise CLIError(str(exc).splitlines()[0]) from None
    finally:
        progress.close()
    remarks = [str(n.message) for n in caught]  # each once, without a source line
    remarks += notes(rows, load_before=load_before, cores=cpu_cores())
    for note in dict.fromkeys(remarks):
        print(f"fastload bench: note: {note}", file=sys.stderr)
    if args.plot:
        write_plot(rows, args.plot)
    if args.json:
        results = [r.to_dict() for r in rows]
        out = {"data": data, "load_before": load_before, "notes": remarks, "results": results}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{rows[0].pipeline} pipeline on {data}: batch {args.batch_size}, device {args.device}")
    print("\n".join(format_table(rows)))
    if args.plot:
        print(f"bar chart written to {args.plot}")
    return 0


def _checked(data: str) -> list[str]:
    """A folder's image files that are no image (left out on every side), noted."""
    from fastload._progress import Progress
    from fastload.diagnosis.scan import unreadable_files

    checking = Progress(
        "checking files", rate=False, log="fastload bench: checking the files' first bytes"
    )
    try:
        total, bad = unreadable_files(data, progress=checking)
    except ValueError as exc:
        raise CLIError(f"{exc}; run 'fastload scan {data}'", status=1) from None
    finally:
        checking.close()
    if len(bad) == total:
        raise CLIError(
            f"none of the {total} image files in {data!r} is a readable image; run "
            f"'fastload scan {data}'",
            status=1,
        )
    if bad:
        first = ", ".join(os.path.relpath(p, data) for p in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        print(
            f"fastload bench: note: left out {len(bad)} of {total} files that are not images "
            f"({first}{more}), on every side; 'fastload scan {data}' lists them all",
            file=sys.stderr,
        )
    return bad
