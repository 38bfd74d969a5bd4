"""torchvision's detection and segmentation reference input, unchanged: torch's DataLoader
against fastload's ``accelerate=True``.

The user's objects are the same in both, built as ``references/detection`` builds them with
``--use-v2`` (backend "pil"): ``wrap_dataset_for_transforms_v2(CocoDetection(...),
target_keys=...)``, the training set a ``Subset`` of the images with annotations, the preset's
v2 ops (hflip, multiscale, ssdlite or ssd, then ``ToImage``, ``ToDtype(float32, scale=True)``,
``ConvertBoundingBoxFormat(XYXY)``, ``SanitizeBoundingBoxes``, ``ToPureTensor``), and the
references' ``collate_fn`` (``tuple(zip(*batch))``). The segmentation pipeline is the
segmentation references' train preset (base 520, crop 480) on a v2-wrapped ``VOCSegmentation``
of the same pictures, with a mask PNG each, batched by torch's default collate; "segmentation,
COCO" reads the COCO set as that reference's ``train.py --use-v2`` does (its own ``Compose`` of
its ``CocoDetectionToVOCSegmentation`` and the preset with its ``PadIfSmaller``: stand-ins of
their shape written here, as those files are not importable). Both loaders
deliver the same float32 images and targets; the rounds alternate between them. A third row
runs the swap with ``worker_type="thread"`` (and ``seeding="sample"``, which threads need):
no image crosses a process boundary there.

The set is a COCO-like one made here (``fastload.synthetic.make_coco``: COCO's image sizes,
1-8 objects each, polygon masks), or ``--data FOLDER --annotations FILE`` for a real one; the
segmentation set is ``fastload.synthetic.make_voc``'s (the same pictures and polygons as the
COCO-like set, as class masks).

With ``--device cuda`` both deliver on the device: fastload with ``device="cuda"`` (its
prefetcher), stock torch with the references' loops' copies (each image and target tensor).
``--where SECONDS`` then samples each loader's process for that long, thread by thread
(``benchmarks/where_time_goes.py``, py-spy): where the main process's time goes when it is the
wall.

Run: python benchmarks/peers/detection_swap.py [--workers 2] [--batch-size 4] [--seconds 20]
[--device cuda] [--where 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torchvision
import torchvision.transforms.v2 as T
from torchvision import tv_tensors

import fastload
from fastload.autotune.rates import endless, read_rate
from fastload.synthetic import make_coco, make_voc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: results, the groups

import results
import where_time_goes

MULTISCALE = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
MEAN = (123.0, 117.0, 104.0)  # the detection presets' mean
PIPELINES = {  # name: (augmentation, masks); "segmentation": the segmentation preset
    "multiscale": ("multiscale", False),
    "multiscale, masks": ("multiscale", True),
    "hflip, masks": ("hflip", True),
    "ssdlite": ("ssdlite", False),
    "ssd, masks": ("ssd", True),
    "segmentation": ("segmentation", True),
    "segmentation, COCO": ("segmentation-coco", True),
}
BASE, CROP = 520, 480  # the segmentation references' training sizes
SWAPPED = "fastload, accelerate=True"
THREADS = "fastload, accelerate=True, worker_type='thread'"


class Preset:
    """The references' ``DetectionPresetTrain`` shape: ``__call__`` hands on to a Compose."""

    def __init__(self, augmentation: str) -> None:
        ops: list[Any] = []
        if augmentation == "multiscale":
            ops.append(T.RandomShortestSize(min_size=MULTISCALE, max_size=1333))
        elif augmentation == "ssdlite":
            ops.append(T.RandomIoUCrop())
        elif augmentation == "ssd":
            fill = defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})
            ops += [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=fill), T.RandomIoUCrop()]
        ops += [T.RandomHorizontalFlip(p=0.5), T.ToImage(), T.ToDtype(torch.float, scale=True)]
        ops += [T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY)]
        ops += [T.SanitizeBoundingBoxes(), T.ToPureTensor()]
        self.transforms = T.Compose(ops)

    def __call__(self, image: Any, target: Any) -> Any:
        return self.transforms(image, target)


def collate(batch: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*batch))  # noqa: B905 (the references' own)


