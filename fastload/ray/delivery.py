"""The training side: a Ray Dataset of a loader's epoch read back into the loader's batches."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from fastload.datasets.skipping import Collated, Skipped, SkipReport
from fastload.devices import resolve_device
from fastload.errors import ImageDecodeError
from fastload.gpu.prefetch import CUDAPrefetcher
from fastload.gpu.stage import BatchStage, DeviceStage, Tagged
from fastload.loader.plan import WorkerPlan
from fastload.memory import buffers
from fastload.ray.reading import check_plan, epoch_of, import_ray, task_stage
from fastload.ray.watch import Watch

__all__ = ["batches", "regroup", "unwrapped"]


def batches(source: Any, loader: Any, *, device: Any = None) -> Iterator[Any]:
    """The batches of ``source`` (what :func:`fastload.ray.epoch_dataset` made from
    ``loader``, or a training worker's share of it), as ``loader`` would deliver them.

    Each batch is ``images`` (or ``(images, labels)``), with the loader's batch ops (its
    ``batch_transforms`` and what ``accelerate`` moved to batches) applied under the batch's
    own seed where the loader applies them: for a loader on the CPU, in the Ray tasks (as its
    workers do); for one on a CUDA device, there, after a ``non_blocking`` copy from pinned
    memory on the prefetcher's side stream (Ray then carries uint8). Each batch handed
    out counts for ``loader.state_dict()`` when ``source`` is an epoch made in this process,
    so that a loader made the same way resumes the rest of the epoch with
    ``load_state_dict`` and :func:`fastload.ray.epoch_dataset`. While such an epoch waits
    because no live node offers what its decoding tasks ask for (the nodes that did were
    lost), a :class:`~fastload.ray.watch.StarvedEpochWarning` says so.

    Args:
        source: A Ray ``Dataset`` or ``DataIterator`` (``ray.train.get_dataset_shard``).
        loader: The loader the dataset was made from (or one made the same way).
        device: Where batches are delivered: a CUDA device, or ``"cpu"``. Default: the
            loader's ``device``.
    """
    plan = check_plan(loader)
    ours = epoch_of(source)
    epoch, watch = None, None
    if ours is not None:
        epoch, watch = ours[0], Watch(ours[1], import_ray().nodes)
    try:
        on_drop = epoch.dropped if epoch is not None else None
        for batch in _delivered(source, plan, device, on_drop=on_drop):
            if watch is not None:
                watch.progressed()
            if epoch is not None:
                epoch.delivered()
            yield batch
    except Exception as exc:
        original = unwrapped(exc)
        if original is None:
            raise
        raise original from exc  # the loader's own error (naming the file), not Ray's wrapper
    finally:
        if watch is not None:
            watch.stop()
    if epoch is not None:
        epoch.finished()


def unwrapped(exc: BaseException) -> ImageDecodeError | None:
    """The unreadable image behind an error a Ray task raised, if that is what it was."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ImageDecodeError):
            return current
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # a RayTaskError's own exception
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return None


def _delivered(
    source: Any, plan: WorkerPlan, device: Any, *, on_drop: Callable[[int], None] | None
) -> Iterator[Any]:
    has_ops = plan.batch_ops is not None or plan.channels_last
    stage = BatchStage(plan.batch_ops, channels_last=plan.channels_last) if has_ops else None
    # the images copied out of Ray's read-only object store into memory the consumer let go of
    # (a batch made anew faults in every page of it); more batches held are made anew
    grouped = regroup(
        source.iter_batches(batch_size=None, batch_format="numpy"), ring=buffers.BatchRing(3)
    )
    if task_stage(plan) is not None:  # the tasks ran the batch ops, as the loader's workers do
        stage = None
        if plan.channels_last:
            grouped = ((_channels_last(b), seed, dropped) for b, seed, dropped in grouped)
    tagged: Iterator[Tagged]
    if plan.skipping:  # what was dropped is recorded and reported as the loader does
        collated = (
            Collated(None if batch is None else Tagged(batch, seed), dropped)
            for batch, seed, dropped in grouped
        )
        tagged = SkipReport(collated, plan.dataset, on_drop=on_drop)
    else:
        tagged = (Tagged(batch, seed) for batch, seed, _ in grouped)
    where = plan.device if device is None else resolve_device(device)
    if where is None or where.type != "cuda":
        for item in tagged:
            yield item.batch if stage is None else stage(item.batch, seed=item.seed)
        return
    on_device = DeviceStage(stage) if stage is not None else None
    pinned = (item.pin_memory() for item in tagged)
    untagged = on_device.untag(pinned) if on_device is not None else (i.batch for i in pinned)
    yield from CUDAPrefetcher(untagged, device=where, transform=on_device)


def regroup(
    blocks: Iterator[dict[str, np.ndarray]], *, ring: buffers.BatchRing | None = None
) -> Iterator[tuple[Any, int, list[Skipped]]]:
    """The loader's batches, with their seeds and what ``on_error="skip"`` dropped from them,
    from blocks of rows in the epoch's order (each batch's rows together, whatever the
    blocks' sizes). A batch whose every sample was dropped comes as ``None``. The images are
    copied into ``ring``'s memory where one is given, else into new memory."""
    pending: list[dict[str, np.ndarray]] = []
    for block in blocks:
        numbers = block["batch"]
        cuts = [0, *(np.flatnonzero(numbers[1:] != numbers[:-1]) + 1).tolist(), len(numbers)]
        for start, stop in pairwise(cuts):
            if start == stop:
                continue
            piece = {name: values[start:stop] for name, values in block.items()}  # views
            if pending and pending[0]["batch"][0] != piece["batch"][0]:
                yield _batch(pending, ring)
                pending = []
            pending.append(piece)
    if pending:
        yield _batch(pending, ring)


def _batch(
    pieces: list[dict[str, np.ndarray]], ring: buffers.BatchRing | None
) -> tuple[Any, int, list[Skipped]]:
    """One batch's rows as the loader's batch (tensors it owns), its seed and the samples
    dropped from it."""
    seed = int(pieces[0]["batch_seed"][0])
    dropped = [
        Skipped(path, reason)
        for piece in pieces
        for report in piece.get("skipped", ())
        if report
        for path, reason in json.loads(report)
    ]
    # the rows of samples that were read, where some were not (a mask copies every column)
    if "kept" in pieces[0] and not all(piece["kept"].all() for piece in pieces):
        pieces = [
            {name: values[piece["kept"]] for name, values in piece.items()} for piece in pieces
        ]
        if not any(len(piece["batch"]) for piece in pieces):
            return None, seed, dropped

    def tensor(name: str) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([piece[name] for piece in pieces]))

    images = (
        tensor("image") if ring is None else _copied([piece["image"] for piece in pieces], ring)
    )
    if "label" in pieces[0]:
        return [images, tensor("label")], seed, dropped
    return images, seed, dropped


def _copied(arrays: list[np.ndarray], ring: buffers.BatchRing) -> torch.Tensor:
    """``arrays`` joined along their first axis into a tensor of ``ring``'s."""
    dtype = torch.from_numpy(np.empty(0, arrays[0].dtype)).dtype
    out = ring.take((sum(len(a) for a in arrays), *arrays[0].shape[1:]), dtype)
    np.concatenate(arrays, out=out.numpy())
    return out


def _channels_last(batch: Any) -> Any:
    """A batch whose images came as N x H x W x C arrays, as channels-last N x C x H x W
    tensors (a view)."""
    if batch is None:
        return None
    if isinstance(batch, list):
        return [batch[0].permute(0, 3, 1, 2), *batch[1:]]
    return batch.permute(0, 3, 1, 2)
