"""``fastload doctor``: measure a model's training step on your images, and what to change."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fastload.commands.arguments import (
    CLIError,
    add_data,
    data_argument,
    data_folder,
    image_dataset,
    positive_int,
    workers,
)

__all__ = ["HELP", "add", "run"]

HELP = "measure a torchvision model's training step on your images: what to change"


def add(sub: Any) -> None:
    from fastload.backends import choices

    doc = sub.add_parser(
        "doctor",
        help=HELP,
        description="Train a torchvision model (random weights, SGD) for a few steps on the "
        "folder through fastload.DataLoader, split each step into waiting for data, the copy "
        "and compute, try the cheap changes, and list the findings ranked by the gain.",
    )
    add_data(doc)
    doc.add_argument("--model", default="resnet50", help="a torchvision model (default: resnet50)")
    doc.add_argument(
        "--backend", choices=choices(), default="auto", help="decoding backend (default: auto)"
    )
    doc.add_argument(
        "--batch-size", type=positive_int, default=64, help="images per batch (default: 64)"
    )
    doc.add_argument(
        "--num-workers",
        type=workers,
        default=2,
        metavar="N|auto",
        help="loader worker processes, or auto to tune them (default: 2)",
    )
    doc.add_argument("--image-size", type=positive_int, default=224, help="(default: 224)")
    doc.add_argument(
        "--device", default=None, help="where to train (default: cuda if there is one, else cpu)"
    )
    doc.add_argument("--steps", type=positive_int, default=20, help="steps measured (default: 20)")
    doc.add_argument("--bf16", action="store_true", help="run the step under bf16 autocast")
    doc.add_argument("--channels-last", action="store_true", help="channels_last model and batches")
    doc.add_argument("--json", action="store_true", help="print one JSON object")
    doc.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch
    import torchvision

    from fastload import gpu
    from fastload.devices import resolve_device
    from fastload.diagnosis import doctor
    from fastload.loader import DataLoader
    from fastload.transforms import RandomResizedCrop

    try:
        build = torchvision.models.get_model_builder(args.model)
    except ValueError:
        names = ", ".join(torchvision.models.list_models(torchvision.models)[:12])
        raise CLIError(
            f"--model {args.model!r} is not a torchvision model (e.g. {names}, ...)"
        ) from None
    try:
        wanted = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        device = resolve_device(wanted) or torch.device("cpu")
    except (ValueError, RuntimeError) as exc:
        raise CLIError(str(exc).splitlines()[0]) from None
    data = data_folder(data_argument(args), "making the default image set")
    dataset = image_dataset(
        data, RandomResizedCrop(args.image_size), backend=args.backend, command="doctor"
    )
    # shards without class names: as many classes as the labels reach
    classes = len(dataset.classes) or int(dataset.labels.max()) + 1
    model = build(weights=None, num_classes=classes).to(device)
    if device.type == "cuda" and args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    loader: DataLoader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.num_workers,
        device=device,
        batch_transforms=gpu.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        channels_last=args.channels_last,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    autocast = torch.bfloat16 if args.bf16 else None
    report = doctor(model, loader, optimizer, steps=args.steps, autocast=autocast)
    if args.json:
        print(json.dumps({**report.to_dict(), "model": args.model, "data": data}, indent=2))
        return 0
    print(f"{args.model} on {data}: {dataset.backend} backend, num_workers={loader.num_workers}")
    print(report)
    return 0
