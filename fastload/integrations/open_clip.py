"""OpenCLIP's own training entry point, with fastload reading and decoding its shards.

    python -m fastload.integrations.open_clip <OpenCLIP's arguments>

runs ``open_clip_train.main`` unchanged after one swap: its webdataset loader
(``--dataset-type webdataset``, or ``auto`` with ``.tar`` shards) becomes
:func:`get_wds_dataset`, which serves the same contract (a ``DataInfo`` whose ``dataloader``
has ``num_batches`` and ``num_samples``, and whose ``set_epoch`` moves the order) with:

- :class:`fastload.ImageShards` over ``--train-data`` (brace patterns, ``::`` between
  sources), image ``jpg;png;jpeg;webp`` and target ``txt``, as OpenCLIP renames them;
- OpenCLIP's preprocess as the dataset's transform, read by ``accelerate=True``: its
  ``RandomResizedCrop`` (bicubic) is fused with decoding; its ``MaybeConvertMode`` (RGB, what
  fastload decodes to) has nothing left to do; its ``MaybeToTensor`` and ``Normalize`` run on
  whole uint8 batches (``fastload.explain`` on the loader lists each op's place); its
  tokenizer as ``target_transform``; both in the workers (``--workers``);
- :class:`fastload.ShardSampler` with ``--seed``, split across ``--world-size`` ranks.

What differs from OpenCLIP's own loader, by design:

- every sample once per epoch, in whole global batches: an epoch is ``--train-num-samples``
  (or all the samples) rounded down to ``--batch-size x --world-size``, and never more than the
  shards hold, where webdataset repeats samples to fill its count; every rank gets the same
  number of batches;
- a sample without a caption or an image is skipped (OpenCLIP's
  ``filter_no_caption_or_no_image``) and reported once per epoch.

On CPU with several ranks, ``open_clip_train.main`` wraps the model in
``DistributedDataParallel(model, device_ids=[device])``, which torch refuses for a CPU module;
this entry point drops ``device_ids`` there (and only there), as torch asks.

``--dataset-type csv`` (or ``auto`` with a ``.csv``/``.tsv`` table), for training and
validation, reads the table with OpenCLIP's own ``CsvDataset`` (the same columns, separator
and paths) and serves its rows as a :class:`fastload.ImageList`, with OpenCLIP's sampler,
shuffling, ``drop_last`` and ``pin_memory``. ``--imagenet-val`` (a torchvision ``ImageFolder``
with the validation preprocess) gets ``fastload.DataLoader(accelerate=True)``, in OpenCLIP's
order. Webdataset validation data (``--val-data`` with ``.tar`` shards), ``--imagenet-train``
and ``--imagenet-v2`` keep OpenCLIP's own loaders.

``--fastload-save-steps N`` writes a checkpoint every ``N`` optimizer steps within an epoch,
and OpenCLIP's ``--resume`` of one continues with the rest of that epoch
(:mod:`fastload.integrations.open_clip_epochs`).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Sequence
from typing import Any

import torch

from fastload.datasets import ImageList
from fastload.integrations.open_clip_epochs import Batches, MidEpoch
from fastload.loader import DataLoader
from fastload.memory.compact import Strings
from fastload.shards.dataset import ImageShards
from fastload.shards.sampler import ShardSampler

__all__ = ["Batches", "get_csv_dataset", "get_imagenet", "get_wds_dataset", "install", "main"]

IMAGE = "jpg;png;jpeg;webp"  # OpenCLIP's rename(image=...)


def _first_row(tokenizer: Any, text: str) -> torch.Tensor:
    """OpenCLIP's ``lambda text: tokenizer(text)[0]``, picklable."""
    return tokenizer(text)[0]


def _urls(train_data: str) -> list[str]:
    from braceexpand import braceexpand

    return [url for source in train_data.split("::") for url in braceexpand(source)]


