"""``fastload.DataLoader``: torch's DataLoader, plus batches delivered on the device."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

# torch's worker loop seeds numpy.random in every worker. numpy >= 2 imports that submodule
# lazily, and importing it for the first time inside a forked worker has crashed workers here
# (KeyError in importlib's module lock). Importing it once in the parent removes that hazard.
import numpy.random  # noqa: F401
import torch.utils.data

from fastload import backends, system
from fastload.accelerate import Acceleration, NotAccelerated, accelerate_dataset
from fastload.autotune import autotune
from fastload.backends.executor import ExecutorOptions
from fastload.devices import DeviceLike, resolve_device
from fastload.gpu.stage import BatchStage, CollateThenStage
from fastload.gpu.transforms import Compose as GpuCompose
from fastload.prefetch import CUDAPrefetcher
from fastload.skipping import SkipCollate, SkipReport

__all__ = ["DataLoader", "LoaderPlan", "plan_loader"]

T_co = TypeVar("T_co", covariant=True)

_TORCH_INIT = inspect.signature(torch.utils.data.DataLoader.__init__)
# torch's options for worker processes: an executor has none, so they go with them
_WORKER_ONLY = ("persistent_workers", "multiprocessing_context")
log = logging.getLogger("fastload")


@dataclass(frozen=True)
class LoaderPlan:
    """What a ``fastload.DataLoader`` does, settled before torch's constructor runs.

    Attributes:
        args: Positional arguments for torch's constructor.
        kwargs: Keyword arguments for torch's constructor.
        device: Where batches are delivered (``None``: as torch yields them).
        stage: The batch ops (``gpu_transforms``, ``channels_last``), if any.
        executor: The batch executor's name, when one replaces the worker processes.
        decoder: A per-sample decoder that replaces the dataset's, if any.
        threads: The executor's thread count (the ``num_workers`` asked for).
        prefetch: The executor's read-ahead (``prefetch_factor``), if given.
        auto_shard: A ``DistributedSampler`` was added for the executor (its epoch is set).
        acceleration: What ``accelerate`` did to the dataset's pipeline.
        batch_ops: The batch ops: the translated pipeline's, then ``gpu_transforms``.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    device: torch.device | None
    stage: BatchStage | None
    executor: str | None = None
    decoder: str | None = None
    threads: int = 0
    prefetch: int | None = None
    auto_shard: bool = False
    acceleration: Acceleration = field(default_factory=lambda: Acceleration(False, "not asked"))
    batch_ops: Callable[..., Any] | None = None


