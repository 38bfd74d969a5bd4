"""What fastload's DALI backend costs over a hand-written DALI pipeline doing the same work.

Both run on DALI's CPU decoder (``device_id=None``), or with ``--device cuda`` on nvJPEG and
the GPU (``device="mixed"``), with the same thread count and batch size,
in the same run, with interleaved rounds (the median of each is reported):

* hand-written, two ways for train, and the faster of them is the baseline ("best hand"):
  ``readers.file`` (shuffled) -> ``decoders.image_random_crop`` (ROI decode, scale (0.08, 1),
  ratio (3/4, 4/3)) -> ``resize`` 224 x 224 (antialiased) -> ``crop_mirror_normalize`` (uint8,
  CHW) ("hand ROI"); or ``decoders.image`` (the whole image) -> ``random_resized_crop`` 224
  (antialiased) -> ``crop_mirror_normalize`` ("hand whole"). For val: ``decoders.image`` ->
  ``resize`` (shorter side 256) -> ``crop_mirror_normalize`` (centre 224). The output becomes
  a torch tensor by DLPack, without a copy, as DALI's own PyTorch iterator does with DALI's
  default (dynamic) executor;
* train-normalize: the "hand ROI" pipeline with a random mirror and ImageNet's mean and std in
  ``crop_mirror_normalize`` (float32), against fastload with
  ``batch_transforms=gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize(...)])``, which
  the DALI executor folds into the same op;
* fastload: ``fastload.ImageFolder(root, transform=...)`` through
  ``fastload.DataLoader(..., backend="dali", num_workers=threads)``, with
  ``RandomResizedCrop(224)`` (train) or ``Resize(256) + CenterCrop(224)`` (val).

Epochs: DALI's reader in the hand-written pipeline never ends one. The torch-style loaders
read epochs of ``--epoch-samples`` (12,800 by default: a ``RandomSampler`` that shuffles each
pass over the files anew), where the 600-image default set would end an epoch every 9
batches and an ImageNet epoch lasts 20,000. A loader empties its queue at an epoch's end, so
"fastload dali, own epochs" (the dataset's own, ``shuffle=True``) shows what that costs on a
set this small. ``--epoch-samples 0`` gives every loader the dataset's own epochs.

The stock torchvision pipeline and fastload's best CPU backend (``turbojpeg`` with worker
processes) are measured in the same rounds, for comparison.

Run: python benchmarks/peers/dali_overhead.py [--data DIR] [--threads 2] [--seconds 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.autotune.rates import endless
from fastload.bench import stock_dataset
from fastload.synthetic import default_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def hand_written(
    root: Path, pipeline: str, threads: int, batch: int, *, roi: bool = True, device: str = "cpu"
) -> Iterator[Any]:
    """DALI's own way: a file reader and DALI ops, written directly against DALI.

    ``roi``: for train, decode only the random crop (``decoders.image_random_crop``), or
    decode whole images and crop after (``random_resized_crop``).
    """
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    files = sorted(str(p) for p in root.glob("*/*") if p.suffix.lower() in (".jpg", ".jpeg"))
    cuda = device.startswith("cuda")
    where = "mixed" if cuda else "cpu"  # nvJPEG on a GPU, DALI's CPU decoder otherwise
    pipe = Pipeline(
        batch_size=batch,
        num_threads=threads,
        device_id=torch.device(device).index or 0 if cuda else None,
        seed=1,
    )
    with pipe:
        encoded, labels = fn.readers.file(
            files=files, labels=list(range(len(files))), random_shuffle=True, name="files"
        )
        if pipeline.startswith("train") and roi:  # decode only the random crop
            images = fn.decoders.image_random_crop(
                encoded,
                device=where,
                output_type=types.RGB,
                random_area=(0.08, 1.0),
                random_aspect_ratio=(3 / 4, 4 / 3),
            )
            images = fn.resize(images, size=(224, 224), antialias=True)
        elif pipeline == "train":
            images = fn.decoders.image(encoded, device=where, output_type=types.RGB)
            images = fn.random_resized_crop(images, size=(224, 224), antialias=True)
        else:
            images = fn.decoders.image(encoded, device=where, output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256, antialias=True)
        if pipeline == "train-normalize":  # the reference for issue 30: flip + Normalize in DALI
            images = fn.crop_mirror_normalize(
                images,
                mirror=fn.random.coin_flip(probability=0.5),
                mean=[255 * m for m in MEAN],
                std=[255 * s for s in STD],
                dtype=types.FLOAT,
                output_layout="CHW",
            )
        else:  # val's centre crop (train's images are 224 x 224 already)
            images = fn.crop_mirror_normalize(
                images, crop=(224, 224), dtype=types.UINT8, output_layout="CHW"
            )
        pipe.set_outputs(images, labels)
    pipe.build()
    while True:
        images, labels = pipe.run()
        # DALI's own PyTorch iterator with the dynamic executor (DALI's default): the output is
        # handed over through DLPack, no copy
        with torch.device(device):
            out = torch.from_dlpack(images.as_tensor())
        yield out, torch.from_numpy(labels.as_array().reshape(-1))


def order(dataset: Any, epoch_samples: int) -> dict[str, Any]:
    """The loader arguments that read epochs of ``epoch_samples`` (0: the dataset's own)."""
    if not epoch_samples:
        return {"shuffle": True}
    return {"sampler": torch.utils.data.RandomSampler(dataset, num_samples=epoch_samples)}


def through_fastload(
    root: Path,
    pipeline: str,
    backend: str,
    workers: int,
    batch: int,
    device: str = "cpu",
    epoch_samples: int = 0,
):
    transform = (
        T.RandomResizedCrop(224)
        if pipeline.startswith("train")
        else T.Compose([T.Resize(256), T.CenterCrop(224)])
    )
    # train-normalize: a flip and Normalize as batch ops, which DALI folds into its
    # crop_mirror_normalize (and the CPU backends run on the collated batch)
    ops = (
        gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize(MEAN, STD)])
        if pipeline == "train-normalize"
        else None
    )
    dali = backend == "dali"
    ds = fastload.ImageFolder(root, transform=transform, backend="auto" if dali else backend)
    loader = fastload.DataLoader(
        ds,
        batch_size=batch,
        **order(ds, epoch_samples),
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0 and not dali,
        backend="dali" if dali else None,
        batch_transforms=ops,
        device=device,
    )
    return endless(loader)


