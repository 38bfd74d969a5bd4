"""A training script that builds its input as timm's ``train.py`` does (the test's own: timm's
script is not in timm's package), for ``python -m fastload.integrations.timm`` to run unchanged.

It calls ``timm.data.create_dataset`` / ``resolve_data_config`` / ``create_loader`` with the
arguments train.py passes (``fast_collate`` or a ``FastCollateMixup`` with the prefetcher,
``Mixup`` in the loop without it), then trains a timm model on the CPU, printing one line a step.
"""

from __future__ import annotations

import argparse
import math

import timm
import torch
from timm.data import (
    FastCollateMixup,
    Mixup,
    create_dataset,
    create_loader,
    resolve_data_config,
)
from timm.loss import SoftTargetCrossEntropy

import fastload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--no-prefetcher", action="store_true")
    parser.add_argument("--multi-epochs-loader", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = timm.create_model("resnet10t", num_classes=2, pretrained=False)
    config = resolve_data_config({"input_size": (3, 64, 64)}, model=model)
    dataset = create_dataset("", root=args.data_dir, split="train", is_training=True)
    mixup_args = {"mixup_alpha": 0.2, "cutmix_alpha": 1.0, "num_classes": 2}
    collate_fn, mixup_fn = None, None
    if args.no_prefetcher:
        mixup_fn = Mixup(**mixup_args)
    else:
        collate_fn = FastCollateMixup(**mixup_args)
    loader = create_loader(
        dataset,
        input_size=config["input_size"],
        batch_size=8,
        is_training=True,
        re_prob=0.25,
        auto_augment="rand-m7-mstd0.5",
        interpolation="random",
        mean=config["mean"],
        std=config["std"],
        num_workers=args.workers,
        collate_fn=collate_fn,
        device=torch.device("cpu"),
        use_prefetcher=not args.no_prefetcher,
        use_multi_epochs_loader=args.multi_epochs_loader,
    )
    inner = getattr(loader, "loader", loader)  # timm's PrefetchLoader wraps the DataLoader
    print(f"loader: {type(inner).__module__}.{type(inner).__name__}")
    if isinstance(inner, fastload.DataLoader):
        print(fastload.explain(inner))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = SoftTargetCrossEntropy()
    for epoch in range(args.epochs):
        steps = 0
        for images, targets in loader:
            if mixup_fn is not None:
                images, targets = mixup_fn(images, targets)
            loss = criterion(model(images), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            assert math.isfinite(loss.item())
            print(
                f"epoch {epoch} step {steps} {tuple(images.shape)} {images.dtype} loss {loss:.4f}"
            )
            steps += 1
        print(f"epoch {epoch} done: {steps} steps")


if __name__ == "__main__":
    main()
