"""The Ray side: a loader's epoch as a Ray Dataset whose tasks read and decode its batches."""

from __future__ import annotations

import importlib
import json
import weakref
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from fastload.datasets.skipping import Skipped
from fastload.gpu.stage import BatchStage
from fastload.loader.delivery import EpochKeys
from fastload.loader.plan import WorkerPlan
from fastload.memory import buffers
from fastload.memory.stacked import Normalizing, StackedSamples
from fastload.ray.watch import needs
from fastload.sampling import KeyedBatch, SampleKey

__all__ = ["INSTALL", "epoch_dataset", "epoch_of", "import_ray", "read_batches", "task_stage"]

INSTALL = 'pip install "fastload[ray]"'
_DATASETS: dict[str, Any] = {}  # in each Ray worker process: the dataset, fetched once
_KEPT = 4  # datasets kept in a worker (a training and a validation epoch at once, and the next)
# in each Ray worker process: the batch memory its tasks decode into, taken again once Ray has
# copied a task's block into its object store and nothing refers to it (a batch made anew
# faulted in every page of it, a third of a task's time for a float32 batch)
_RING = buffers.BatchRing(2)
# in the process that made them: each epoch's Ray Dataset, its keys that count deliveries and
# what its decoding tasks ask a node for
_EPOCHS: weakref.WeakKeyDictionary[Any, tuple[EpochKeys, dict[str, float]]] = (
    weakref.WeakKeyDictionary()
)


def import_ray() -> Any:
    """``ray`` with Ray Data, or an ImportError that says how to install it."""
    try:
        importlib.import_module("ray.data")
        return importlib.import_module("ray")
    except ImportError as exc:
        message = f"fastload.ray needs Ray Data ({exc}); install it with: {INSTALL}"
        raise ImportError(message) from exc


def epoch_dataset(loader: Any, *, ray_remote_args: dict[str, Any] | None = None) -> Any:
    """The loader's next epoch as a Ray Dataset: one row a sample, in the loader's order,
    read and decoded in Ray tasks, one task and one output block a batch.

    The epoch is drawn as a pass over the loader draws it
    (:meth:`fastload.DataLoader.next_epoch_keys`): the same order and the same per-sample
    draws as the loader's own workers; after ``loader.load_state_dict``, the rest of the epoch
    the state names. Reading it with :func:`fastload.ray.batches` in this process counts what
    is delivered, so that ``loader.state_dict()`` says where the epoch stands.

    The columns: ``image`` (C x H x W; uint8, or what the batch ops make), ``label`` (int64,
    when the samples have one), ``batch`` (the batch's number in the epoch) and
    ``batch_seed`` (what its batch ops draw from). The tasks run the loader's batch ops when
    its workers would (a loader on the CPU: :func:`task_stage`); for a loader on a CUDA
    device, :func:`fastload.ray.batches` runs them there.

    Args:
        loader: The ``fastload.DataLoader`` whose epoch it is.
        ray_remote_args: Ray's options for the decoding tasks, as ``map_batches`` takes them:
            ``{"resources": {"decode": 1}}`` decodes only on nodes started with that custom
            resource (CPU-only nodes beside the trainers), ``{"num_cpus": 2}`` gives a task
            two cores. Default: one CPU a task, anywhere.

    Raises:
        ImportError: Ray Data is not installed.
        TypeError: The loader cannot run this way (a batch executor, an ``IterableDataset``,
            a collate function of its own, draws made per sample for batch ops): the message
            says which.
    """
    ray = import_ray()
    plan = check_plan(loader)
    keyed = loader.next_epoch_keys()
    rows = [
        {
            "batch": number,
            "indices": [int(key) for key in keys],
            "seeds": [key.seed for key in keys],
            "batch_seed": keys.seed,
        }
        for number, keys in enumerate(keyed)
    ]
    source = ray.data.from_items(rows, override_num_blocks=max(1, len(rows)))
    context = source.context
    context.execution_options.preserve_order = True  # the loader's order, batch by batch
    context.raise_original_map_exception = True  # an unreadable image: the loader's error
    # Ray Data reserves part of the CPUs for each operator; here the input is ready at once
    # and the decoding is the only work, which the reservation held to half the CPUs
    context.op_resource_reservation_enabled = False
    dataset = ray.put(loader.plan.dataset)
    epoch = source.map_batches(
        read_batches,
        batch_size=1,
        fn_args=(dataset,),
        fn_kwargs={"skipping": plan.skipping, "stage": task_stage(plan)},
        **(ray_remote_args or {}),
    )
    _EPOCHS[epoch] = (keyed, needs(ray_remote_args))
    return epoch