def stock(
    root: Path, pipeline: str, workers: int, batch: int, epoch_samples: int = 0
) -> Iterator[Any]:
    dataset = stock_dataset(root, "train" if pipeline == "train-normalize" else pipeline)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        **order(dataset, epoch_samples),
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    return endless(loader)


def measure(batches: Iterator[Any], seconds: float) -> float:
    seen, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        seen += len(next(batches)[0])
    return seen / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a class-folder JPEG set (default: the cached default)")
    parser.add_argument("--threads", type=int, default=2, help="DALI threads = worker processes")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring time per pipeline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--epoch-samples",
        type=int,
        default=12_800,
        help="samples per epoch of the torch-style loaders (0: the dataset's own epochs)",
    )
    parser.add_argument(
        "--device", default="cpu", help="cpu (DALI's CPU decoder) or cuda (nvJPEG, GPU resize)"
    )
    parser.add_argument(
        "--pipelines",
        nargs="+",
        default=["train", "val", "train-normalize"],
        choices=["train", "val", "train-normalize"],
    )
    results.add_argument(parser)
    args = parser.parse_args()
    root = Path(args.data or default_data())
    print(
        f"fastload {fastload.__version__}, torch {torch.__version__}; {args.threads} DALI "
        f"threads / workers, batch {args.batch_size}, {args.rounds} interleaved rounds; "
        f"data: {root}; epochs of {args.epoch_samples or 'the dataset'} samples"
    )
    figures = []
    for pipeline in args.pipelines:
        streams = contenders(root, pipeline, args)
        for batches in streams.values():
            for _ in range(3):  # warm-up: pipelines built, workers started
                next(batches)
        rates: dict[str, list[float]] = {name: [] for name in streams}
        slice_s = args.seconds / (len(streams) * args.rounds)
        for _ in range(args.rounds):
            for name, batches in streams.items():
                rates[name].append(measure(batches, slice_s))
        for batches in streams.values():
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        report(pipeline, rates)
        stock = rates["stock torchvision"]
        figures += [
            results.row(name, r, None if r is stock else stock, group=pipeline)
            for name, r in rates.items()
        ]
    results.write(
        args.json,
        benchmark="dali_overhead",
        title=f"fastload's DALI backend against hand-written DALI, {args.threads} threads",
        baseline="stock torchvision",
        rows=figures,
        settings={
            k: getattr(args, k)
            for k in ("threads", "batch_size", "seconds", "rounds", "epoch_samples", "device")
        },
    )


def contenders(root: Path, pipeline: str, args: argparse.Namespace) -> dict[str, Iterator[Any]]:
    """Every loader measured for ``pipeline``, by the name its row gets."""
    n, b, epoch, device = args.threads, args.batch_size, args.epoch_samples, args.device
    streams: dict[str, Iterator[Any]] = {
        "stock torchvision": stock(root, pipeline, n, b, epoch),
        "hand ROI": hand_written(root, pipeline, n, b, device=device),
        "fastload dali": through_fastload(root, pipeline, "dali", n, b, device, epoch),
        "fastload turbojpeg": through_fastload(root, pipeline, "turbojpeg", n, b, device, epoch),
    }
    if epoch:
        streams["fastload dali, own epochs"] = through_fastload(
            root, pipeline, "dali", n, b, device
        )
    if pipeline == "train":
        streams["hand whole"] = hand_written(root, pipeline, n, b, roi=False, device=device)
    return streams


def report(pipeline: str, rates: dict[str, list[float]]) -> None:
    """The medians against the best hand-written pipeline and stock, and the paired ratios."""
    median = {name: statistics.median(r) for name, r in rates.items()}
    best = max((name for name in median if name.startswith("hand")), key=median.__getitem__)
    hand = median[best]
    base = median["stock torchvision"]
    print(f"\n{pipeline} pipeline (best hand-written: {best})")
    print(f"  {'loader':<26} {'images/s':>9} {'x best hand':>12} {'x stock':>8}")
    for name, rate in median.items():
        print(f"  {name:<26} {rate:>9.0f} {rate / hand:>12.2f} {rate / base:>8.2f}")
    # fastload against the best hand-written pipeline round by round: the same round's
    # two slices saw the same load, so their ratio is steadier than the medians' ratio
    paired = [f / h for f, h in zip(rates["fastload dali"], rates[best], strict=True)]
    low, high = min(paired), max(paired)
    print(
        f"  fastload dali / {best}, per round: median {statistics.median(paired):.2f}, "
        f"range {low:.2f}-{high:.2f}"
    )
    for name in (*sorted(n for n in rates if n.startswith("hand")), "fastload dali"):
        print(f"  {name} rounds: {[round(r) for r in rates[name]]}")


if __name__ == "__main__":
    main()
