"""Train a torchvision ResNet on an ImageFolder with fastload, end to end.

One process:     python examples/train_imagenet.py --data /data/imagenet --epochs 90
Every GPU here:  torchrun --nproc_per_node 8 examples/train_imagenet.py --data /data/imagenet

``--data`` holds ``train/`` and ``val/`` class folders (or is itself one class-folder set, which
is then used for both). The pipeline: fastload.ImageFolder decodes and crops on the CPU (fused,
uint8), fastload.DataLoader delivers the batches to the GPU on a side stream, where the flip and
the normalize run per sample (fastload.gpu); the Trainer runs AMP (bf16 where supported, fp16
with loss scaling otherwise), fused AdamW with the linear LR-scaling rule, warm-up + cosine,
label smoothing and channels-last, and writes a checkpoint every epoch (rank 0): a rerun with
the same ``--checkpoint`` continues where it stopped, exactly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torchvision

import fastload
from fastload import gpu, train
from fastload import transforms as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="folder with train/ and val/ class folders")
    parser.add_argument("--arch", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=256, help="per process")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW LR at a global batch of 256")
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--warmup-epochs", type=float, default=2.0)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--workers", default="auto", help="loader workers, or 'auto' (measured)")
    parser.add_argument("--backend", default="auto", help="auto, turbojpeg, opencv, pillow, dali")
    parser.add_argument("--precision", default="auto", choices=train.PRECISIONS)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--checkpoint", default="checkpoint.pt", help="written every epoch")
    return parser.parse_args()


def main() -> None:
    args = parse()
    world = train.distributed.setup()
    root = Path(args.data)
    train_dir = root / "train" if (root / "train").is_dir() else root
    val_dir = root / "val" if (root / "val").is_dir() else root
    size = args.image_size
    decoder = "auto" if args.backend == "dali" else args.backend
    train_set = fastload.ImageFolder(
        train_dir, transform=T.RandomResizedCrop(size), backend=decoder
    )
    val_set = fastload.ImageFolder(
        val_dir,
        transform=T.Compose([T.Resize(round(size * 256 / 224)), T.CenterCrop(size)]),
        backend=decoder,
    )
    workers = args.workers if args.workers == "auto" else int(args.workers)
    common = dict(
        batch_size=args.batch_size,
        num_workers=workers,
        device=world.device,
        channels_last=True,
        backend="dali" if args.backend == "dali" else None,
    )
    train_loader = fastload.DataLoader(
        train_set,
        sampler=train.distributed.sampler(train_set),
        shuffle=None if world.size > 1 else True,
        drop_last=True,
        batch_transforms=gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize(MEAN, STD)]),
        **common,
    )
    val_loader = fastload.DataLoader(
        val_set,
        sampler=train.distributed.sampler(val_set, shuffle=False),
        batch_transforms=gpu.Normalize(MEAN, STD),
        **common,
    )
    model = torchvision.models.get_model(args.arch, num_classes=len(train_set.classes))
    model = train.distributed.wrap(model, world, channels_last=True)
    global_batch = args.batch_size * world.size * args.accumulate
    optimizer = train.adamw(
        model, train.scale_lr(args.lr, global_batch), weight_decay=args.weight_decay
    )
    # the Trainer also steps on a leftover group of micro-batches: count it, or the schedule
    # runs out before training does
    steps_per_epoch = train.steps_per_epoch(len(train_loader), args.accumulate)
    total = steps_per_epoch * args.epochs
    schedule = train.warmup_cosine(
        optimizer,
        warmup_steps=min(total - 1, round(args.warmup_epochs * steps_per_epoch)),
        total_steps=total,
    )
    trainer = train.Trainer(
        model,
        optimizer,
        scheduler=schedule,
        precision=args.precision,
        accumulate=args.accumulate,
        label_smoothing=args.label_smoothing,
        channels_last=True,
        compile=args.compile,
        progress=None if world.main else False,  # a bar on a terminal, from rank 0
    )
    if world.main:
        print(
            f"{args.arch}: {len(train_set)} training images, {len(train_set.classes)} classes; "
            f"{world.size} process(es) on {world.device}, precision {trainer.precision.name} "
            f"({trainer.precision.reason}), global batch {global_batch}, peak lr "
            f"{schedule.base_lrs[0]:.2e}"
        )
    trainer.fit(train_loader, epochs=args.epochs, val_loader=val_loader, checkpoint=args.checkpoint)
    metrics = trainer.evaluate(val_loader)
    if world.main:
        last = trainer.history[-1] if trainer.history else None
        speed = f"{last.images_per_sec * world.size:,.0f} images/s" if last else "resumed: done"
        print(
            f"done: val accuracy {metrics['accuracy']:.2%}, loss {metrics['loss']:.4f}; "
            f"last epoch {speed}"
        )
    train.distributed.cleanup()


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    main()