def segmentation_preset() -> T.Compose:
    """``SegmentationPresetTrain(base_size=520, crop_size=480, backend="pil", use_v2=True)``'s
    ops, with torchvision's ``RandomCrop(pad_if_needed=True)`` and the same fills in place of
    the reference's own ``PadIfSmaller`` (which pads right and bottom only)."""
    fill = {tv_tensors.Mask: 255, "others": 0}
    dtypes = {torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None}
    return T.Compose(
        [
            T.RandomResize(min_size=BASE // 2, max_size=BASE * 2),
            T.RandomHorizontalFlip(0.5),
            T.RandomCrop(CROP, pad_if_needed=True, fill=fill),
            T.PILToTensor(),
            T.ToDtype(dtype=dtypes, scale=True),
            T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
            T.ToPureTensor(),
        ]
    )


VOC_FROM_COCO = [0, 5, 2, 16, 9, 44, 6, 3, 17, 62, 21, 67, 18, 19, 4, 1, 64, 20, 63, 7, 72]


class PadIfSmaller(T.Transform):
    """The references' ``PadIfSmaller`` in shape: right and bottom up to ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size, self.fill = size, {tv_tensors.Mask: 255, "others": 0}

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        height, width = T.query_size(flat_inputs)
        padding = [0, 0, max(self.size - width, 0), max(self.size - height, 0)]
        return {"padding": padding, "needs_padding": any(padding)}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if not params["needs_padding"]:
            return inpt
        fill = 255 if isinstance(inpt, tv_tensors.Mask) else 0
        return T.functional.pad(inpt, padding=params["padding"], fill=fill)


class CocoDetectionToVOCSegmentation(T.Transform):
    """The references' converter in shape: VOC's instances merged into one class mask."""

    def forward(self, image: Any, target: dict[str, Any]) -> tuple[Any, Any]:
        height, width = T.functional.get_size(image)
        merged = torch.zeros((height, width), dtype=torch.uint8)
        overlap = torch.zeros((height, width), dtype=torch.uint8)
        for mask, label in zip(target.get("masks", ()), target.get("labels", ()), strict=True):
            if int(label) in VOC_FROM_COCO:
                merged[mask.bool()] = VOC_FROM_COCO.index(int(label))
                overlap += mask
        merged[overlap > 1] = 255
        return image, tv_tensors.Mask(merged)


class Chain:
    """The segmentation references' own ``Compose`` in shape."""

    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, image, target):
        for t in self.transforms:
            image, target = t(image, target)
        return image, target


def segmentation_from_coco(folder: Path, annotations: Path) -> Any:
    """The segmentation reference's COCO training set: the converter then the preset (its own
    pad), the images whose VOC-class objects cover more than 1,000 pixels."""
    preset = segmentation_preset()
    preset.transforms[2:3] = [PadIfSmaller(CROP), T.RandomCrop(CROP)]
    chain = Chain([CocoDetectionToVOCSegmentation(), preset])
    coco = torchvision.datasets.CocoDetection(str(folder), str(annotations), transforms=chain)
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(coco, {"masks", "labels"})
    kept = []
    for i, image_id in enumerate(coco.ids):
        objects = coco.coco.loadAnns(coco.coco.getAnnIds(imgIds=image_id))
        if sum(o["area"] for o in objects if o["category_id"] in VOC_FROM_COCO) > 1000:
            kept.append(i)
    return torch.utils.data.Subset(wrapped, kept)


def dataset(folder: Path, annotations: Path, augmentation: str, masks: bool) -> Any:
    keys = ["boxes", "labels", "image_id"] + (["masks"] if masks else [])
    coco = torchvision.datasets.CocoDetection(
        str(folder), str(annotations), transforms=Preset(augmentation)
    )
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(coco, target_keys=keys)
    kept = [i for i, image_id in enumerate(coco.ids) if coco.coco.getAnnIds(imgIds=image_id)]
    return torch.utils.data.Subset(wrapped, kept)


def segmentation(root: Path) -> Any:
    voc = torchvision.datasets.VOCSegmentation(
        str(root), year="2012", transforms=segmentation_preset()
    )
    return torchvision.datasets.wrap_dataset_for_transforms_v2(voc)


def to_device(batches: Any, device: torch.device) -> Any:
    """The references' training loops' copies: each image and each target tensor, one by one
    (detection), or the two batch tensors (segmentation)."""
    for images, targets in batches:
        if isinstance(images, torch.Tensor):
            yield images.to(device), targets.to(device)
            continue
        moved = [
            {k: v.to(device) if torch.is_tensor(v) else v for k, v in t.items()} for t in targets
        ]
        yield [image.to(device) for image in images], moved


def measure(
    data: Any,
    *,
    workers: int,
    batch_size: int,
    seconds: float,
    rounds: int,
    batched: bool,
    device: torch.device,
    where: float = 0.0,
) -> tuple[dict[str, list[float]], dict[str, list[float]], str, dict[str, Any]]:
    """Images/s of the stock loader, the swapped one and the swapped one with its workers as
    threads (each sample drawn from its own streams), round after round, alternating (with a
    CUDA device: on the device, stock copied as the references' loops copy); with ``where``,
    then each one's threads sampled for that many seconds."""
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "shuffle": True,
        "num_workers": workers,
        "persistent_workers": workers > 0,
    }
    if not batched:  # the detection references' lists; segmentation crops batch as tensors
        common["collate_fn"] = collate
    stock = torch.utils.data.DataLoader(data, **common)
    cuda = device.type == "cuda"
    fast = fastload.DataLoader(data, accelerate=True, device=device if cuda else None, **common)
    threads = fastload.DataLoader(
        data,
        accelerate=True,
        device=device if cuda else None,
        worker_type="thread",
        seeding="sample",
        **common,
    )
    explained = fastload.explain(fast)
    streams = {"stock": endless(stock), "fastload": endless(fast), "threads": endless(threads)}
    if cuda:
        streams["stock"] = to_device(streams["stock"], device)
    sync = torch.cuda.synchronize if cuda else None
    for stream in streams.values():  # warm up: workers started, first batches out
        for _ in range(3 * max(workers, 1)):
            next(stream)
    rates: dict[str, list[float]] = {name: [] for name in streams}
    main_cpu: dict[str, list[float]] = {name: [] for name in streams}
    for _ in range(rounds):
        for name, stream in streams.items():
            # the main process's CPU time per image, all its threads (torch's pin-memory thread,
            # the receiving, the copies; the thread row's workers too): where it nears 1 / rate,
            # that process is the wall
            cpu = time.process_time()
            reading = read_rate(stream, seconds=seconds, sync=sync)
            main_cpu[name].append(1000 * (time.process_time() - cpu) / reading.samples)
            rates[name].append(reading.rate)
    busy = {name: where_time_goes.sample(s, where) for name, s in streams.items()} if where else {}
    return rates, main_cpu, explained, busy


