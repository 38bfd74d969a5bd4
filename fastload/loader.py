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
from fastload.gpu.stage import BatchStage, CollateThenStage, DeviceStage, SeedTag
from fastload.gpu.transforms import Compose as GpuCompose
from fastload.prefetch import CUDAPrefetcher
from fastload.sampling import EpochSampler, Seeding
from fastload.skipping import SkipCollate, SkipReport

__all__ = ["DataLoader", "LoaderPlan", "plan_loader"]

T_co = TypeVar("T_co", covariant=True)

_TORCH_INIT = inspect.signature(torch.utils.data.DataLoader.__init__)
# torch's options for worker processes: an executor has none, so they go with them
_WORKER_ONLY = ("persistent_workers", "multiprocessing_context")
_SEEDING = ("sample", "worker")
STATE_FORMAT = 1  # of state_dict()
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
        autotuned: ``num_workers="auto"`` chose the worker count.
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
    autotuned: bool = False


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
    seeding: str = "sample",
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
        seeding: The ``seeding`` option.
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
    if seeding not in _SEEDING:
        raise ValueError(f"seeding={seeding!r} is not valid; valid: 'sample', 'worker'")
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
    autotuned = given.get("num_workers") == "auto"
    if autotuned:
        # fastload's own value for a torch parameter: measure, then hand torch an int
        given["num_workers"], prefetch = _autotuned_workers(
            given,
            loader_class,
            device=device,
            gpu_transforms=batch_ops,
            channels_last=channels_last,
            backend=backend,
            accelerate=False,  # the dataset is translated already
        )
        if prefetch is not None and given.get("prefetch_factor") is None:
            given["prefetch_factor"] = prefetch
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
            autotuned=autotuned,
        )
    decoder = None
    if backend is not None:
        decoder = backend
        given["dataset"] = _decoding_with(dataset, backend)
    if target is not None and target.type == "cuda" and "pin_memory" not in given:
        given["pin_memory"] = True
    return LoaderPlan(
        (),
        given,
        target,
        stage,
        decoder=decoder,
        acceleration=acceleration,
        batch_ops=batch_ops,
        autotuned=autotuned,
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
    When the workers mostly wait (on network storage, say) and ``prefetch_factor`` is not
    given, it also sets the ``prefetch_factor`` that autotune measured to beat torch's default.

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
        seeding: Where the per-sample transforms of a fastload dataset draw their random
            numbers. ``"sample"`` (default): each sample from its own stream, derived from the
            epoch's seed and its position in the epoch (:mod:`fastload.sampling`), whatever
            worker loads it; the same seed then gives the same batches for any
            ``num_workers``, and a resumed epoch (:meth:`load_state_dict`) the same pixels.
            ``"worker"``: torch's behaviour, one stream per worker process. Datasets that are
            not fastload's always draw torch's way.
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
        seeding: Seeding = "sample",
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
            seeding=seeding,
            loader_class=type(self),
        )
        super().__init__(*plan.args, **plan.kwargs)
        self.seeding = seeding
        self._autotuned = plan.autotuned
        self._epochs: EpochSampler | None = None
        if not isinstance(self.dataset, torch.utils.data.IterableDataset):
            batched = self.batch_sampler is not None
            indices: Any = self.batch_sampler if batched else self.sampler
            self._epochs = EpochSampler(
                indices,
                batched=batched,
                generator=self.generator,
                sampler=self.sampler,
                keyed=seeding == "sample" and getattr(self.dataset, "sample_keys", False),
            )
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
        self._device_stage: DeviceStage | None = None
        self._skipping = False
        self._executor_stage: BatchStage | None = None
        if plan.executor is not None:
            self._start_executor(plan)
            return
        cuda = plan.device is not None and plan.device.type == "cuda"
        # The batch stage runs on the prefetch stream for a CUDA device, else in the workers.
        if cuda:
            self._device_stage = None if plan.stage is None else DeviceStage(plan.stage)
        elif plan.stage is not None:
            self.collate_fn = CollateThenStage(self.collate_fn, plan.stage)
        self._skipping = getattr(self.dataset, "on_error", None) == "skip"
        if self._skipping:
            # A fastload dataset that skips unreadable images returns markers in their place:
            # drop them before collating, and report them in the main process.
            self.collate_fn = SkipCollate(self.collate_fn, batched=self.batch_sampler is not None)
        if self._device_stage is not None and self._epochs is not None and self._epochs.keyed:
            # the batch's seed rides along from the worker to the stage after the copy
            self.collate_fn = SeedTag(self.collate_fn)

    @property
    def _index_sampler(self) -> Any:
        # What torch's iterators read indices from (torch's own property, the one hook they
        # share): the batch sampler, read through the EpochSampler that records and resumes.
        epochs = self.__dict__.get("_epochs")
        if epochs is None:
            return super()._index_sampler
        return epochs

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
        epochs = self._epochs
        if epochs is None:
            return self._batches()
        token = epochs.begin()
        if epochs.resuming and self.generator is None:
            # A resumed epoch replays its sampler from the recorded state; what starting the
            # iterator draws from torch's global stream (torch's worker seed) is not drawn by
            # the run it continues, so that stream is put back as it was.
            with torch.random.fork_rng(devices=[]):
                batches = self._batches()
        else:
            batches = self._batches()
        if isinstance(batches, _Counting):  # torch's own iterator, handed out as it is
            batches.counter = _Counter(epochs, token)
            return batches
        return _Delivered(batches, epochs, token)

    def _get_iterator(self) -> Any:
        # torch's iterators (its own hook for making them), counting what they hand out
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessingDataLoaderIter(self)

    def _batches(self) -> Iterator[Any]:
        if self.executor is not None:
            return self._executor_epoch()
        batches: Iterator[Any] = super().__iter__()
        if isinstance(self.collate_fn, SeedTag):
            assert self._device_stage is not None
            batches = self._device_stage.untag(batches)
        if self._skipping:
            dropped = self._epochs.drop if self._epochs is not None else None
            batches = SkipReport(batches, self.dataset, on_drop=dropped)
        if self.device is None or self.device.type == "cpu":
            return batches
        prefetcher = CUDAPrefetcher(
            batches, device=self.device, depth=self.device_prefetch, transform=self._device_stage
        )
        return iter(prefetcher)  # started: `for batch in loader` calls iter() only on the loader

    # ------------------------------------------------------------ resuming

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands: after ``k`` batches of an epoch, or between epochs.

        A loader built the same way (in this process or another) continues from it with
        :meth:`load_state_dict`: the rest of that epoch, the same samples in the same order,
        then the epochs the uninterrupted loader would have given. The state is plain data
        (ints, strings, lists, dicts, tensors): ``torch.save`` it and read it back with
        ``weights_only=True``. It holds the loader's ``generator`` state, the epoch's starting
        random state, the sampler's ``epoch``, the ``num_workers`` chosen by
        ``num_workers="auto"`` and the files ``on_error="skip"`` recorded so far.

        Raises:
            TypeError: The dataset is an ``IterableDataset``: it has no sampler to resume.
        """
        epochs = self._resumable()
        return {
            "format": STATE_FORMAT,
            "loader": self._identity(),
            "num_workers": self.num_workers,
            "executor_epochs": self._epoch,
            "bad_files": dict(getattr(self.dataset, "bad_files", None) or {}),
            "epochs": epochs.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`: the next ``iter(loader)`` resumes where it was.

        Call it before iterating. With ``num_workers="auto"``, the recorded worker count is
        used.

        Raises:
            ValueError: The state is not a fastload loader state, or is of a loader that
                differs from this one (another dataset length, batch size, backend, ...): the
                message names each difference.
            TypeError: The dataset is an ``IterableDataset``.
        """
        epochs = self._resumable()
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"not a fastload.DataLoader state (format {STATE_FORMAT} expected, got {got!r})"
            )
        mine = self._identity()
        theirs = state["loader"]
        differ = [
            f"{key} {theirs.get(key)!r} in the state, {mine[key]!r} here"
            for key in mine
            if theirs.get(key) != mine[key]
        ]
        if differ:
            raise ValueError(
                "this state is of a different loader, so it cannot resume this one: "
                + "; ".join(differ)
            )
        if self._autotuned and self.executor is None:
            self.num_workers = int(state["num_workers"])
        self._epoch = int(state["executor_epochs"])
        bad_files = getattr(self.dataset, "bad_files", None)
        if isinstance(bad_files, dict):
            bad_files.update(state["bad_files"])
        epochs.load(state["epochs"])

    def _resumable(self) -> EpochSampler:
        if self._epochs is None:
            raise TypeError(
                f"the dataset is an IterableDataset ({type(self.dataset).__name__}): it has no "
                "sampler whose place can be saved; state_dict needs a map-style dataset"
            )
        return self._epochs

    def _identity(self) -> dict[str, Any]:
        """What must match for a state to resume this loader."""
        dataset = self.dataset
        return {
            "dataset": type(dataset).__name__,
            "dataset length": len(dataset),  # type: ignore[arg-type]
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "sampler": type(self.sampler).__name__,
            "batches per epoch": len(self),
            "backend": self.backend or getattr(dataset, "backend", None),
            "seeding": self.seeding if self._epochs and self._epochs.keyed else "worker",
            "generator": "given" if self.generator is not None else "torch's global",
        }

    def _executor_epoch(self) -> Iterator[Any]:
        if self._auto_shard:
            self.sampler.set_epoch(self._epoch)  # type: ignore[attr-defined]
        self._epoch += 1
        # one draw per epoch, as torch draws its workers' base seed
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        assert self.batch_sampler is not None
        batches = self.executor.epoch(
            iter(self._index_sampler),
            seed=seed,
            on_drop=self._epochs.drop if self._epochs is not None else None,
            target_transform=getattr(self.dataset, "target_transform", None),
            stage=self._executor_stage,
        )
        return batches


