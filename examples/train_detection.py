"""Train a torchvision detection or segmentation model with its references' input, the loader
swapped for fastload's.

Detection:     python examples/train_detection.py --data train2017 --annotations instances.json
Segmentation:  python examples/train_detection.py --task segmentation --data VOC_ROOT
A made-up set: python examples/train_detection.py --synthetic 64 [--task segmentation]

The input is built as torchvision's ``references/detection/train.py`` and
``references/segmentation/train.py`` build it with ``--use-v2`` (backend "pil"): a
``CocoDetection`` (or ``VOCSegmentation``) wrapped by ``wrap_dataset_for_transforms_v2``, the
detection training set a ``Subset`` of the images with annotations, the presets' v2 ops, a
random sampler in batches, and ``collate_fn=tuple(zip(*batch))`` for detection. The one line
that differs from the references is the loader: ``fastload.DataLoader(..., accelerate=True)``
(``--loader torch`` runs torch's, for comparison). The model is made without weights (nothing
is downloaded); the loop is the references' plain one (SGD, the losses summed), cut to
``--steps``. At the end: images/s and how much of the time the loop waited for data.
"""

from __future__ import annotations

import argparse
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
from fastload.synthetic import make_coco, make_voc

MULTISCALE = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
MEAN = (123.0, 117.0, 104.0)  # the detection presets' mean
AUGMENTATIONS = ("hflip", "multiscale", "ssd", "ssdlite")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="detection", choices=("detection", "segmentation"))
    parser.add_argument("--data", help="COCO: the image folder; VOC: the folder VOCdevkit is in")
    parser.add_argument("--annotations", help="COCO: the annotation file")
    parser.add_argument("--synthetic", type=int, help="make a set of this many images instead")
    parser.add_argument("--model", help="a torchvision.models name (default: by task)")
    parser.add_argument("--augmentation", default="multiscale", choices=AUGMENTATIONS)
    parser.add_argument("--loader", default="fastload", choices=("fastload", "torch"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.0025)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.synthetic is None and args.data is None:
        parser.error("give --data (and --annotations for COCO) or --synthetic N")
    if args.task == "detection" and args.synthetic is None and args.annotations is None:
        parser.error("detection reads a COCO set: --annotations goes with --data")
    return args


def detection_preset(augmentation: str) -> T.Compose:
    """``DetectionPresetTrain(data_augmentation=..., backend="pil", use_v2=True)``'s ops."""
    ops: list[Any] = []
    if augmentation == "multiscale":
        ops.append(T.RandomShortestSize(min_size=MULTISCALE, max_size=1333))
    elif augmentation == "ssd":
        fill = defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})
        ops += [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=fill), T.RandomIoUCrop()]
    elif augmentation == "ssdlite":
        ops.append(T.RandomIoUCrop())
    ops += [T.RandomHorizontalFlip(p=0.5), T.ToImage(), T.ToDtype(torch.float, scale=True)]
    ops += [T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY)]
    return T.Compose([*ops, T.SanitizeBoundingBoxes(), T.ToPureTensor()])


def segmentation_preset(base: int = 520, crop: int = 480) -> T.Compose:
    """``SegmentationPresetTrain(base_size=520, crop_size=480, backend="pil", use_v2=True)``'s
    ops, torchvision's ``RandomCrop(pad_if_needed=True)`` with the same fills standing for the
    reference's own ``PadIfSmaller``."""
    dtypes = {torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None}
    return T.Compose(
        [
            T.RandomResize(min_size=base // 2, max_size=base * 2),
            T.RandomHorizontalFlip(0.5),
            T.RandomCrop(crop, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}),
            T.PILToTensor(),
            T.ToDtype(dtype=dtypes, scale=True),
            T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
            T.ToPureTensor(),
        ]
    )


def dataset(args: argparse.Namespace, scratch: Path) -> Any:
    """The training set as the references' ``get_coco`` / ``get_dataset`` make it."""
    if args.task == "segmentation":
        root = args.data
        if args.synthetic is not None:
            root = make_voc(scratch / "voc", images=args.synthetic)
        voc = torchvision.datasets.VOCSegmentation(
            str(root), year="2012", image_set="train", transforms=segmentation_preset()
        )
        return torchvision.datasets.wrap_dataset_for_transforms_v2(voc)
    folder, annotations = args.data, args.annotations
    if args.synthetic is not None:
        folder, annotations = make_coco(scratch / "coco", images=args.synthetic)
    keys = ["boxes", "labels", "image_id"] + (["masks"] if "mask" in args.model else [])
    coco = torchvision.datasets.CocoDetection(
        str(folder), str(annotations), transforms=detection_preset(args.augmentation)
    )
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(coco, target_keys=keys)
    kept = [i for i, image_id in enumerate(coco.ids) if coco.coco.getAnnIds(imgIds=image_id)]
    return torch.utils.data.Subset(wrapped, kept)


def collate_fn(batch: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*batch, strict=True))


def model_for(args: argparse.Namespace) -> torch.nn.Module:
    if args.task == "segmentation":
        return torchvision.models.get_model(
            args.model, weights=None, weights_backbone=None, num_classes=21
        )
    extra = {"_skip_resize": True} if args.augmentation == "multiscale" else {}
    return torchvision.models.get_model(
        args.model, weights=None, weights_backbone=None, num_classes=91, **extra
    )


def step(model: torch.nn.Module, batch: Any, device: torch.device, task: str) -> torch.Tensor:
    """One batch's loss, as the references' training loops compute it."""
    images, targets = batch
    if task == "segmentation":
        out = model(images.to(device))
        masks = targets.to(device).squeeze(1)  # torchvision's VOC wrapper gives 1 x H x W
        return torch.nn.functional.cross_entropy(out["out"], masks, ignore_index=255)
    images = [image.to(device) for image in images]
    targets = [
        {key: v.to(device) if torch.is_tensor(v) else v for key, v in target.items()}
        for target in targets
    ]
    return sum(model(images, targets).values())


def main() -> None:
    args = parse()
    if args.model is None:
        args.model = (
            "lraspp_mobilenet_v3_large"
            if args.task == "segmentation"
            else "fasterrcnn_mobilenet_v3_large_320_fpn"
        )
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as scratch:
        train_set = dataset(args, Path(scratch))
        options: dict[str, Any] = {"batch_size": args.batch_size, "shuffle": True}
        options |= {"num_workers": args.workers, "drop_last": True}
        if args.task == "detection":
            options["collate_fn"] = collate_fn
        if args.loader == "fastload":  # the one line that differs from the references
            loader: Any = fastload.DataLoader(train_set, accelerate=True, **options)
            print(fastload.explain(loader))
        else:
            loader = torch.utils.data.DataLoader(train_set, **options)
        model = model_for(args).to(device).train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
        done, images, waited, began = 0, 0, 0.0, time.perf_counter()
        while done < args.steps:
            ready = time.perf_counter()
            for batch in loader:
                waited += time.perf_counter() - ready
                loss = step(model, batch, device, args.task)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                done, images = done + 1, images + len(batch[0])
                if done % 5 == 0 or done == args.steps:
                    print(f"step {done}/{args.steps}: loss {loss.item():.4f}")
                if done == args.steps:
                    break
                ready = time.perf_counter()
        seconds = time.perf_counter() - began
    print(
        f"{args.model} on {args.device}, {args.loader} loader: {done} steps, "
        f"{images / seconds:.2f} images/s, waiting for data {100 * waited / seconds:.0f} % "
        "of the time"
    )


if __name__ == "__main__":
    main()
