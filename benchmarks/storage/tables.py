"""Images in tables: the Hugging Face pattern with torch's DataLoader against
``fastload.ImageTable``, and a Parquet image column read in place against the same images
packed as fastload shards.

The rows, on the same photos, with the same torchvision v2 train pipeline (RandomResizedCrop,
flip, ToImage, ToDtype float32, Normalize):

- ``hf + torch``: the pattern of transformers' image-classification example:
  ``datasets.load_dataset("parquet", ...)``, ``with_transform`` applying the pipeline to each
  ``image.convert("RGB")`` (``datasets`` decodes each image whole with Pillow), a ``collate_fn``
  building ``{"pixel_values", "labels"}``, torch's ``DataLoader``;
- ``hf + fastload``: the same script with ``fastload.DataLoader(..., accelerate=True)`` in place
  of torch's (the ``with_transform`` function read as the example writes it, the images decoded
  fused with its pipeline; the example's ``collate_fn`` proved to stack the images, so the
  conversion runs once a batch on them);
- ``ImageTable(dataset)``: ``fastload.ImageTable`` over the same ``datasets.Dataset``, the
  pipeline as its transform, ``fastload.DataLoader(..., accelerate=True)``;
- ``ImageTable(parquet)``: the same over the Parquet files, read in place (into memory once);
- ``ImageTable(row groups)``: the same files read a row group at a time
  (``in_memory=False``), ordered by ``fastload.ShardSampler`` a few row groups at a time;
- ``hf stream + torch``: the files streamed by ``datasets`` (``streaming=True``, its shuffle
  buffer of 256), the pipeline applied by the stream's ``map`` to each ``image.convert("RGB")``,
  the example's ``collate_fn``, torch's ``DataLoader``;
- ``ImageTableStream``: the same shuffled stream read by ``fastload.ImageTableStream``.
  ``datasets`` 5 pauses 5 s at the end of each pass over a shuffled stream of several files
  (``config.SLEEP_TIME_ON_THREADS_SHUTDOWN``, a workaround for an Arrow issue): an epoch of a
  real dataset hides it, these epochs of 600 photos would measure nothing else, so both
  stream rows run with it at 0;
- ``ImageShards``: the same photos packed by ``fastload.pack``, read by ``fastload.ImageShards``.

The Parquet files are written by ``datasets`` in row groups of 100 rows, as it writes image
datasets for the Hub.

Rounds are interleaved (``results.loader_rates``). Run:
python benchmarks/storage/tables.py [--data DIR] [--work DIR] [--workers 2] [--rounds 4]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torchvision.transforms.v2 as v2

import fastload
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def pipeline(size: int) -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(size),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


def write_tables(data: str, work: Path) -> tuple[Path, Path]:
    """The photos as Parquet files with embedded bytes (two files, as the Hub splits a
    dataset), and as fastload shards; made once in ``work``."""
    import datasets

    parquet, shards = work / "parquet-100", work / "shards"
    if not parquet.exists():
        folder = fastload.ImageFolder(data)
        features = datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=folder.classes)}
        )
        rows = {
            "image": [{"bytes": Path(p).read_bytes(), "path": None} for p, _ in folder.samples],
            "label": folder.targets,
        }
        table = datasets.Dataset.from_dict(rows, features=features)
        making = Path(tempfile.mkdtemp(dir=work))
        half = len(table) // 2
        for k, rows in enumerate((range(half), range(half, len(table)))):
            name = making / f"train-{k:05}-of-00002.parquet"
            table.select(rows).to_parquet(str(name), batch_size=100)  # a row group a batch
        making.rename(parquet)
    if not shards.exists():
        fastload.pack(data, shards, progress=False)
    return parquet, shards


def hf_loader(dataset: Any, size: int, common: dict[str, Any], loader: Any) -> Any:
    """transformers' example's way: the pipeline in ``with_transform``, the loader given
    (torch's, or fastload's swapped in with ``accelerate=True``)."""
    train = pipeline(size)

    def transforms(batch: dict[str, Any]) -> dict[str, Any]:
        batch["pixel_values"] = [train(image.convert("RGB")) for image in batch["image"]]
        return batch

    def collate_fn(examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example["label"] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    return loader(dataset.with_transform(transforms), collate_fn=collate_fn, **common)


def hf_stream_loader(stream: Any, size: int, common: dict[str, Any]) -> Any:
    """The streaming form of the pattern: the pipeline in the stream's ``map``, torch's
    loader (no ``shuffle=``: the stream shuffles itself)."""
    train = pipeline(size)

    def transform(example: dict[str, Any]) -> dict[str, Any]:
        return {"pixel_values": train(example["image"].convert("RGB")), "label": example["label"]}

    def collate_fn(examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example["label"] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    mapped = stream.map(transform, remove_columns=["image"])
    options = {k: v for k, v in common.items() if k != "shuffle"}
    return torch.utils.data.DataLoader(mapped, collate_fn=collate_fn, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder image set (default: the cached default)")
    parser.add_argument("--work", help="where the tables and shards are made (kept)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed reading a round")
    parser.add_argument("--rounds", type=int, default=4)
    results.add_argument(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    data = str(args.data or default_data())
    work = Path(args.work or Path(tempfile.gettempdir()) / "fastload-bench-tables")
    work.mkdir(parents=True, exist_ok=True)
    parquet, shards = write_tables(data, work)
    loaded = datasets.load_dataset(
        "parquet",
        data_files=str(parquet / "*.parquet"),
        split="train",
        cache_dir=str(work / "hf-cache"),
    )
    common = {
        "batch_size": args.batch_size,
        "num_workers": args.workers,
        "shuffle": True,
        "persistent_workers": args.workers > 0,
    }

    def fast(dataset: Any, **options: Any) -> Any:
        return fastload.DataLoader(dataset, accelerate=True, **(common | options))

    grouped = fastload.ImageTable(parquet, pipeline(args.size), in_memory=False)
    datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0  # see the module's notes
    stream = datasets.load_dataset(
        "parquet", data_files=str(parquet / "*.parquet"), split="train", streaming=True
    ).shuffle(seed=0, buffer_size=256)

    loaders = {
        "hf + torch": hf_loader(loaded, args.size, common, torch.utils.data.DataLoader),
        "hf + fastload": hf_loader(
            loaded, args.size, common, functools.partial(fastload.DataLoader, accelerate=True)
        ),
        "ImageTable(dataset)": fast(fastload.ImageTable(loaded, pipeline(args.size))),
        "ImageTable(parquet)": fast(fastload.ImageTable(parquet, pipeline(args.size))),
        "ImageTable(row groups)": fast(
            grouped, shuffle=None, sampler=fastload.ShardSampler(grouped, seed=0)
        ),
        "hf stream + torch": hf_stream_loader(stream, args.size, common),
        "ImageTableStream": fast(
            fastload.ImageTableStream(stream, pipeline(args.size)), shuffle=None
        ),
        "ImageShards": fast(fastload.ImageShards(shards, pipeline(args.size), target="cls")),
    }
    print(
        f"fastload {fastload.__version__}, datasets {datasets.__version__}; {args.workers} "
        f"workers, batch {args.batch_size}, size {args.size}, {args.rounds} interleaved rounds "
        f"of {args.seconds:g} s; {len(loaded)} photos from {data}"
    )
    started = time.perf_counter()
    rates = results.loader_rates(
        loaders, rounds=args.rounds, seconds=args.seconds, warmup=2 * args.workers + 1
    )
    for name, values in rates.items():
        print(f"{name:>20}: " + ", ".join(f"{v:7.1f}" for v in values) + " images/s")
    hf, table = rates["hf + torch"], rates["ImageTable(dataset)"]
    swapped = rates["hf + fastload"]
    print(f"hf + fastload / hf + torch: {results.spread(swapped, hf)}")
    print(f"ImageTable(dataset) / hf + torch: {results.spread(table, hf)}")
    for name in ("ImageTable(parquet)", "ImageTable(row groups)"):
        print(f"{name} / ImageShards: {results.spread(rates[name], rates['ImageShards'])}")
    streams = rates["ImageTableStream"], rates["hf stream + torch"]
    print(f"ImageTableStream / hf stream + torch: {results.spread(*streams)}")
    print(f"({time.perf_counter() - started:.0f} s)")
    results.write(
        args.json,
        benchmark="tables",
        title="Images in tables: the Hugging Face pattern against fastload.ImageTable",
        baseline="hf + torch",
        rows=[
            results.row("hf + torch", hf, group="against the pattern"),
            results.row("hf + fastload", swapped, hf, group="against the pattern", target=2.0),
            results.row("ImageTable(dataset)", table, hf, group="against the pattern", target=2.0),
            results.row("ImageShards", rates["ImageShards"], group="in place against shards"),
            results.row(
                "ImageTable(parquet)",
                rates["ImageTable(parquet)"],
                rates["ImageShards"],
                group="in place against shards",
                target=0.95,
                against="ImageShards",
            ),
            results.row(
                "ImageTable(row groups)",
                rates["ImageTable(row groups)"],
                rates["ImageShards"],
                group="in place against shards",
                against="ImageShards",
            ),
            results.row("hf stream + torch", streams[1], group="streams"),
            results.row(
                "ImageTableStream",
                streams[0],
                streams[1],
                group="streams",
                against="hf stream + torch",
            ),
        ],
        settings={k: getattr(args, k) for k in ("workers", "batch_size", "size", "seconds")}
        | {"rounds": args.rounds, "data": data},
    )


if __name__ == "__main__":
    main()