def epoch_of(source: Any) -> tuple[EpochKeys, dict[str, float]] | None:
    """For a Ray Dataset :func:`epoch_dataset` made in this process: the epoch's keys (they
    count what is delivered, for the loader's ``state_dict``) and what its decoding tasks ask
    a node for (:func:`fastload.ray.watch.needs`); ``None`` for anything else (a training
    worker's share of a dataset made elsewhere)."""
    try:
        return _EPOCHS.get(source)
    except TypeError:  # not hashable: not one of ours
        return None


def check_plan(loader: Any) -> WorkerPlan:
    """The loader's plan, when :func:`epoch_dataset` can run it.

    Raises:
        TypeError: What stands in the way.
    """
    plan = loader.plan
    why = None
    if not isinstance(plan, WorkerPlan):
        why = f"the {plan.backend} executor reads the epoch itself"
    elif loader.batch_sampler is None:
        why = "it makes no batches (batch_size=None); give it a batch_size"
    elif not plan.keyed:
        why = (
            "its samples carry no seeds of their own; a fastload dataset with "
            'seeding="sample" (the default) draws the same wherever it is read'
        )
    elif plan.deferred:
        why = "batch ops that draw per sample in the workers are not carried to Ray yet"
    elif plan.then is not None or loader.collate_fn is not default_collate:
        why = "a collate_fn of its own is not carried to Ray yet; use torch's default"
    if why is not None:
        raise TypeError(f"fastload.ray cannot run this loader: {why}")
    return plan


def task_stage(plan: WorkerPlan) -> BatchStage | None:
    """The batch ops the decoding tasks run, as the loader's workers run them: all of them
    for a loader on the CPU, none for one on a CUDA device (they run there, after the copy,
    and Ray carries uint8)."""
    if plan.cuda or (plan.batch_ops is None and not plan.channels_last):
        return None
    return BatchStage(plan.batch_ops, channels_last=plan.channels_last)


def read_batches(
    rows: dict[str, np.ndarray],
    dataset: Any,
    *,
    skipping: bool = False,
    stage: BatchStage | None = None,
) -> dict[str, np.ndarray]:
    """A Ray task's work: each row's batch read and decoded as the loader's workers read it
    (its keys, their seeds, torch's ``default_collate``, then ``stage`` under the batch's
    seed), as numpy columns; channels-last images as N x H x W x C arrays.

    With ``skipping`` (``on_error="skip"``), the unreadable samples leave the batch and two
    columns more say what was dropped: ``skipped`` (on a batch's first row, its unreadable
    files as JSON ``[[path, reason], ...]``; empty elsewhere) and ``kept`` (``False`` only on
    the one placeholder row of a batch whose every sample was unreadable).
    """
    with buffers.using(_RING):
        return _read_batches(rows, _dataset(dataset), skipping, stage)


