"""``fastload.DataLoader``: torch's DataLoader, with fastload's options, over one of two paths.

The loader holds what it was given and nothing derived: torch's attributes are the user's
arguments (``dataset``, ``collate_fn``, ``sampler``, ...) and each fastload option is an
attribute under its own name. What the loader does is derived from them on first use
(:func:`~fastload.loader.plan.plan_loader`) into a delivery path,
:class:`~fastload.loader.workers.WorkerPath` or
:class:`~fastload.loader.executing.ExecutorPath`, and derived again whenever one of them is
set. This is what lets frameworks that rebuild a loader from its attributes or its recorded
arguments (Lightning, to add a ``DistributedSampler``) get a correct fastload loader back:
nothing is applied twice, the new sampler is the one read, and the options are kept.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

# torch's worker loop seeds numpy.random in every worker. numpy >= 2 imports that submodule
# lazily, and importing it for the first time inside a forked worker has crashed workers here
# (KeyError in importlib's module lock). Importing it once in the parent removes that hazard.
import numpy.random  # noqa: F401
import torch.utils.data

from fastload.accelerate import Acceleration
from fastload.autotune import AutotuneResult, autotune, choose_worker_type
from fastload.checks import differences
from fastload.devices import resolve_device
from fastload.loader.delivery import EpochKeys, keyed_epoch
from fastload.loader.executing import ExecutorPath
from fastload.loader.plan import ExecutorPlan, WorkerPlan, plan_loader
from fastload.loader.workers import WorkerPath
from fastload.options import DEPRECATED, NAMES, LoaderOptions, renamed

__all__ = ["STATE_FORMAT", "DataLoader"]

T_co = TypeVar("T_co", covariant=True)

_TORCH_INIT = inspect.signature(torch.utils.data.dataloader.DataLoader.__init__)
# what a delivery path is derived from: setting one of these derives it again
_PLANNED_FROM = frozenset(
    {*(n for n in _TORCH_INIT.parameters if n != "self"), *NAMES, "multiprocessing_context"}
)
STATE_FORMAT = 1  # of state_dict()
log = logging.getLogger("fastload")


class DataLoader(torch.utils.data.dataloader.DataLoader[T_co]):
    """A drop-in ``torch.utils.data.DataLoader`` that can also deliver batches on a CUDA device.

    Every parameter of the installed torch's ``DataLoader`` is accepted in the same order, with
    the same defaults, and passed to torch unchanged. With none of fastload's own options set,
    the loader *is* torch's: same batches, same order for the same ``generator``, same errors;
    the one difference on by default is per-sample seeding, for fastload's own datasets only
    (their random transforms draw from a stream per sample, not per worker).
    fastload's options are keyword-only and come after torch's. The loader's attributes are
    what it was given (``loader.dataset`` is your dataset, ``loader.collate_fn`` your collate
    function or torch's default); what fastload runs is :attr:`plan`, and
    :func:`fastload.explain` says it in words.

    ``num_workers="auto"`` (fastload's only extension of a torch parameter) measures which
    worker count loads fastest with these very arguments (:func:`fastload.autotune.autotune`,
    cached on disk), passes that int to torch, and logs the choice on the ``fastload`` logger.
    When the workers mostly wait (on network storage, say) and ``prefetch_factor`` is not
    given, it also sets the ``prefetch_factor`` that autotune measured to beat torch's default.
    An empty dataset has nothing to measure: it gets 0 workers, and torch's empty epochs.

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
        batch_transforms: Batch ops (``fastload.gpu``) applied to each batch's images, and to
            its labels when the batch is ``(images, labels, ...)``; of a dict batch (dict
            samples, as Hugging Face pipelines make them), to its largest 4-D tensor and its
            ``"labels"`` (else ``"label"``). With a CUDA ``device`` they
            run on the prefetcher's side stream right after the copy, overlapping the training
            step; otherwise they run in the worker processes, after collating (or, with a
            batch executor, on the batches it delivers, the leading ones folded into it).
        channels_last: Deliver 4-D images (of a dict batch, its largest 4-D tensor) in
            channels-last memory format.
        backend: Who executes the dataset's pipeline: ``None`` (default), ``"auto"``, or any
            name in ``fastload.backends.names()`` (``fastload.backends.choices()`` lists them
            all). ``None`` and ``"auto"`` mean the same: fastload chooses. That is the dataset
            itself, in torch's worker processes, with the backend it was made with (a fastload
            dataset made with ``backend="auto"`` decodes with the first usable per-sample
            decoder; an executor, if it was made with one); with a CUDA ``device``, the GPU
            executor instead when it runs the whole pipeline with the same draws.
            ``fastload.explain`` names the backend chosen. A per-sample decoder's name
            (``"turbojpeg"``, ``"opencv"``, ``"pillow"``, ...): the workers decode with it
            instead of the dataset's (they read a copy of the dataset that shares its samples
            and ``bad_files``). A batch executor's name (``"dali"``, ``"nvimgcodec"``): see
            "Batch executors" below.
        accelerate: Run the dataset's unchanged torchvision pipeline fastload's way
            (:mod:`fastload.accelerate`): for a ``torchvision.datasets.ImageFolder`` (or a
            fastload dataset) whose ``transform`` is made of ops fastload reproduces, the
            geometry is fused with decoding, with torchvision's own draws, and the conversion
            and ``Normalize`` run on whole uint8 batches (on the device's side stream with a
            CUDA ``device``, else after collating). The batches have the dtype, range and
            shape the transform gives; the workers read fastload's copy of the dataset (same
            samples, classes and ``target_transform``), ``loader.dataset`` stays yours.
            Anything fastload cannot reproduce keeps the pipeline unchanged and is named once
            on the ``fastload`` logger; :func:`fastload.explain` says what runs where.
            ``"auto"`` (default): on with a CUDA ``device``, off otherwise. ``True``: on.
            ``False``: never; the loader is torch's. (``None`` is the old spelling of
            ``"auto"``.)
        seeding: Where the per-sample transforms draw their random numbers. ``"sample"``:
            each sample from its own stream, derived from the epoch's seed and its position in
            the epoch (:mod:`fastload.sampling`), whatever worker loads it; the same seed then
            gives the same batches for any ``num_workers``, and a resumed epoch
            (:meth:`load_state_dict`) the same pixels. ``"worker"``: torch's behaviour, one
            stream per worker process. ``"auto"`` (default): ``"sample"`` for a fastload
            dataset, ``"worker"`` for any other, accelerated or not, so that a swapped
            torchvision dataset draws the same crops as stock for the same seed. A dataset
            that fastload neither made nor translated always draws torch's way.
        worker_type: ``"process"`` (default): the ``num_workers`` workers are torch's worker
            processes. ``"thread"``: they are threads of this process
            (:mod:`fastload.loader.threads`), each making whole batches as a worker process
            does, with nothing pickled or sent through shared memory; the same batches as the
            processes give for the same ``generator``. Threads need each sample's own random
            stream (a fastload dataset, or ``accelerate=True`` with ``seeding="sample"``) and
            refuse a ``worker_init_fn``, an ``IterableDataset`` and a batch executor
            ``backend``, naming which. Code that may draw runs under one lock with the
            sample's streams swapped in (:mod:`fastload.sampling.drawing`), so a transform run as
            written holds the others back while it runs; and draws the training loop itself
            makes meanwhile from torch's CPU, Python's or numpy's global stream can land among
            a sample's (CUDA's are apart; give such draws a ``torch.Generator`` of their own).
            ``"auto"``: both kinds measured in turns at the worker count
            (:func:`fastload.autotune.choose_worker_type`; with ``num_workers="auto"``, at
            the count autotune chose), and threads kept only when faster beyond the noise;
            processes, unmeasured, without workers, where threads cannot run the loader or
            where the dataset is empty.
            The answer is cached as autotune's are; the loader then holds the kind chosen,
            and :attr:`worker_choice` (and :func:`fastload.explain`) says why.
        gpu_transforms: The old name of ``batch_transforms`` (a ``FutureWarning``).
        **kwargs: torch's keyword parameters (``shuffle``, ``num_workers``, ...).

    Batch executors (``backend="dali"``, ``"nvimgcodec"``, or a dataset made with one): no
    worker processes start; the executor's threads read, decode and transform whole batches in
    their place (:mod:`fastload.backends.executor`). The dataset must be a
    ``fastload.ImageFolder`` or ``ImageList`` whose ``transform`` is made of
    ``fastload.transforms`` ops. ``num_workers`` sets the thread count (``max(1,
    num_workers)``) and ``prefetch_factor`` how many batches are decoded ahead (default 2); a
    ``collate_fn`` of your own or a ``worker_init_fn`` would not run, so they are refused.
    Under ``torch.distributed``, when the loader samples with what ``shuffle=`` makes, each
    rank reads its own shard (a ``DistributedSampler``, reshuffled every epoch, and
    ``len(loader)`` counts this rank's batches). The worker path does not shard on its own,
    as torch's loader does not: pass a ``DistributedSampler`` (frameworks such as Lightning
    put one in).

    Raises:
        ValueError: A bad value for one of fastload's options (the message shows the value
            and the valid choices); torch's own checks raise torch's exceptions.
        RuntimeError: A CUDA ``device`` on a machine where torch sees no CUDA device.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # fastload's options (their names, defaults and checks: fastload.options) are
        # keyword-only; the rest is torch's. The public signature (below) lists both.
        given = {name: kwargs.pop(name) for name in (*NAMES, *DEPRECATED) if name in kwargs}
        options = LoaderOptions(**renamed(given))
        settled = _settle(args, kwargs, options, type(self))
        super().__init__(*settled.args, **settled.kwargs)
        # each option under its own name, as given (a framework that rebuilds the loader from
        # its attributes passes them back)
        for name in NAMES:
            setattr(self, name, getattr(settled.options, name))
        self._autotuned = settled.autotuned
        self._worker_choice = settled.worker_choice
        self._path()  # planned now, so that a bad combination fails here, not at a batch

    @property
    def worker_choice(self) -> str | None:
        """How ``worker_type="auto"`` was settled into the ``worker_type`` this loader holds
        (``None``: it was given)."""
        return self.__dict__.get("_worker_choice")

    def options(self) -> LoaderOptions:
        """fastload's options as this loader holds them now."""
        return LoaderOptions(**{name: getattr(self, name) for name in NAMES})

    # ------------------------------------------------------------ what runs

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _PLANNED_FROM:
            self.__dict__.pop("_delivery", None)  # derived again on next use

    def _path(self) -> WorkerPath | ExecutorPath:
        path = self.__dict__.get("_delivery")
        if path is None:
            plan = plan_loader(self, self.options())
            path = (
                ExecutorPath(self, plan)
                if isinstance(plan, ExecutorPlan)
                else WorkerPath(self, plan)
            )
            # Set past __setattr__: it is derived, and a framework that records assignments to
            # replay them on a rebuilt loader (Lightning) must not carry it over to the new one.
            object.__setattr__(self, "_delivery", path)
        return path

    @property
    def plan(self) -> WorkerPlan | ExecutorPlan:
        """What this loader runs: the dataset read, the batch ops, the backend, the device."""
        return self._path().plan

    @property
    def acceleration(self) -> Acceleration:
        """What ``accelerate`` did to the dataset's pipeline (``str()`` describes it)."""
        return self.plan.acceleration

    @property
    def executor(self) -> Any:
        """The batch executor that replaces the workers, or ``None`` (made on first use)."""
        path = self._path()
        return path.executor if isinstance(path, ExecutorPath) else None

    @property
    def gpu_transforms(self) -> Callable[..., Any] | None:
        """The old name of :attr:`batch_transforms`."""
        return self.options().batch_transforms

    @property
    def _is_accelerate_prepared(self) -> bool:
        # Hugging Face Accelerate's prepare() asks every loader this first, then rebuilds it
        # as torch's DataLoader from its dataset and batch sampler: say what that would lose.
        prepared = bool(self.__dict__.get("_accelerate_prepared", False))
        lost = [] if prepared else _lost_to_torch(self.plan)
        if lost and not self.__dict__.get("_warned_accelerate"):
            self.__dict__["_warned_accelerate"] = True
            warnings.warn(
                f"accelerate's prepare() rebuilds this fastload.DataLoader as torch's "
                f"DataLoader, which loses {', '.join(lost)}; prepare it with "
                f"fastload.integrations.hf_accelerate.prepare(accelerator, ...) instead",
                UserWarning,
                stacklevel=3,
            )
        return prepared

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        self.__dict__["_accelerate_prepared"] = value

    def check_worker_number_rationality(self) -> None:
        # the worker path's own torch loader checks the processes it starts; an executor's
        # threads are not processes, so this loader warns about none
        return

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._path().batches()

    def set_epoch(self, epoch: int) -> None:
        """Pass ``epoch`` to the sampler's ``set_epoch`` (``DistributedSampler``, Accelerate's
        seedable sampler), as Accelerate's loaders pass it on; a sampler without one (torch's
        ``RandomSampler``) is left as it is."""
        for sampler in (self.sampler, getattr(self.batch_sampler, "sampler", None)):
            setter = getattr(sampler, "set_epoch", None)
            if callable(setter):
                setter(epoch)
                return

    def next_epoch_keys(self) -> EpochKeys:
        """The next epoch's batches of indices (or the rest of the epoch a
        :meth:`load_state_dict` resumes), drawn as a pass over this loader draws them, for
        running the epoch elsewhere (:mod:`fastload.ray`); nothing is loaded.

        Under ``seeding="sample"`` each index is a :class:`~fastload.sampling.SampleKey`
        carrying its sample's seed and each batch a ``KeyedBatch`` carrying the batch's, so
        that whoever loads them draws what this loader's workers would. The epoch counts as
        started; whoever delivers the batches reports each (``EpochKeys.delivered``) and the
        end (``finished``), so that :meth:`state_dict` says where the epoch stands, as for a
        pass over the loader.

        Raises:
            TypeError: The dataset is an ``IterableDataset``, or a batch executor runs the
                loader (it draws its own epoch).
        """
        path = self._resumable()
        if not isinstance(path, WorkerPath) or path.epochs is None:
            raise TypeError(
                f"next_epoch_keys needs a loader whose workers read the dataset; the "
                f"{self.plan.backend} executor draws its own epoch"
            )
        return keyed_epoch(path.epochs, self.generator)

    def __len__(self) -> int:
        return len(self._path())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_delivery", None)  # made again in the process that iterates
        return state

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
        path = self._resumable()
        return {
            "format": STATE_FORMAT,
            "loader": self._identity(),
            "num_workers": self.num_workers,
            "bad_files": dict(getattr(path.plan.dataset, "bad_files", None) or {}),
            **path.state(),
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
        self._resumable()
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"not a fastload.DataLoader state (format {STATE_FORMAT} expected, got {got!r})"
            )
        mine = self._identity()
        if getattr(self.sampler, "elastic", False):
            # a ShardSampler resumes under another world size: fewer or more batches per rank
            mine.pop("batches per epoch")
        theirs = state["loader"]
        differ = differences(theirs, mine, there="in the state")
        if differ:
            raise ValueError(
                "this state is of a different loader, so it cannot resume this one: "
                + "; ".join(differ)
            )
        if self._autotuned and isinstance(self.plan, WorkerPlan):
            self.num_workers = int(state["num_workers"])
        path = self._path()
        bad_files = getattr(path.plan.dataset, "bad_files", None)
        if isinstance(bad_files, dict):
            bad_files.update(state["bad_files"])
        path.load(state)

    def _resumable(self) -> WorkerPath | ExecutorPath:
        path = self._path()
        if path.epochs is None:
            raise TypeError(
                f"the dataset is an IterableDataset ({type(self.dataset).__name__}): it has no "
                "sampler whose place can be saved; state_dict needs a map-style dataset"
            )
        return path

    def _identity(self) -> dict[str, Any]:
        """What must match for a state to resume this loader."""
        plan = self.plan
        return {
            "dataset": type(self.dataset).__name__,
            "dataset length": len(self.dataset),  # type: ignore[arg-type]
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "sampler": type(self.sampler).__name__,
            "batches per epoch": len(self),
            "backend": plan.backend,
            "seeding": "sample" if plan.keyed else "worker",
            "generator": "given" if self.generator is not None else "torch's global",
        }