def get_wds_dataset(
    args: Any,
    preprocess_img: Any,
    is_train: bool,
    epoch: int = 0,
    floor: bool = False,
    tokenizer: Any = None,
) -> Any:
    """OpenCLIP's ``get_wds_dataset`` served by fastload (see the module's notes); the
    validation set keeps OpenCLIP's own loader."""
    if not is_train:
        from open_clip_train import data

        original = _ORIGINAL.get("get_wds_dataset", data.get_wds_dataset)
        return original(args, preprocess_img, is_train, epoch, floor, tokenizer)
    dataset = ImageShards(
        _urls(args.train_data),
        preprocess_img,
        functools.partial(_first_row, tokenizer),
        image=IMAGE,
        target="txt",
        on_error="skip",
    )
    sampler = ShardSampler(
        dataset, seed=args.seed, num_replicas=args.world_size, rank=args.rank, drop_last=True
    )
    sampler.set_epoch(epoch)
    loader: DataLoader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
        accelerate=True,  # the preprocess's leading geometry fused with decoding (see explain)
    )
    available = len(sampler) // args.batch_size
    wanted = args.train_num_samples or len(dataset)
    num_batches = min(available, math.floor(wanted / (args.batch_size * args.world_size)))
    if num_batches < 1:
        raise ValueError(
            f"{len(dataset)} samples in the shards make no whole global batch of "
            f"{args.batch_size} x {args.world_size} ranks"
        )
    step = args.batch_size * args.world_size
    batches = Batches(loader, num_batches, num_batches * step, global_batch=step)
    return _data_info()(dataloader=batches, sampler=sampler)


class _Caption:
    """A row's caption, tokenized as OpenCLIP's ``CsvDataset`` does (``ImageList``'s target is
    the row's number; this is its ``target_transform``)."""

    def __init__(self, captions: list[Any], tokenizer: Any) -> None:
        self.captions, self.tokenizer = Strings([str(c) for c in captions]), tokenizer

    def __call__(self, row: int) -> Any:
        return self.tokenizer([self.captions[row]])[0]


def get_csv_dataset(
    args: Any, preprocess_fn: Any, is_train: bool, epoch: int = 0, tokenizer: Any = None
) -> Any:
    """OpenCLIP's ``get_csv_dataset`` served by fastload: OpenCLIP's ``CsvDataset`` reads the
    table; its rows become a ``fastload.ImageList`` read by ``fastload.DataLoader``."""
    from open_clip_train.data import CsvDataset, DataInfo

    table = CsvDataset(
        args.train_data if is_train else args.val_data,
        None,
        img_key=args.csv_img_key,
        caption_key=args.csv_caption_key,
        sep=args.csv_separator,
    )
    rows = range(len(table.images))
    dataset = ImageList(table.images, rows, preprocess_fn, _Caption(table.captions, tokenizer))
    sampler: Any = None
    if args.distributed and is_train:
        sampler = torch.utils.data.DistributedSampler(dataset)
    loader: Any = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=is_train and sampler is None,
        num_workers=args.workers,
        pin_memory=True,
        sampler=sampler,
        drop_last=is_train,
        accelerate=True,
    )
    if not is_train:
        loader.num_samples, loader.num_batches = len(dataset), len(loader)
        return DataInfo(loader, sampler)
    step = args.batch_size * (args.world_size if args.distributed else 1)
    return DataInfo(Batches(loader, len(loader), len(dataset), global_batch=step), sampler)


def get_imagenet(args: Any, preprocess_fns: Any, split: str) -> Any:
    """OpenCLIP's ``get_imagenet``: ``"val"`` (its torchvision ``ImageFolder``) is read by
    ``fastload.DataLoader(accelerate=True)``; the other splits keep OpenCLIP's loader."""
    from open_clip_train import data

    if split != "val":
        return _ORIGINAL.get("get_imagenet", data.get_imagenet)(args, preprocess_fns, split)
    import torchvision

    dataset = torchvision.datasets.ImageFolder(args.imagenet_val, transform=preprocess_fns[1])
    loader: DataLoader = DataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.workers, accelerate=True
    )
    return data.DataInfo(dataloader=loader, sampler=None)