def plan_loader(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    device: DeviceLike | None,
    device_prefetch: int,
    gpu_transforms: Callable[..., Any] | None,
    channels_last: bool,
    backend: str | None,
    accelerate: bool | None = None,
    loader_class: Callable[..., Any],
) -> LoaderPlan:
    """Check fastload's options and settle what the loader does (see :class:`LoaderPlan`).

    Args:
        args: torch's positional arguments, as given.
        kwargs: torch's keyword arguments, as given.
        device: The ``device`` option.
        device_prefetch: The ``device_prefetch`` option.
        gpu_transforms: The ``gpu_transforms`` option.
        channels_last: The ``channels_last`` option.
        backend: The ``backend`` option.
        accelerate: The ``accelerate`` option.
        loader_class: What ``num_workers="auto"`` measures with (the loader's own class).

    Raises:
        ValueError: A bad value for one of fastload's options.
    """
    target = resolve_device(device)
    if backend is not None:
        backends.get(backend)  # an unknown name lists the valid ones
    if (
        isinstance(device_prefetch, bool)
        or not isinstance(device_prefetch, int)
        or device_prefetch < 1
    ):
        raise ValueError(f"device_prefetch={device_prefetch!r} must be an int >= 1")
    if not isinstance(channels_last, bool):
        raise ValueError(f"channels_last={channels_last!r} must be True or False")
    if accelerate is not None and not isinstance(accelerate, bool):
        raise ValueError(f"accelerate={accelerate!r} must be True, False or None")
    try:
        given: dict[str, Any] = dict(_TORCH_INIT.bind(None, *args, **kwargs).arguments)
    except TypeError:  # torch raises its own error for these arguments
        return LoaderPlan(args, kwargs, target, _stage(gpu_transforms, channels_last))
    given.pop("self")
    wanted = accelerate if accelerate is not None else target is not None and target.type == "cuda"
    kind = type(given.get("dataset")).__name__
    acceleration = Acceleration(
        False, "not asked: accelerate=True or a CUDA device turns it on", kind
    )
    batch_ops = gpu_transforms
    if wanted:
        acceleration, batch_ops = _accelerate(given, target, gpu_transforms, backend)
    elif accelerate is False:
        acceleration = Acceleration(False, "accelerate=False", kind)
    stage = _stage(batch_ops, channels_last)
    if given.get("num_workers") == "auto":
        # fastload's own value for a torch parameter: measure, then hand torch an int
        given["num_workers"] = _autotuned_workers(
            given,
            loader_class,
            device=device,
            gpu_transforms=batch_ops,
            channels_last=channels_last,
            backend=backend,
            accelerate=False,  # the dataset is translated already
        )
    dataset = given.get("dataset")
    name = backend if backend is not None else getattr(dataset, "backend", None)
    if isinstance(name, str) and name in backends.names("executor"):
        auto_shard = _check_executor_arguments(given, name)
        # The executor's threads replace the worker processes: torch gets none, so it starts
        # none and warns about none, and its worker-only options go with them.
        threads = given.get("num_workers", 0)
        prefetch = given.pop("prefetch_factor", None)
        for option in _WORKER_ONLY:
            given.pop(option, None)
        given["num_workers"] = 0
        return LoaderPlan(
            (),
            given,
            target,
            stage,
            name,
            None,
            threads,
            prefetch,
            auto_shard,
            acceleration=acceleration,
            batch_ops=batch_ops,
        )
    decoder = None
    if backend is not None:
        decoder = backend
        given["dataset"] = _decoding_with(dataset, backend)
    if target is not None and target.type == "cuda" and "pin_memory" not in given:
        given["pin_memory"] = True
    return LoaderPlan(
        (), given, target, stage, decoder=decoder, acceleration=acceleration, batch_ops=batch_ops
    )


def _stage(batch_ops: Callable[..., Any] | None, channels_last: bool) -> BatchStage | None:
    if batch_ops is None and not channels_last:
        return None
    return BatchStage(batch_ops, channels_last=channels_last)


_LOGGED: set[str] = set()  # what accelerate said already, in this process


def _accelerate(
    given: dict[str, Any],
    target: torch.device | None,
    gpu_transforms: Callable[..., Any] | None,
    backend: str | None,
) -> tuple[Acceleration, Callable[..., Any] | None]:
    """Translate the dataset's pipeline in ``given`` when fastload can run it (see
    :mod:`fastload.accelerate`); say once, on the ``fastload`` logger, why not when it cannot.

    Returns:
        What was done, and the batch ops: the translation's, then ``gpu_transforms``.
    """
    dataset = given.get("dataset")
    kind = type(dataset).__name__
    try:
        if given.get("collate_fn") is not None:
            raise NotAccelerated(
                f"collate_fn={given['collate_fn']!r}", "the batch ops need torch's default collate"
            )
        if given.get("batch_size", 1) is None and given.get("batch_sampler") is None:
            raise NotAccelerated("batch_size=None", "no batches for the batch ops")
        fast, translated = accelerate_dataset(dataset)
    except NotAccelerated as why:
        acceleration = Acceleration(False, str(why), kind)
        message = f"accelerate: {acceleration}"
        if message not in _LOGGED:
            _LOGGED.add(message)
            log.info(message)
        return acceleration, gpu_transforms
    given["dataset"] = fast
    ops = translated.batch_ops
    if gpu_transforms is not None:
        ops = gpu_transforms if ops is None else GpuCompose([ops, gpu_transforms])
    decoding = "in the worker processes" if given.get("num_workers", 0) else "in this process"
    where = f"{decoding}, after collating"
    if target is not None and target.type == "cuda":
        where = f"on {target}, on the prefetcher's side stream"
    name = backend if backend is not None else fast.backend
    if name in backends.names("executor"):
        decoding = where = f"by the {name} executor"
    acceleration = Acceleration(
        True,
        dataset=kind,
        decoder=name,
        decoding=decoding,
        fused=translated.fused_from,
        batch=translated.batch_from,
        where=where,
        dtype=str(translated.dtype).replace("torch.", ""),
    )
    log.info(
        "accelerate: %s: %d ops fused with decoding, %d on whole batches",
        kind,
        len(translated.fused_from),
        len(translated.batch_from),
    )
    return acceleration, ops


