"""Hugging Face Accelerate: prepare fastload loaders so that they stay fastload's.

``accelerator.prepare(loader)`` builds torch's own ``DataLoader`` from ``loader.dataset``,
``loader.batch_sampler`` and torch's named arguments. For a ``fastload.DataLoader`` that drops
the batch executor, the batch ops, the translated pipeline, per-sample seeding and the
loader's ``state_dict`` (the dataset you gave is read as you gave it). fastload warns when
that happens (Accelerate asks every loader it prepares whether it is prepared already).

:func:`prepare` does Accelerate's work the fastload way instead:

* **the shard**: with several processes, a loader that samples with what ``shuffle=`` makes
  reads a ``DistributedSampler`` shard of its own that moves to the next epoch at each pass,
  as Accelerate's loaders do; a sampler that shards itself (``DistributedSampler``) is kept;
* **the order**: with Accelerate's ``use_seedable_sampler`` (transformers' ``Trainer`` turns it
  on), a loader that shuffles with what ``shuffle=True`` makes draws its order from
  Accelerate's ``SeedableRandomSampler`` (seeded by ``data_seed`` or torch's initial seed, plus
  the epoch), as Accelerate's own loaders do: the same order as theirs;
* **the device**: with Accelerate's device placement, a loader with no ``device`` delivers its
  batches on ``accelerator.device`` (through fastload's CUDA prefetcher);
* **the state**: the loader is registered with ``accelerator.register_for_checkpointing``, so
  ``accelerator.save_state`` / ``load_state`` resume it mid-epoch exactly (do not also call
  ``skip_first_batches``).

One difference remains: Accelerate's gradient accumulation syncs at the end of its own
loaders' epochs (``GradientState.end_of_dataloader``); with a fastload loader, steps are
counted across epochs.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch.utils.data
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

from fastload import compat
from fastload.loader import DataLoader
from fastload.options import NAMES

__all__ = ["EpochShard", "prepare", "skip_first_batches"]

_TORCH_PARAMETERS = [
    name
    for name in inspect.signature(torch.utils.data.dataloader.DataLoader.__init__).parameters
    if name not in ("self", "shuffle")
]


_PREPARED: weakref.WeakSet[DataLoader] = weakref.WeakSet()  # loaders prepare() made


class EpochShard(DistributedSampler):
    """A ``DistributedSampler`` that moves to the next epoch after each pass.

    Accelerate's prepared loaders set their sampler's epoch at each pass; a loop written for
    them never calls ``set_epoch``. ``set_epoch`` still sets it.
    """

    def __iter__(self) -> Any:
        indices = super().__iter__()  # drawn now, from this epoch
        self.epoch += 1
        return indices


def prepare(
    accelerator: Any,
    *objects: Any,
    device_placement: bool | None = None,
    checkpoint: bool = True,
) -> Any:
    """``accelerator.prepare(*objects)``, with each ``fastload.DataLoader`` prepared fastload's
    way (see the module's notes); everything else goes to ``accelerator.prepare`` as it is.

    Args:
        accelerator: An ``accelerate.Accelerator``.
        *objects: What you would pass to ``accelerator.prepare``, in any order.
        device_placement: Put batches on ``accelerator.device`` (default: the accelerator's
            own ``device_placement``).
        checkpoint: Register each fastload loader for ``accelerator.save_state``. The
            accelerator then holds it for good: leave it ``False`` for loaders made again and
            again (an evaluation's) that ``save_state`` need not resume.

    Returns:
        The prepared objects in the order given (one object alone when one was given).

    Raises:
        ValueError: A fastload loader with a sampler of its own that does not shard, under
            several processes: fastload cannot shard it without changing what it draws.
    """
    results = list(objects)
    others = [i for i, obj in enumerate(objects) if not isinstance(obj, DataLoader)]
    if others:
        prepared = accelerator.prepare(*(objects[i] for i in others))
        if len(others) == 1:
            prepared = (prepared,)
        for i, obj in zip(others, prepared, strict=True):
            results[i] = obj
    place = accelerator.device_placement if device_placement is None else device_placement
    for i, obj in enumerate(objects):
        if isinstance(obj, DataLoader):
            results[i] = _prepared(accelerator, obj, place=place, checkpoint=checkpoint)
    return results[0] if len(results) == 1 else tuple(results)


def skip_first_batches(loader: Any, num_batches: int = 0) -> Any:
    """Accelerate's ``skip_first_batches``, with a fastload loader kept fastload's: a loader of
    the same options whose batch sampler passes over the first ``num_batches`` batches of this
    one's without reading them (as Accelerate's does). Any other loader goes to Accelerate's.

    Raises:
        ValueError: A fastload loader with no batch sampler (``batch_size=None``, or an
            ``IterableDataset``): it has no batches to pass over unread.
    """
    from accelerate.data_loader import SkipBatchSampler

    if not isinstance(loader, DataLoader):
        from accelerate import skip_first_batches as accelerates

        return accelerates(loader, num_batches)
    if loader.batch_sampler is None or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        raise ValueError(
            "skip_first_batches passes over a batch sampler's first batches; this "
            f"fastload loader has none ({type(loader.dataset).__name__}, batch_size="
            f"{loader.batch_size}): resume it with its state_dict instead"
        )
    arguments = {name: getattr(loader, name) for name in _TORCH_PARAMETERS}
    arguments.update(
        batch_size=1,
        drop_last=False,
        sampler=None,
        batch_sampler=SkipBatchSampler(loader.batch_sampler, skip_batches=num_batches),
    )
    return _marked(type(loader)(**arguments, **_options(loader)))


def _prepared(accelerator: Any, loader: DataLoader, *, place: bool, checkpoint: bool) -> DataLoader:
    if loader in _PREPARED:
        return loader
    arguments = {name: getattr(loader, name) for name in _TORCH_PARAMETERS}
    options = _options(loader)
    if _made_by_torch(loader):
        arguments["batch_sampler"] = None  # made again from the sampler and batch_size
    elif loader.batch_sampler is not None:
        arguments.update(batch_size=1, drop_last=False, sampler=None)
    if accelerator.num_processes > 1:
        arguments["sampler"] = _shard(loader, accelerator)
    elif _seedable(accelerator, loader):
        arguments["sampler"] = _seedable_sampler(loader.sampler, accelerator)
    if place and options["device"] is None and accelerator.device.type == "cuda":
        options["device"] = accelerator.device
    new = type(loader)(**arguments, **options)
    if checkpoint:
        accelerator.register_for_checkpointing(new)
    return _marked(new)


def _seedable(accelerator: Any, loader: DataLoader) -> bool:
    """Whether Accelerate would draw this loader's order from its ``SeedableRandomSampler``."""
    asked = getattr(accelerator, "use_seedable_sampler", False)
    return bool(asked) and type(loader.sampler) is RandomSampler and _made_by_torch(loader)


def _seedable_sampler(sampler: Any, accelerator: Any) -> Any:
    """The ``SeedableRandomSampler`` Accelerate's ``prepare_data_loader`` puts in place of
    ``sampler``: its seed the accelerator's ``data_seed``, or torch's initial seed."""
    from accelerate.data_loader import SeedableRandomSampler

    return SeedableRandomSampler(
        data_source=sampler.data_source,
        replacement=sampler.replacement,
        num_samples=sampler.num_samples,
        generator=sampler.generator,
        data_seed=accelerator.dataloader_config.data_seed,
    )


def _options(loader: DataLoader) -> dict[str, Any]:
    return {name: getattr(loader, name) for name in NAMES}


def _marked(loader: DataLoader) -> DataLoader:
    """``loader``, marked as prepared, so that ``accelerator.prepare()`` leaves it."""
    _PREPARED.add(loader)
    setattr(loader, compat.ACCELERATE_PREPARED, True)
    return loader


def _made_by_torch(loader: DataLoader) -> bool:
    """Whether the batch sampler is the one torch's loader made from ``batch_size``."""
    batches = loader.batch_sampler
    return type(batches) is BatchSampler and batches.sampler is loader.sampler


def _shard(loader: DataLoader, accelerator: Any) -> Any:
    sampler = loader.sampler
    if isinstance(sampler, DistributedSampler):
        return sampler  # it shards itself
    plain = type(sampler) in (SequentialSampler, RandomSampler) and _made_by_torch(loader)
    if not plain or getattr(sampler, "data_source", None) is not loader.dataset:
        raise ValueError(
            f"fastload's prepare shards the samplers shuffle= makes; this loader samples with "
            f"{type(sampler).__name__} / {type(loader.batch_sampler).__name__}: give it a "
            "sampler that reads this rank's part (a DistributedSampler)"
        )
    generator = loader.generator
    return EpochShard(
        loader.dataset,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
        shuffle=type(sampler) is RandomSampler,
        seed=generator.initial_seed() if generator is not None else 0,
    )