def _data_info() -> type:
    """OpenCLIP's ``DataInfo``, extended (made on first use: OpenCLIP is optional)."""
    from open_clip_train.data import DataInfo

    class ShardDataInfo(DataInfo):
        """OpenCLIP's ``DataInfo`` whose ``set_epoch`` reaches the ``ShardSampler``."""

        def set_epoch(self, epoch: int) -> None:
            self.sampler.set_epoch(epoch)

    return ShardDataInfo


_ORIGINAL: dict[str, Any] = {}


def install() -> None:
    """Point ``open_clip_train.data``'s loaders at :func:`get_wds_dataset`,
    :func:`get_csv_dataset` and :func:`get_imagenet` (its ``get_data`` looks them up when it
    runs)."""
    from open_clip_train import data

    for name, ours in (
        ("get_wds_dataset", get_wds_dataset),
        ("get_csv_dataset", get_csv_dataset),
        ("get_imagenet", get_imagenet),
    ):
        _ORIGINAL.setdefault(name, getattr(data, name))
        setattr(data, name, ours)


def _cpu_ddp() -> None:
    """Let ``DistributedDataParallel(cpu_model, device_ids=[cpu])`` through, as torch wants it
    (without ``device_ids``)."""
    original = torch.nn.parallel.DistributedDataParallel

    class DistributedDataParallel(original):  # type: ignore[misc, valid-type]
        def __init__(self, module: Any, *args: Any, device_ids: Any = None, **kwargs: Any) -> None:
            on_cpu = all(p.device.type == "cpu" for p in module.parameters())
            super().__init__(module, *args, device_ids=None if on_cpu else device_ids, **kwargs)

    torch.nn.parallel.DistributedDataParallel = DistributedDataParallel  # type: ignore[misc]


def main(argv: Sequence[str] | None = None) -> None:
    """Run OpenCLIP's ``main`` with fastload's loader (see the module's notes).

    Args:
        argv: OpenCLIP's arguments, and fastload's ``--fastload-save-steps N`` (a checkpoint
            every ``N`` optimizer steps within an epoch; see
            :mod:`fastload.integrations.open_clip_epochs`). Default: the command line's.
    """
    try:
        from open_clip_train import main as open_clip_main
    except ImportError as exc:
        raise SystemExit(
            f"fastload.integrations.open_clip runs OpenCLIP's trainer, which is not installed "
            f"({exc}): pip install open_clip_torch pandas"
        ) from None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _options()
    if {"-h", "--help"} & set(argv):
        parser.print_help()  # fastload's options, then OpenCLIP's help
        print()
    ours, rest = parser.parse_known_args(argv)
    install()
    _cpu_ddp()
    mid_epoch = MidEpoch(ours.fastload_save_steps)
    for name in ("pt_load", "train_one_epoch"):
        wrap = getattr(mid_epoch, name)
        original = _ORIGINAL.setdefault(f"main.{name}", getattr(open_clip_main, name))
        setattr(open_clip_main, name, wrap(original))
    open_clip_main.main(rest)
    _leave_process_group()


def _steps(text: str) -> int:
    """A whole number of steps of at least 1, for argparse."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps of at least 1")
    return int(text)


def _options() -> argparse.ArgumentParser:
    """fastload's own options; the rest of the command line is OpenCLIP's."""
    parser = argparse.ArgumentParser(
        prog="python -m fastload.integrations.open_clip",
        description="OpenCLIP's training with fastload's loader; every other option is OpenCLIP's",
        add_help=False,
    )
    parser.add_argument(
        "--fastload-save-steps",
        type=_steps,
        metavar="N",
        help="write a checkpoint every N optimizer steps within an epoch; OpenCLIP's --resume "
        "of it continues with the rest of that epoch",
    )
    return parser


def _leave_process_group() -> None:
    """Leave the process group OpenCLIP's ``main`` joined and left open: a rank that exits with
    one still open can abort in the interpreter's teardown (pytorch/pytorch#190489)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
