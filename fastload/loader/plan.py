"""What a ``fastload.DataLoader`` does, settled in named steps into one of two plans.

:func:`plan_loader` reads the loader's arguments as the loader holds them (torch's attributes
and fastload's options) and returns a :class:`WorkerPlan` (torch's worker processes read the
dataset) or an :class:`ExecutorPlan` (a batch executor reads and decodes whole batches in their
place). The steps, in order:

1. **translate** (:func:`translate`): with ``accelerate``, the dataset's torchvision pipeline
   becomes fastload's ops (:mod:`fastload.accelerate`), or the reason it cannot is kept;
2. **choose**: an executor when the backend (``backend=``, else the dataset's) is one;
3. **executor** (:func:`executor_plan`): refuse what an executor cannot honour, shard under
   ``torch.distributed``;
4. **GPU** (:func:`gpu_executor_plan`): with a CUDA device and no backend named (on the
   loader or the dataset), a fastload dataset (or accelerate's) goes to the GPU executor
   when it can run all of it with the same draws;
5. **workers** (:func:`worker_plan`): swap in the per-sample decoder ``backend=`` names.

A plan is pure data: it starts nothing (no process, no executor), so it can be made again
whenever the loader's attributes change, in whatever process iterates the loader.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from fastload import backends, system
from fastload._optional import require
from fastload.accelerate import Acceleration, NotAccelerated, accelerate_dataset
from fastload.backends.executor import translate as executor_translation
from fastload.checks import check_choice
from fastload.detection.batching import leaves_images
from fastload.devices import resolve_device
from fastload.gpu.deferred import Deferred, DeferredBatch
from fastload.gpu.transforms import Compose as BatchCompose
from fastload.gpu.transforms import transforms_in
from fastload.loader.collate_shapes import (
    collate_blocker,
    collate_shape,
    collating,
    is_default_collate,
)
from fastload.options import LoaderOptions

__all__ = [
    "ExecutorPlan",
    "PipelineTranslation",
    "WorkerPlan",
    "executor_plan",
    "has_deferred",
    "keyed",
    "plan_loader",
    "thread_refusal",
    "translate",
    "worker_plan",
]

log = logging.getLogger("fastload")
_LOGGED: set[str] = set()  # what accelerate said already, in this process


def has_deferred(batch_ops: Any) -> bool:
    """Whether ``batch_ops`` hold an op that applies draws made per sample."""
    return batch_ops is not None and any(
        isinstance(op, Deferred) for op in transforms_in(batch_ops)
    )


def keyed(options: LoaderOptions, given: Any, read: Any) -> bool:
    """Whether each index goes out with its sample's seed (per-sample streams).

    Args:
        options: The loader's options (``seeding``).
        given: The user's dataset.
        read: What is read (``given``, or fastload's translation of it).

    ``"auto"`` keys only a dataset that is fastload's own: a swapped torchvision dataset keeps
    torch's per-worker streams, so the same seed draws the same crops as stock torchvision.
    """
    if isinstance(read, torch.utils.data.IterableDataset) or not getattr(
        read, "sample_keys", False
    ):
        return False
    if options.seeding == "auto":
        return bool(getattr(given, "sample_keys", False))
    return options.seeding == "sample"


@dataclass(frozen=True)
class PipelineTranslation:
    """What the translate step made of the dataset's pipeline.

    Attributes:
        dataset: What is read: the loader's dataset, or fastload's translation of it.
        acceleration: What was done, or why not.
        batch_ops: The translation's batch ops, then ``batch_transforms``.
        then: The rest of the user's ``collate_fn`` after torch's default collate, run at the
            end of the batch stage
            (:func:`fastload.loader.collate_shapes.collate_then`); ``None``: the collate function
            runs as the loader holds it.
        images_at: The key of the user's collate function's dict batch that holds the
            images the batch ops run on (:func:`fastload.accelerate.hf_datasets.stacked_column`);
            ``None``: the batch is images, or a sequence led by them.
    """

    dataset: Any
    acceleration: Acceleration
    batch_ops: Callable[..., Any] | None
    then: Callable[..., Any] | None = None
    images_at: str | None = None


@dataclass(frozen=True)
class WorkerPlan:
    """torch's worker processes (or the main process) read the dataset.

    Attributes:
        dataset: What the workers read (the loader's dataset, translated or decoding with
            another backend).
        acceleration: What ``accelerate`` did.
        batch_ops: Run on each collated batch (in the workers, or after the copy to a CUDA
            device).
        then: The rest of the user's ``collate_fn``, run after ``batch_ops`` (the workers then
            collate with torch's ``default_collate``); ``None``: they collate with the
            loader's ``collate_fn``.
        images_at: The key of the collate function's dict batch whose images ``batch_ops``
            run on (``None``: the batch is images, or a sequence led by them).
        device: Where batches are delivered (``None``: as torch yields them).
        device_prefetch: Batches copied ahead with a CUDA device.
        channels_last: Deliver 4-D images channels-last.
        keyed: Each index goes out with its sample's seed (``seeding="sample"`` on a dataset
            that takes seeds).
        skipping: The dataset returns markers for unreadable files (``on_error="skip"``).
        decoder: The per-sample decoder ``backend=`` swapped in, if any.
        threads: The workers are threads of this process (``worker_type="thread"``).
    """

    dataset: Any
    acceleration: Acceleration
    batch_ops: Callable[..., Any] | None
    device: torch.device | None
    device_prefetch: int
    channels_last: bool
    keyed: bool
    skipping: bool
    decoder: str | None = None
    then: Callable[..., Any] | None = None
    threads: bool = False
    images_at: str | None = None

    @property
    def deferred(self) -> bool:
        """Whether samples or batches carry draws for batch ops (:mod:`fastload.gpu.deferred`)."""
        return has_deferred(self.batch_ops) or isinstance(self.then, DeferredBatch)

    @property
    def backend(self) -> str | None:
        """The per-sample decoder the workers decode with (the dataset's, or ``backend=``)."""
        return getattr(self.dataset, "backend", None)

    @property
    def cuda(self) -> bool:
        """Whether batches go to a CUDA device (the batch stage then runs there)."""
        return self.device is not None and self.device.type == "cuda"


@dataclass(frozen=True)
class ExecutorPlan:
    """A batch executor reads, decodes and transforms whole batches; no worker processes.

    Attributes:
        dataset: The fastload dataset the executor reads.
        acceleration: What ``accelerate`` did.
        batch_ops: The batch ops; the executor folds the leading ones it can run.
        backend: The executor's registered name.
        device: Where batches are delivered (``None``: the CPU).
        channels_last: Deliver 4-D images channels-last.
        threads: The executor's CPU threads (``num_workers``, at least 1).
        prefetch: Batches decoded ahead (``prefetch_factor``, default 2).
        shard: Under ``torch.distributed`` with torch's default sampler: this rank's
            ``DistributedSampler``, else ``None``.
        keyed: Each index goes out with its sample's seed.
    """

    dataset: Any
    acceleration: Acceleration
    batch_ops: Callable[..., Any] | None
    backend: str
    device: torch.device | None
    channels_last: bool
    threads: int
    prefetch: int
    shard: torch.utils.data.DistributedSampler | None
    keyed: bool


def plan_loader(loader: Any, options: LoaderOptions) -> WorkerPlan | ExecutorPlan:
    """Settle what a loader does from its attributes (torch's) and fastload's ``options``.

    Args:
        loader: The ``fastload.DataLoader`` (its torch attributes are read, nothing is set).
        options: Its fastload options.

    Raises:
        ValueError: A combination the chosen path cannot honour; the message names it.
    """
    device = resolve_device(options.device)
    if options.backend is not None:  # an unknown name lists every valid one
        check_choice("backend", options.backend, [None, *backends.choices()])
    translation = translate(loader, options, device)
    dataset = translation.dataset
    named = options.named_backend
    name = named if named is not None else getattr(dataset, "backend", None)
    if isinstance(name, str) and name in backends.names("executor"):
        if options.worker_type == "thread":
            raise ValueError(
                f"worker_type='thread' runs per-sample decoders on threads; the {name!r} "
                "executor reads whole batches on threads of its own (num_workers)"
            )
        return executor_plan(loader, options, translation, name, device)
    threads = options.worker_type == "thread"
    if named is None and device is not None and device.type == "cuda" and not threads:
        on_gpu = gpu_executor_plan(loader, options, translation, device)
        if on_gpu is not None:
            return on_gpu
    return worker_plan(loader, options, translation, device)


# The executor an accelerated pipeline goes to on a CUDA device when nothing else is asked for.
GPU_EXECUTOR = "nvimgcodec"


def gpu_executor_plan(
    loader: Any, options: LoaderOptions, translation: PipelineTranslation, device: torch.device
) -> ExecutorPlan | None:
    """The GPU step: a fastload dataset (or one accelerate made) on a CUDA device decodes on
    the GPU (:data:`GPU_EXECUTOR`) when the library is here, the dataset's backend was left to
    ``"auto"``, and the executor can run all of it with the same draws; otherwise ``None``
    (the worker processes), with why on the ``fastload`` logger.

    The executor draws each batch from the epoch's stream or each sample's seed, never from
    torch's per-worker streams: random crops of a swapped torchvision dataset stay in the
    workers (the same seed, the same crops as stock) unless ``seeding="sample"``.
    """
    acceleration = translation.acceleration
    split = getattr(translation.dataset, "transform_split", None)
    if split is None:  # not fastload's dataset, nor translated into one: the workers' job
        return None
    if getattr(translation.dataset, "backend_named", False):  # the user chose its decoder
        return None
    if not backends.get(GPU_EXECUTOR).check().usable or not torch.cuda.is_available():
        return None
    draws = split.draws
    try:
        if draws and not keyed(options, loader.dataset, translation.dataset):
            raise ValueError(
                "the random crops are drawn from torch's per-worker streams, as stock "
                "torchvision draws them; seeding='sample' draws them per sample, on the GPU too"
            )
        plan = executor_plan(loader, options, translation, GPU_EXECUTOR, device)
    except ValueError as exc:
        why = f"decoding stays in the workers, not on the GPU ({GPU_EXECUTOR}): {exc}"
        if why not in _LOGGED:
            _LOGGED.add(why)
            log.info(why)
        return None
    if not acceleration.accelerated:  # fastload's own pipeline: explain's head names it
        return plan
    where = f"by the {GPU_EXECUTOR} executor, chosen for {device}"
    chosen = dataclasses.replace(acceleration, decoder=GPU_EXECUTOR, decoding=where, where=where)
    return dataclasses.replace(plan, acceleration=chosen)


# what the user's first op run as written gets, by HandOn's form
_HANDED = {
    "pil": "a PIL image of the fused result",
    "uint8": "the fused uint8 tensor, in place of its PIL image's PILToTensor",
    "float": "the fused image as ToTensor gives it",
    "image": "the fused image as ToImage gives it",
}


def translate(
    loader: Any, options: LoaderOptions, device: torch.device | None
) -> PipelineTranslation:
    """The translate step: the dataset's torchvision pipeline as fastload's ops, when asked
    (``accelerate=True``, or ``"auto"`` with a CUDA device) and possible; why not, said once
    on the ``fastload`` logger, when not."""
    dataset = loader.dataset
    kind = type(dataset).__name__
    cuda = device is not None and device.type == "cuda"
    wanted = options.accelerate is True or (options.accelerate == "auto" and cuda)
    ops = options.batch_transforms
    if not wanted:
        why = (
            "accelerate=False"
            if options.accelerate is False
            else (
                "not asked: accelerate=True, or a CUDA device with accelerate='auto', turns it on"
            )
        )
        return PipelineTranslation(dataset, Acceleration(False, why, kind), ops)
    default, then, stacked = collate_shape(loader, cuda=cuda)
    try:
        batches = (default or then is not None) and loader.batch_sampler is not None
        later = cuda and leaves_images(loader.collate_fn)  # detection: floats on the device
        fast, translated = accelerate_dataset(
            dataset,
            batches=batches,
            policies=cuda,
            float_on_device=later,
            stacks=stacked.key if stacked is not None else None,
        )
    except NotAccelerated as why:
        blockers = tuple(f"{what}: {reason}" for what, reason in why.blockers)
        acceleration = Acceleration(False, str(why), kind, blockers=blockers)
        _say(acceleration)
        return PipelineTranslation(dataset, acceleration, ops)
    if translated.batch_ops is not None:
        ops = translated.batch_ops if ops is None else BatchCompose([translated.batch_ops, ops])
    else:
        then = None  # nothing moved to the batches: the collate function runs as it is
    # the conversion moved to the batches past a collate of one's own: it stacked the images
    images_at = stacked.into if stacked is not None and translated.batch_ops is not None else None
    name = options.named_backend if options.named_backend is not None else fast.backend
    decoding = "in the worker processes" if loader.num_workers else "in this process"
    where = f"{decoding}, after collating"
    if cuda:
        where = f"on {device}, on the prefetcher's side stream"
    if name in backends.names("executor"):
        decoding = where = f"by the {name} executor"
    acceleration = Acceleration(
        True,
        dataset=kind,
        decoder=name,
        decoding=decoding,
        fused=translated.fused_from,
        batch=translated.batch_from + collating(then, images_at),
        where=where,
        dtype=str(translated.dtype).replace("torch.", "") if translated.dtype else "",
        rest=translated.rest_from,
        handed=_HANDED[translated.hand_on.form] if translated.hand_on else "",
        blockers=collate_blocker(loader, default, then, cuda, images_at)
        + tuple(f"{what}: {reason}" for what, reason in translated.blockers),
    )
    _say(acceleration)
    return PipelineTranslation(fast, acceleration, ops, then, images_at)


def _say(acceleration: Acceleration) -> None:
    """What accelerate did, once per process on the ``fastload`` logger at INFO."""
    message = f"accelerate: {acceleration}"
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.info(message)


def executor_plan(
    loader: Any,
    options: LoaderOptions,
    translation: PipelineTranslation,
    name: str,
    device: torch.device | None,
) -> ExecutorPlan:
    """The executor step: refuse what an executor cannot honour, and shard it.

    An executor replaces the worker processes, so what only they would run (a collate
    function of one's own, ``worker_init_fn``) is refused rather than silently skipped.

    Raises:
        ValueError: The dataset is not a fastload dataset an executor can read, or an argument
            would not run; the message says what to do.
        fastload.MissingDependencyError: The executor's library is not installed.
    """
    for requirement in backends.get(name).requires:  # a missing library is named now
        require(requirement, backend=name)
    dataset = translation.dataset
    if getattr(dataset, "transform_split", None) is None or not hasattr(dataset, "path"):
        raise ValueError(
            f"backend={name!r} reads the files itself: the dataset must be a fastload.ImageFolder "
            f"or fastload.ImageList, got {type(dataset).__name__}"
        )
    if loader.batch_sampler is None:
        raise ValueError(f"backend={name!r} makes whole batches: batch_size=None is not supported")
    if getattr(dataset, "exif_orientation", True) is False and not backends.get(name).stored_pixels:
        raise ValueError(
            f"backend={name!r} always applies EXIF orientation, and this dataset keeps the stored "
            "pixels (exif_orientation=False, as torchvision's ImageFolder does): use a per-sample "
            "backend, or a fastload.ImageFolder"
        )
    if has_deferred(translation.batch_ops):
        drawn = ", ".join(translation.acceleration.batch)
        raise ValueError(
            f"backend={name!r} makes batches without worker processes, and some of the batch "
            f"ops ({drawn}) draw per sample in them: use a per-sample backend (leave backend= "
            "unset)"
        )
    if translation.acceleration.rest:  # the user's own ops, which only workers would run
        raise ValueError(
            f"backend={name!r} runs fastload's ops alone, and "
            f"{translation.acceleration.rest[0]} stays as you wrote it: use a per-sample "
            "backend (leave backend= unset), or a pipeline that accelerate runs whole "
            "(fastload.explain says which ops are in the way)"
        )
    executor_translation(dataset.transform_split, name)  # an op it cannot run is named now
    if not is_default_collate(loader.collate_fn):
        _refuse(name, "collate_fn", loader.collate_fn)
    if loader.worker_init_fn is not None:
        _refuse(name, "worker_init_fn", loader.worker_init_fn)
    return ExecutorPlan(
        dataset,
        translation.acceleration,
        translation.batch_ops,
        name,
        device,
        options.channels_last,
        threads=max(1, loader.num_workers),
        prefetch=loader.prefetch_factor or 2,
        shard=_shard(loader),
        keyed=keyed(options, loader.dataset, dataset),
    )


def _refuse(name: str, option: str, value: Any) -> None:
    raise ValueError(
        f"backend={name!r} makes batches without worker processes or collating, so "
        f"{option}={value!r} would not run; remove it, or use a CPU backend"
    )


def _shard(loader: Any) -> torch.utils.data.DistributedSampler | None:
    """This rank's shard for an executor under ``torch.distributed``, when the loader samples
    with what ``shuffle=`` makes (torch's default sampler in torch's ``BatchSampler``): a
    sampler of one's own (Lightning's ``DistributedSampler`` among them) is used as it is."""
    if system.world_size() <= 1:
        return None
    dataset: Any = loader.dataset
    sampler, batches = loader.sampler, loader.batch_sampler
    if type(batches) is not BatchSampler or batches.sampler is not sampler:
        return None
    if type(sampler) not in (SequentialSampler, RandomSampler):
        return None
    if getattr(sampler, "data_source", None) is not dataset:
        return None
    generator = loader.generator
    return torch.utils.data.DistributedSampler(
        dataset,  # type: ignore[arg-type]
        shuffle=type(sampler) is RandomSampler,
        seed=generator.initial_seed() if generator is not None else 0,
    )


def worker_plan(
    loader: Any,
    options: LoaderOptions,
    translation: PipelineTranslation,
    device: torch.device | None,
) -> WorkerPlan:
    """The workers step: the dataset they read, decoding with ``backend=`` when it names a
    per-sample decoder.

    Raises:
        ValueError: ``backend=`` names a decoder, and the dataset is not fastload's.
    """
    dataset, decoder = translation.dataset, None
    named = options.named_backend
    if named is not None:
        using = getattr(dataset, "using", None)
        if using is None:
            raise ValueError(
                f"backend={named!r} decodes a fastload dataset's files: the dataset must be a "
                f"fastload.ImageFolder, ImageList or ImageShards, got {type(dataset).__name__}"
            )
        dataset, decoder = using(named), named
    is_keyed = keyed(options, loader.dataset, dataset)
    threads = options.worker_type == "thread"
    if threads:
        why = thread_refusal(loader, is_keyed)
        if why is not None:
            raise ValueError(f"worker_type='thread' cannot run this loader: {why}")
    return WorkerPlan(
        dataset,
        translation.acceleration,
        translation.batch_ops,
        device,
        options.device_prefetch,
        options.channels_last,
        keyed=is_keyed,
        skipping=getattr(dataset, "on_error", None) == "skip",
        decoder=decoder,
        then=translation.then,
        threads=threads,
        images_at=translation.images_at,
    )


def thread_refusal(loader: Any, is_keyed: bool) -> str | None:
    """Why the loader's workers cannot be threads with the meaning they have as processes
    (``None``: they can)."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return "an IterableDataset splits itself by get_worker_info(), which threads lack"
    if loader.worker_init_fn is not None:
        return "a worker_init_fn runs once in each worker process, and threads share one"
    if not is_keyed:
        return (
            "its random draws would come from streams the threads share; a fastload dataset "
            "(or accelerate=True with seeding='sample') draws each sample from its own"
        )
    return None