def _decoding_with(dataset: Any, backend: str) -> Any:
    using = getattr(dataset, "using", None)
    if using is None:
        raise ValueError(
            f"backend={backend!r} decodes a fastload dataset's files: the dataset must be a "
            f"fastload.ImageFolder or fastload.ImageList, got {type(dataset).__name__}"
        )
    return using(backend)


class DataLoader(torch.utils.data.DataLoader[T_co]):
    """A drop-in ``torch.utils.data.DataLoader`` that can also deliver batches on a CUDA device.

    Every parameter of the installed torch's ``DataLoader`` is accepted in the same order, with
    the same defaults, and passed to torch unchanged. With none of fastload's own options set,
    the loader *is* torch's: same batches, same order for the same ``generator``, same worker
    seeding, same errors. fastload's options are keyword-only and come after torch's.

    ``num_workers="auto"`` (fastload's only extension of a torch parameter) measures which
    worker count loads fastest with these very arguments (:func:`fastload.autotune.autotune`,
    cached on disk), passes that int to torch, and logs the choice on the ``fastload`` logger.

    Args:
        *args: torch's positional parameters (``dataset``, ``batch_size``, ...).
        device: Where batches are delivered. ``None`` (default) or ``"cpu"``: exactly torch's
            batches, as torch yields them. ``"cuda"`` / ``"cuda:N"``: batches arrive on that
            device through a :class:`~fastload.CUDAPrefetcher`, copied on a side stream from
            pinned memory while the previous batch is in use. With a CUDA device,
            ``pin_memory`` defaults to ``True`` (pinning runs in torch's pin-memory thread);
            pass ``pin_memory=False`` explicitly to turn it off.
        device_prefetch: With a CUDA ``device``, how many batches are copied ahead of the one
            in use.
        gpu_transforms: Batch ops (``fastload.gpu``) applied to each batch's images, and to its
            labels when the batch is ``(images, labels, ...)``. With a CUDA ``device`` they run
            on the prefetcher's side stream right after the copy, overlapping the training step;
            otherwise they run in the worker processes, after collating.
        channels_last: Deliver 4-D images in channels-last memory format.
        backend: Who executes the dataset's pipeline: any name in
            ``fastload.backends.names()``. ``None`` (default): the dataset itself, in torch's
            worker processes, with the backend it was made with (an executor, if it was made
            with one). A per-sample decoder's name (``"turbojpeg"``, ``"opencv"``,
            ``"pillow"``, ...): the workers decode with it instead of the dataset's (the loader
            reads a copy of the dataset that shares its samples and ``bad_files``). A batch
            executor's name (``"dali"``): it reads, decodes and transforms whole batches in
            place of the workers (see :mod:`fastload.backends.executor`); the dataset must be a
            ``fastload.ImageFolder`` or ``ImageList`` whose ``transform`` is made of
            ``fastload.transforms`` ops. ``num_workers`` then sets the executor's thread count
            (``max(1, num_workers)``) and ``prefetch_factor`` how many batches it decodes
            ahead (default 2). Under ``torch.distributed`` with no ``sampler`` given, each rank
            reads its own shard (a ``DistributedSampler``, reshuffled every epoch).
        accelerate: Run the dataset's unchanged torchvision pipeline fastload's way
            (:mod:`fastload.accelerate`): for a ``torchvision.datasets.ImageFolder`` (or a
            fastload dataset) whose ``transform`` is made of ops fastload reproduces, the
            geometry is fused with decoding, with torchvision's own draws, and the conversion
            and ``Normalize`` run on whole uint8 batches (on the device's side stream with a
            CUDA ``device``, else after collating). The batches have the dtype, range and
            shape the transform gives. ``loader.dataset`` is then fastload's copy of the dataset
            (same samples, classes and ``target_transform``). Anything fastload cannot
            reproduce keeps the pipeline unchanged and is named once on the ``fastload``
            logger; :func:`fastload.explain` says what runs where. ``None`` (default): on with
            a CUDA ``device``, off otherwise. ``False``: never; the loader is torch's.
        **kwargs: torch's keyword parameters (``shuffle``, ``num_workers``, ...).

    Raises:
        ValueError: A bad value for one of fastload's options (the message shows the value
            and the valid choices); torch's own checks raise torch's exceptions.
        RuntimeError: A CUDA ``device`` on a machine where torch sees no CUDA device.
    """

    def __init__(
        self,
        *args: Any,
        device: DeviceLike | None = None,
        device_prefetch: int = 2,
        gpu_transforms: Callable[..., Any] | None = None,
        channels_last: bool = False,
        backend: str | None = None,
        accelerate: bool | None = None,
        **kwargs: Any,
    ) -> None:
        plan = plan_loader(
            args,
            kwargs,
            device=device,
            device_prefetch=device_prefetch,
            gpu_transforms=gpu_transforms,
            channels_last=channels_last,
            backend=backend,
            accelerate=accelerate,
            loader_class=type(self),
        )
        super().__init__(*plan.args, **plan.kwargs)
        self.device = plan.device
        self.device_prefetch = device_prefetch
        self.gpu_transforms = gpu_transforms
        self.channels_last = channels_last
        self.backend = plan.executor or plan.decoder
        self.acceleration = plan.acceleration
        self._batch_ops = plan.batch_ops
        self.executor: Any = None
        self._epoch = 0
        self._auto_shard = plan.auto_shard
        self._device_stage: BatchStage | None = None
        self._executor_stage: BatchStage | None = None
        if plan.executor is not None:
            self._start_executor(plan)
            return
        cuda = plan.device is not None and plan.device.type == "cuda"
        # The batch stage runs on the prefetch stream for a CUDA device, else in the workers.
        if cuda:
            self._device_stage = plan.stage
        elif plan.stage is not None:
            self.collate_fn = CollateThenStage(self.collate_fn, plan.stage)
        if getattr(self.dataset, "on_error", None) == "skip":
            # A fastload dataset that skips unreadable images returns markers in their place:
            # drop them before collating, and report them in the main process.
            self.collate_fn = SkipCollate(self.collate_fn, batched=self.batch_sampler is not None)

    def _start_executor(self, plan: LoaderPlan) -> None:
        assert plan.executor is not None
        self.num_workers, self.prefetch_factor = plan.threads, plan.prefetch
        options = ExecutorOptions(
            device=plan.device or torch.device("cpu"),
            num_threads=max(1, plan.threads),
            prefetch=plan.prefetch or 2,
            batch_size=self.batch_size or 1,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
        )
        self.executor = backends.get(plan.executor).executor(
            self.dataset, options, batch_ops=self._batch_ops
        )
        # what the executor does not run of the batch ops, in this process, on its batches
        remaining = self.executor.remaining_ops
        if remaining is not None or self.channels_last:
            self._executor_stage = BatchStage(remaining, channels_last=self.channels_last)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.executor is not None:
            return self._executor_epoch()
        batches: Iterator[Any] = super().__iter__()
        if isinstance(self.collate_fn, SkipCollate):
            batches = SkipReport(batches, self.dataset)
        if self.device is None or self.device.type == "cpu":
            return batches
        prefetcher = CUDAPrefetcher(
            batches, device=self.device, depth=self.device_prefetch, transform=self._device_stage
        )
        return iter(prefetcher)  # started: `for batch in loader` calls iter() only on the loader

    def _executor_epoch(self) -> Iterator[Any]:
        if self._auto_shard:
            self.sampler.set_epoch(self._epoch)  # type: ignore[attr-defined]
        self._epoch += 1
        # one draw per epoch, as torch draws its workers' base seed
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        assert self.batch_sampler is not None
        batches = self.executor.epoch(
            iter(self.batch_sampler),
            seed=seed,
            target_transform=getattr(self.dataset, "target_transform", None),
        )
        if self._executor_stage is None:
            return batches
        return map(self._executor_stage, batches)