def _lost_to_torch(plan: WorkerPlan | ExecutorPlan) -> list[str]:
    """What a torch DataLoader built from this loader's dataset and batch sampler would not
    run."""
    lost = []
    if isinstance(plan, ExecutorPlan):
        lost.append(f"the {plan.backend} executor")
    elif plan.decoder is not None:
        lost.append(f"decoding with {plan.decoder}")
    if plan.acceleration.accelerated:
        lost.append("the accelerated pipeline")
    if plan.batch_ops is not None:
        lost.append(f"the batch ops ({plan.batch_ops!r})")
    if plan.keyed:
        lost.append("per-sample seeding and state_dict")
    return lost


@dataclasses.dataclass(frozen=True)
class _Settled:
    """The constructor's arguments with fastload's choices for them made."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: LoaderOptions
    autotuned: bool  # num_workers="auto" was measured
    worker_choice: str | None  # how worker_type="auto" was settled; None: it was given


def _settle(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: LoaderOptions,
    loader_class: Callable[..., Any],
) -> _Settled:
    """torch's arguments with fastload's defaults for them settled: ``num_workers="auto"``
    measured into an int, ``worker_type="auto"`` into ``"process"`` or ``"thread"``, and
    ``pin_memory=True`` for a CUDA device when not given."""
    device = resolve_device(options.device)
    try:
        given = dict(_TORCH_INIT.bind(None, *args, **kwargs).arguments)
    except TypeError:  # torch raises its own error for these arguments
        return _Settled(args, kwargs, options, False, None)
    given.pop("self")
    autotuned = given.get("num_workers") == "auto"
    kind: tuple[str, str] | None = None
    if autotuned:
        result = _autotuned_workers(given, options, loader_class)
        given["num_workers"] = result.num_workers
        if result.prefetch_factor is not None and given.get("prefetch_factor") is None:
            given["prefetch_factor"] = result.prefetch_factor
        if result.worker_type is not None:  # worker_type="auto", answered with the count
            kind = result.worker_type, f"with num_workers='auto': {result.reason}"
    if options.worker_type == "auto" and kind is None:
        kind = _worker_type_at(given, options, loader_class)
    if device is not None and device.type == "cuda" and "pin_memory" not in given:
        given["pin_memory"] = True
    if kind is None:
        return _Settled((), given, options, autotuned, None)
    log.info("worker_type='auto': %s workers (%s)", kind[0], kind[1])
    settled = dataclasses.replace(
        options, worker_type="thread" if kind[0] == "thread" else "process"
    )
    return _Settled((), given, settled, autotuned, f"worker_type='auto': {kind[1]}")


def _worker_type_at(
    arguments: dict[str, Any], options: LoaderOptions, loader_class: Callable[..., Any]
) -> tuple[str, str]:
    """Threads against processes at the count given, for a loader built with these
    arguments (cached as autotune's answers are); processes without workers.

    Returns:
        The kind, and why.
    """
    workers = arguments.get("num_workers", 0)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers <= 0:
        # nothing to choose between (torch's own checks name a bad count)
        return "process", f"num_workers={workers!r}, so no kind of worker to choose"
    result = choose_worker_type(
        arguments["dataset"],
        batch_size=arguments.get("batch_size", 1),
        num_workers=workers,
        loader=loader_class,
        loader_kwargs=_measured_arguments(arguments, options),
    )
    assert result.worker_type is not None  # choose_worker_type always answers it
    source = "cached" if result.cached else "measured" if result.table else "not measured"
    return result.worker_type, f"{source}: {result.reason}"


def _measured_arguments(arguments: dict[str, Any], options: LoaderOptions) -> dict[str, Any]:
    """What a measured loader is built with besides its dataset, batch size and workers: the
    arguments and fastload options given other than their defaults."""
    skip = ("dataset", "batch_size", "num_workers", "persistent_workers")
    others = {
        k: v
        for k, v in arguments.items()
        if k not in skip and not _is_default(k, v)  # spelled-out defaults change nothing
    }
    mine = {name: getattr(options, name) for name in NAMES}
    defaults = LoaderOptions()
    changed = {k: v for k, v in mine.items() if v != getattr(defaults, k)}
    return {**others, **changed}


def _autotuned_workers(
    arguments: dict[str, Any], options: LoaderOptions, loader_class: Callable[..., Any]
) -> Any:
    """Run fastload.autotune for a loader built with these arguments; log and return its
    result (the worker count, a ``prefetch_factor`` when one beat the default, and with
    ``worker_type="auto"`` the kind of worker). An empty dataset gets no workers, unmeasured."""
    dataset = arguments["dataset"]
    batch_size = arguments.get("batch_size", 1)
    if _empty(dataset):
        # torch runs it (an epoch of no batches); nothing to measure, no worker to start
        result = AutotuneResult(0, 0.0, [], "the dataset is empty, so there is nothing to load")
    else:
        if batch_size is None:
            raise ValueError("num_workers='auto' needs a batch_size to measure with")
        result = autotune(
            dataset,
            batch_size=batch_size,
            loader_kwargs=_measured_arguments(arguments, options),
            loader=loader_class,
        )
    source = "cached" if result.cached else "measured" if result.table else "not measured"
    log.info(
        "num_workers='auto': %d workers (%s, %.0f images/s): %s",
        result.num_workers,
        source,
        result.images_per_sec,
        result.reason,
    )
    return result


def _empty(dataset: Any) -> bool:
    try:
        return len(dataset) == 0
    except TypeError:  # no length: an IterableDataset
        return False


def _is_default(name: str, value: Any) -> bool:
    default = _TORCH_INIT.parameters[name].default
    if value is default:
        return True
    simple = (bool, int, float, str)
    return isinstance(value, simple) and isinstance(default, simple) and value == default


def _public_signature() -> inspect.Signature:
    """torch's parameters, in torch's order, then fastload's keyword-only options (with their
    defaults, from :class:`~fastload.options.LoaderOptions`), then their deprecated names."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type)
        for f in dataclasses.fields(LoaderOptions)
    ]
    old = [inspect.Parameter(name, keyword, default=None) for name in DEPRECATED]
    return _TORCH_INIT.replace(parameters=[*_TORCH_INIT.parameters.values(), *own, *old])


# What help(), IDEs that introspect at run time and inspect.signature() show: the installed
# torch's parameters exactly, whatever its version, followed by fastload's own.
DataLoader.__init__.__signature__ = _public_signature()  # type: ignore[attr-defined]