def _read_batches(
    rows: dict[str, np.ndarray], reader: Any, skipping: bool, stage: BatchStage | None
) -> dict[str, np.ndarray]:
    # as in the loader's workers, a leading normalize is written by the decoder as it decodes
    # a stacked batch, and only the ops after it run on that batch
    split = stage.split_normalize() if stage is not None else None
    normalizing, after = split if split is not None else (None, stage)
    parts: list[dict[str, np.ndarray]] = []
    for k in range(len(rows["batch"])):
        keys = KeyedBatch(
            (
                SampleKey(int(i), int(s))
                for i, s in zip(rows["indices"][k], rows["seeds"][k], strict=True)
            ),
            int(rows["batch_seed"][k]),
        )
        samples = _samples(reader, keys, normalizing)
        normalized = isinstance(samples, StackedSamples) and samples.normalized is not None
        part = _batch_columns(
            samples, skipping, after if normalized else stage, int(rows["batch_seed"][k])
        )
        size = len(part["image"])
        part["batch"] = np.full(size, int(rows["batch"][k]), np.int64)
        part["batch_seed"] = np.full(size, int(rows["batch_seed"][k]), np.int64)
        parts.append(part)
    if len(parts) == 1:  # the usual task (one batch): no copy of its images
        return parts[0]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def _batch_columns(
    samples: list[Any], skipping: bool, stage: BatchStage | None, seed: int
) -> dict[str, np.ndarray]:
    """One batch's samples, collated and through ``stage``, as columns (see
    :func:`read_batches`)."""

    def collated(good: Any) -> dict[str, np.ndarray]:
        batch = good.collated() if isinstance(good, StackedSamples) else default_collate(good)
        if stage is None:
            return _columns(batch, nhwc=False)
        return _columns(stage(batch, seed=seed), nhwc=stage.channels_last)

    if not skipping:
        return collated(samples)
    if isinstance(samples, StackedSamples):  # made only of samples that were read
        columns = collated(samples)
        return {**columns, "kept": np.ones(len(samples), bool), "skipped": _report(len(samples))}
    good = [s for s in samples if not isinstance(s, Skipped)]
    dropped = [[s.path, s.reason] for s in samples if isinstance(s, Skipped)]
    if good:
        columns = collated(good)
        kept = np.ones(len(good), bool)
    else:  # nothing to collate: one row that only carries the report
        columns = {"image": np.zeros((1, 1, 1, 1), np.uint8), "label": np.zeros(1, np.int64)}
        kept = np.zeros(1, bool)
    return {**columns, "kept": kept, "skipped": _report(len(kept), dropped)}


def _report(rows: int, dropped: list[list[str]] | None = None) -> np.ndarray:
    """The ``skipped`` column: the batch's unreadable files as JSON on its first row."""
    report = np.full(rows, "", dtype=object)
    report[0] = json.dumps(dropped) if dropped else ""
    return report


def _samples(reader: Any, keys: KeyedBatch, normalizing: Normalizing | None) -> Any:
    """A batch's samples: decoded straight into one tensor where a fastload dataset can
    (``load_stacked``, normalized as it is decoded where ``normalizing`` says so), else as its
    ``__getitems__`` or indexing makes them."""
    load_stacked = getattr(reader, "load_stacked", None)
    if load_stacked is not None:
        return load_stacked(keys, normalizing=normalizing)
    getitems = getattr(reader, "__getitems__", None)
    return list(getitems(keys) if getitems is not None else (reader[i] for i in keys))


def _dataset(ref: Any) -> Any:
    """The dataset behind ``ref``, fetched from Ray's object store once a process."""
    key = ref.hex()
    if key not in _DATASETS:
        import ray

        while len(_DATASETS) >= _KEPT:  # the oldest epochs' (dicts keep their order)
            del _DATASETS[next(iter(_DATASETS))]
        _DATASETS[key] = ray.get(ref)
    return _DATASETS[key]


def _columns(batch: Any, *, nhwc: bool) -> dict[str, np.ndarray]:
    """A collated batch (an image tensor, or images and int labels) as columns; ``nhwc``:
    channels-last images as N x H x W x C arrays, without a copy."""
    if isinstance(batch, torch.Tensor):
        return {"image": _array(batch, nhwc=nhwc)}
    if (
        isinstance(batch, (list, tuple))
        and len(batch) == 2
        and all(isinstance(part, torch.Tensor) for part in batch)
        and batch[1].ndim == 1
    ):
        return {"image": _array(batch[0], nhwc=nhwc), "label": batch[1].numpy()}
    raise TypeError(
        "fastload.ray carries batches of images, or of images and int labels, for now; the "
        f"loader's batches are {type(batch).__name__}"
    )


def _array(images: torch.Tensor, *, nhwc: bool) -> np.ndarray:
    if nhwc:
        return images.permute(0, 2, 3, 1).contiguous().numpy()
    return images.numpy()
