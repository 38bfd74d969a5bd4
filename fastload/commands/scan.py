"""``fastload scan``: check a dataset folder for files that will not decode, or decode oddly."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from fastload.commands.arguments import CLIError, positive_int

__all__ = ["HELP", "add", "run"]

HELP = "check a dataset folder for files that will not decode, or decode oddly"


def add(sub: Any) -> None:
    from fastload.backends import DEFAULT_MAX_PIXELS, choices

    scan = sub.add_parser(
        "scan",
        help=HELP,
        description="Check every image file under DIR (or every sample's image in shards: a "
        "folder of .tar files, a pack, a brace pattern), in parallel: unreadable, truncated, "
        "oversized, wrongly named, CMYK and grayscale files. Exit status: 0 when nothing was "
        "found, 1 when something was (or no image file at all), 2 for a usage error.",
    )
    scan.add_argument("dir", metavar="DIR", help="the dataset folder, or shards")
    scan.add_argument("--json", action="store_true", help="print one JSON object")
    scan.add_argument(
        "--workers", type=positive_int, default=None, help="processes (default: one per core)"
    )
    scan.add_argument(
        "--backend",
        choices=choices(),
        default="auto",
        help="the backend to try files with (default: auto)",
    )
    scan.add_argument(
        "--max-pixels",
        type=positive_int,
        default=DEFAULT_MAX_PIXELS,
        help=f"report images larger than this as oversized (default: {DEFAULT_MAX_PIXELS:,})",
    )
    scan.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fastload._progress import Progress
    from fastload.diagnosis.scan import KINDS, scan
    from fastload.shards.sources import is_shards

    shards = is_shards(args.dir)
    if not shards and not os.path.isdir(args.dir):
        raise CLIError(f"{args.dir!r} is not a folder or shards")
    progress = Progress("scan")
    try:
        report = scan(
            args.dir,
            workers=args.workers,
            backend=args.backend,
            max_pixels=args.max_pixels,
            progress=progress,
        )
    except ValueError as exc:  # an unknown backend
        raise CLIError(str(exc)) from None
    finally:
        progress.close()
    if report.files == 0:
        print(
            f"fastload scan: no image files found under {args.dir} (looked for the extensions "
            "torchvision's ImageFolder reads: .jpg, .jpeg, .png, .webp, ...)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 1 if report.findings else 0
    bad_files = len({f.path for f in report.findings})
    print(f"scanned {report.files} image files in {report.root}: {bad_files} with problems")
    print(f"  {'kind':<16} {'files':>6}  meaning")
    for kind, count in report.counts.items():
        print(f"  {kind:<16} {count:>6}  {KINDS[kind]}")
    if report.findings:
        print()
        for f in report.findings:
            name = f.path if shards else os.path.relpath(f.path, report.root)
            print(f"  {f.kind:<16} {name}: {f.detail}")
    return 1 if report.findings else 0