def _check_executor_arguments(given: dict[str, Any], name: str) -> bool:
    """Refuse what an executor cannot honour; add a DistributedSampler under torch.distributed.

    Returns:
        Whether a DistributedSampler was added (the loader then sets its epoch).
    """
    dataset = given["dataset"]
    if getattr(dataset, "transform_split", None) is None or not hasattr(dataset, "path"):
        raise ValueError(
            f"backend={name!r} reads the files itself: the dataset must be a fastload.ImageFolder "
            f"or fastload.ImageList, got {type(dataset).__name__}"
        )
    if given.get("batch_size", 1) is None and given.get("batch_sampler") is None:
        raise ValueError(f"backend={name!r} makes whole batches: batch_size=None is not supported")
    if getattr(dataset, "exif_orientation", True) is False:
        raise ValueError(
            f"backend={name!r} always applies EXIF orientation, and this dataset keeps the stored "
            "pixels (exif_orientation=False, as torchvision's ImageFolder does): use a per-sample "
            "backend, or a fastload.ImageFolder"
        )
    workers, prefetch = given.get("num_workers", 0), given.get("prefetch_factor")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"num_workers={workers!r} must be an int >= 0 (the {name} thread count)")
    if prefetch is not None and (
        isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1
    ):
        raise ValueError(f"prefetch_factor={prefetch!r} must be an int >= 1")
    for option in ("collate_fn", "worker_init_fn"):
        if given.get(option) is not None:
            raise ValueError(
                f"backend={name!r} makes batches without worker processes or collating, so "
                f"{option}={given[option]!r} would not run; remove it, or use a CPU backend"
            )
    if given.get("sampler") is not None or given.get("batch_sampler") is not None:
        return False
    if system.world_size() <= 1:
        return False
    generator = given.get("generator")
    given["sampler"] = torch.utils.data.DistributedSampler(
        dataset,
        shuffle=bool(given.pop("shuffle", False)),
        seed=generator.initial_seed() if generator is not None else 0,
    )
    return True