def cpu_note(per_image: list[float]) -> str:
    return f"; main process {statistics.median(per_image):.2f} ms CPU an image"


def with_cpu(row: dict[str, Any], per_image: list[float]) -> dict[str, Any]:
    """A result row with the main process's CPU milliseconds an image (median of the rounds)."""
    return {**row, "main_cpu_ms_per_image": round(statistics.median(per_image), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="an image folder (with --annotations); default: made here")
    parser.add_argument("--annotations", help="its COCO annotation file")
    parser.add_argument("--images", type=int, default=200, help="images in the set made here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="per loader per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    parser.add_argument(
        "--where", type=float, default=0, metavar="SECONDS", help="sample each loader with py-spy"
    )
    results.add_argument(parser)
    args = parser.parse_args()
    if (args.data is None) != (args.annotations is None):
        parser.error("--data and --annotations go together")
    if args.where and where_time_goes.py_spy() is None:  # the rates are still worth the run
        print("--where needs py-spy (pip install py-spy): the breakdown is left out")
        args.where = 0
    with tempfile.TemporaryDirectory() as scratch:
        if args.data is None:
            folder, annotations = make_coco(Path(scratch) / "coco", images=args.images)
            where = f"a COCO-like set of {args.images} images made here"
        else:
            folder, annotations = Path(args.data), Path(args.annotations)
            where = str(folder)
        print(
            f"fastload {fastload.__version__}, torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}; {args.workers} workers, batch {args.batch_size}, "
            f"{args.rounds} interleaved rounds of {args.seconds:g} s, device {args.device}; "
            f"data: {where}"
        )
        figures = []
        for name in args.pipelines:
            augmentation, masks = PIPELINES[name]
            if augmentation == "segmentation":
                voc = Path(scratch) / "voc"
                if not voc.exists():  # the same pictures and polygons as the COCO set
                    make_voc(voc, images=args.images)
                data = segmentation(voc)
            elif augmentation == "segmentation-coco":
                data = segmentation_from_coco(folder, annotations)
            else:
                data = dataset(folder, annotations, augmentation, masks)
            rates, main_cpu, explained, busy = measure(
                data,
                workers=args.workers,
                batch_size=args.batch_size,
                seconds=args.seconds,
                rounds=args.rounds,
                batched=augmentation.startswith("segmentation"),
                device=torch.device(args.device),
                where=args.where,
            )
            stock = rates["stock"]
            print(f"\n{name}\n{explained}")
            print(f"  stock {statistics.median(stock):,.0f} images/s{cpu_note(main_cpu['stock'])}")
            figures.append(
                with_cpu(results.row("stock torchvision", stock, group=name), main_cpu["stock"])
            )
            keys = {"stock torchvision": "stock", SWAPPED: "fastload", THREADS: "threads"}
            for key, label in (("fastload", SWAPPED), ("threads", THREADS)):
                print(
                    f"  {label} {statistics.median(rates[key]):,.0f}: "
                    f"{results.spread(rates[key], stock)}{cpu_note(main_cpu[key])}"
                )
                # the targets: multiscale boxes and the segmentation preset
                aimed = name in ("multiscale", "ssd, masks", "segmentation") and key == "fastload"
                target = 1.5 if aimed else None
                row = results.row(label, rates[key], stock, group=name, target=target)
                figures.append(with_cpu(row, main_cpu[key]))
            for row in figures[-3:] if busy else ():
                shares = busy[keys[row["name"]]]
                where_time_goes.show(f"{name}, {row['name']}", shares)
                row["busy"] = where_time_goes.as_json(shares)
    results.write(
        args.json,
        benchmark="detection_swap",
        title=(
            f"torchvision's detection reference input, unchanged, with accelerate=True, "
            f"{args.workers} workers, batch {args.batch_size}, {args.device}"
        ),
        baseline="stock torchvision",
        rows=figures,
        settings={
            "device": args.device,
            "workers": args.workers,
            "batch_size": args.batch_size,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "data": where,
        },
    )


if __name__ == "__main__":
    main()
