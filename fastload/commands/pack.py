"""``fastload pack``: write a class-folder dataset as tar shards (the WebDataset layout)."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from fastload.commands.arguments import CLIError, positive_int

__all__ = ["HELP", "add", "run"]

HELP = "write a class-folder dataset as tar shards that fastload, webdataset and DALI read"

_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def byte_size(text: str) -> int:
    """``268435456``, ``256MiB``, ``300MB``, ``1G``: a number of bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?)?[bB]?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 256MiB, 1GB, 500000000)")
    number, unit = float(match.group(1)), (match.group(2) or "").lower()
    return int(number * _UNITS[unit])


def add(sub: Any) -> None:
    pack = sub.add_parser(
        "pack",
        help=HELP,
        description="Write the images under SOURCE (one sub-folder per class, as torchvision's "
        "ImageFolder reads) into OUT as tar shards: KEY.jpg (the file's bytes unchanged), "
        "KEY.cls (the label), KEY.json (the original path and size); beside them an index per "
        "shard (DALI's webdataset index) and manifest.json. Read OUT with "
        "fastload.ImageShards(OUT). With --coco, SOURCE is the folder a COCO annotation file's "
        "images are in, and each image is written as KEY.jpg and KEY.json (its image_id and "
        "annotations), the categories in the manifest: read OUT with "
        "fastload.detection.CocoShards(OUT). A stopped run continues when started again with "
        "the same settings.",
    )
    pack.add_argument(
        "source",
        metavar="SOURCE",
        help="the class-folder dataset, or an image-text table (.csv, .tsv, .parquet)",
    )
    pack.add_argument(
        "out",
        metavar="OUT",
        help="the folder to write (new or empty), or a remote prefix such as s3://bucket/pack",
    )
    _storage_arguments(pack)
    _pixel_arguments(pack)
    _table_arguments(pack)
    pack.add_argument(
        "--coco",
        metavar="ANNOTATIONS",
        default=None,
        help="a COCO annotation file (instances_*.json) whose images SOURCE holds: pack a "
        "detection dataset",
    )
    pack.add_argument("--no-json", action="store_true", help="leave out KEY.json")
    pack.add_argument("--json", action="store_true", help="print the manifest as JSON")
    pack.set_defaults(run=run)


def _storage_arguments(pack: Any) -> None:
    """How the shards are written: where, how big, in which order, re-encoded or not."""
    from fastload.shards.pack import DEFAULT_SHARD_SIZE

    pack.add_argument(
        "--storage-options",
        metavar="JSON",
        type=json.loads,
        default=None,
        help="for a remote OUT: fsspec's storage options as JSON, e.g. "
        '\'{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}\' (credentials and '
        "endpoints are also read from the usual environment variables)",
    )
    pack.add_argument(
        "--shard-size",
        type=byte_size,
        default=DEFAULT_SHARD_SIZE,
        metavar="SIZE",
        help=f"the most bytes a shard holds (default: {DEFAULT_SHARD_SIZE // 2**20}MiB)",
    )
    pack.add_argument(
        "--seed", type=int, default=0, help="shuffle samples across shards with it (default: 0)"
    )
    pack.add_argument(
        "--no-shuffle",
        action="store_true",
        help="keep the folder's order (one class after another)",
    )
    pack.add_argument(
        "--max-side",
        type=positive_int,
        default=None,
        metavar="PIXELS",
        help="re-encode larger images to this longest side as JPEGs (changes pixels; off by "
        "default)",
    )
    pack.add_argument(
        "--quality", type=positive_int, default=90, help="JPEG quality of --max-side (default: 90)"
    )
    pack.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="reading threads or re-encoding processes (default: one per core)",
    )


def _pixel_arguments(pack: Any) -> None:
    """How an image member holds its pixels."""
    from fastload.shards.pack import PIXELS

    pack.add_argument(
        "--pixels",
        choices=PIXELS,
        default="encoded",
        help="encoded: the image files (or their --max-side JPEGs); raw: decoded RGB pixels "
        "(upright, at --max-side if given) as PPM, no decoding, several times the bytes; "
        "seekable: as encoded, JPEGs rewritten losslessly with restart markers, which the "
        "region backend decodes a crop of faster (default: encoded)",
    )
    pack.add_argument(
        "--raw-share",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="with --pixels raw: store this share of the images raw, those whose files hold the "
        "most bytes per pixel (where raw saves the most decoding per byte added), the rest as "
        "with --pixels encoded (default: 1, all)",
    )


def _table_arguments(pack: Any) -> None:
    """How an image-text table's columns are read (OpenCLIP's CSV options)."""
    pack.add_argument(
        "--image-key",
        default="filepath",
        help="a table's column of image paths (OpenCLIP's --csv-img-key; default: filepath)",
    )
    pack.add_argument(
        "--caption-key",
        default="title",
        help="a table's column of captions (OpenCLIP's --csv-caption-key; default: title)",
    )
    pack.add_argument(
        "--separator",
        default=None,
        help="a CSV table's field separator (default: tab for .tsv, else comma)",
    )


def run(args: argparse.Namespace) -> int:
    import os

    from fastload.shards.format.tables import is_table
    from fastload.shards.pack import pack
    from fastload.shards.storage.remote import RemoteError

    if args.coco is not None and not os.path.isdir(args.source):
        raise CLIError(f"{args.source!r} is not a folder (with --coco: the images' folder)")
    if not os.path.isdir(args.source) and not is_table(args.source):
        raise CLIError(f"{args.source!r} is neither a folder nor a .csv, .tsv or .parquet table")
    if args.quality > 100:
        raise CLIError(f"--quality {args.quality} must be from 1 to 100")
    began = time.monotonic()
    try:
        source: Any = args.source
        if args.coco is not None:
            from fastload.detection.coco import CocoDetection

            source = CocoDetection(args.source, args.coco)
        manifest = pack(
            source,
            args.out,
            shard_size=args.shard_size,
            shuffle_seed=None if args.no_shuffle else args.seed,
            max_side=args.max_side,
            quality=args.quality,
            pixels=args.pixels,
            raw_share=args.raw_share,
            workers=args.workers,
            metadata=not args.no_json,
            storage_options=args.storage_options,
            image_key=args.image_key,
            caption_key=args.caption_key,
            separator=args.separator,
        )
    except (FileExistsError, FileNotFoundError, ValueError, RemoteError, ImportError) as exc:
        raise CLIError(str(exc), status=1) from None
    seconds = time.monotonic() - began
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=1))
        return 0
    size = sum(entry.bytes for entry in manifest.shards)
    reader = "fastload.detection.CocoShards" if args.coco else "fastload.ImageShards"
    print(
        f"packed {manifest.samples} images into {len(manifest.shards)} shards "
        f"({size / 2**20:,.1f} MiB) in {args.out} in {seconds:.1f} s; read them with "
        f"{reader}({args.out!r})"
    )
    return 0