@dataclass(frozen=True)
class _Counter:
    """Tells the loader's :class:`EpochSampler` what pass ``token`` hands out."""

    epochs: EpochSampler
    token: int

    def __call__(self, batch: Any) -> Any:
        self.epochs.deliver(self.token)
        return batch

    def end(self) -> None:
        self.epochs.finish(self.token)


class _Counting:
    """Mixed into torch's iterators: each batch handed out is counted (``state_dict``)."""

    counter: _Counter | None = None

    def __next__(self) -> Any:
        try:
            batch = super().__next__()  # type: ignore[misc]
        except StopIteration:
            if self.counter is not None:
                self.counter.end()
            raise
        return batch if self.counter is None else self.counter(batch)


# Subclasses of torch's two iterators, under their names (torch's profiler labels use them), so
# that ``iter(loader)`` on the CPU still is torch's own iterator.
class _SingleProcessDataLoaderIter(
    _Counting, torch.utils.data.dataloader._SingleProcessDataLoaderIter
):
    pass


class _MultiProcessingDataLoaderIter(
    _Counting, torch.utils.data.dataloader._MultiProcessingDataLoaderIter
):
    pass


class _Delivered:
    """The user's side of a pass that is not torch's iterator: counts what it hands out."""

    def __init__(self, batches: Iterator[Any], epochs: EpochSampler, token: int) -> None:
        self._batches, self._counter = batches, _Counter(epochs, token)

    def __iter__(self) -> _Delivered:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._batches)
        except StopIteration:
            self._counter.end()
            raise
        return self._counter(batch)

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # the wrapped iterator's own (close, ...)
        if name.startswith("_"):  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._batches, name)


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
) -> tuple[int, int | None]:
    """Run fastload.autotune for a loader built with these arguments; log and return the choice
    (the worker count, and a ``prefetch_factor`` when one beat the default)."""
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
    return result.num_workers, result.prefetch_factor


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