def _autotuned_workers(
    arguments: dict[str, Any], loader_class: Callable[..., Any], **fastload_options: Any
) -> int:
    """Run fastload.autotune for a loader built with these arguments; log and return the choice."""
    dataset = arguments["dataset"]
    batch_size = arguments.get("batch_size", 1)
    if batch_size is None:
        raise ValueError("num_workers='auto' needs a batch_size to measure with")
    skip = ("dataset", "batch_size", "num_workers", "persistent_workers")
    others = {
        k: v
        for k, v in arguments.items()
        if k not in skip and not _is_default(k, v)  # spelled-out defaults change nothing
    }
    result = autotune(
        dataset,
        batch_size=batch_size,
        loader_kwargs={**others, **fastload_options},
        loader=loader_class,
    )
    source = "cached" if result.cached else "measured"
    log.info(
        "num_workers='auto': %d workers (%s, %.0f images/s): %s",
        result.num_workers,
        source,
        result.images_per_sec,
        result.reason,
    )
    return result.num_workers


def _is_default(name: str, value: Any) -> bool:
    default = _TORCH_INIT.parameters[name].default
    if value is default:
        return True
    simple = (bool, int, float, str)
    return isinstance(value, simple) and isinstance(default, simple) and value == default


def _public_signature() -> inspect.Signature:
    """torch's parameters, in torch's order, then fastload's keyword-only options."""
    own = inspect.signature(DataLoader.__init__).parameters
    torch_params = list(_TORCH_INIT.parameters.values())
    extra = [p for name, p in own.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return _TORCH_INIT.replace(parameters=[*torch_params, *extra])


# What help(), IDEs that introspect at run time and inspect.signature() show: the installed
# torch's parameters exactly, whatever its version, followed by fastload's own.
DataLoader.__init__.__signature__ = _public_signature()  # type: ignore[attr-defined]
