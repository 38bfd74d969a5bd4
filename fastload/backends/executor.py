"""What every batch executor shares: the parts that are not about its library.

A batch executor (``kind = "executor"``: DALI, and the next ones) replaces torch's worker
processes under ``fastload.DataLoader``. fastload keeps what decides the result, so that
changing the backend does not change it, and this module does it once for all of them:

* the order: the loader's batch sampler picks each batch's indices (``shuffle``, ``drop_last``,
  ``sampler``, ``generator``, ``DistributedSampler`` shards);
* the reading: reader threads read each batch's files and check their headers (format from
  the content, ``max_pixels``, truncated JPEGs) with the error policy of every backend;
* the geometry: the dataset's ``fastload.transforms`` chain is planned per sample with
  torchvision's draws, from each sample's own stream (its ``SampleKey`` seed, as on every
  backend) or else from the epoch's stream, into a region and an output size;
* the leading batch ops an executor can run itself are folded into it (:func:`fold_batch_ops`),
  their draws made by the ops' own ``make_params``;
* the faults: a batch the library fails on is re-decoded file by file to name the file, which
  is raised or (``on_error="skip"``) dropped, and the queued batches are fed again.

An executor's library work is an :class:`Engine`: build its graph, take a planned batch, hand
back a tensor. :class:`BatchExecutor` drives an engine through epochs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fastload import errors
from fastload.backends.base import check_header
from fastload.gpu.stage import ops_seeded
from fastload.image import ImageInfo
from fastload.resampling import View
from fastload.sampling import sample_seed, seed_both
from fastload.system import trim_heap
from fastload.transforms import CenterCrop, TransformSplit

__all__ = [
    "BatchExecutor",
    "BatchFailed",
    "Engine",
    "ExecutorOptions",
    "Folded",
    "Planned",
    "Translation",
    "fold_batch_ops",
    "plan_views",
    "read_batch",
    "translate",
]


# ---------------------------------------------------------------- what the executor runs


@dataclass(frozen=True)
class Translation:
    """What an executor does per sample, read from a dataset's transform.

    Attributes:
        plan: Turns the whole image's view into the wanted one (``None``: keep the image).
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        antialias: Filter when shrinking.
        may_pad: The plan can reach outside the image (a ``CenterCrop`` larger than it).
    """

    plan: Callable[[View], View] | None
    interpolation: str = "bilinear"
    antialias: bool = True
    may_pad: bool = False


def translate(split: TransformSplit, backend: str) -> Translation:
    """Read a dataset's split transform as an executor's per-sample work.

    Args:
        split: The dataset's ``transform_split``.
        backend: The executor's name, for the error.

    Raises:
        ValueError: The transform holds an op an executor cannot run (named in the message,
            with what to do instead).
    """
    if split.pil is not None or split.after:
        op = split.pil if split.pil is not None else split.after[0]
        raise ValueError(
            f"the {backend} backend cannot run {op!r}: it runs fastload.transforms ops "
            "(RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Compose of them); "
            "run batch ops as batch_transforms=fastload.gpu..., or use a CPU backend for this "
            "transform"
        )
    return Translation(
        split.plan,
        interpolation=split.render.get("interpolation", "bilinear"),
        antialias=split.render.get("antialias", True),
        may_pad=any(isinstance(op, CenterCrop) for op in split.fused),
    )


@dataclass(frozen=True)
class Folded:
    """The leading batch ops (``fastload.gpu``) that an executor runs itself.

    Attributes:
        flips: ``fastload.gpu.RandomHorizontalFlip`` ops: each draws its per-sample flips with
            its own ``make_params``, as it would on the batch, and the executor mirrors those
            samples.
        normalize: A ``fastload.gpu.Normalize``, or ``None``.
    """

    flips: tuple[Any, ...] = ()
    normalize: Any = None


def fold_batch_ops(
    ops: Any, *, normalize_dtypes: tuple[torch.dtype, ...] = ()
) -> tuple[Folded, Any]:
    """Split batch ops into what an executor runs and what ``fastload.gpu`` runs after it.

    The leading horizontal flips, and the first normalize whose output dtype is in
    ``normalize_dtypes``, of ``ops`` (one op, or a ``fastload.gpu.Compose``) fold into the
    executor; everything from the first other op on runs on the batch it delivers.

    Returns:
        What folds, and the remaining op (``None``, one op, or a ``Compose``).
    """
    from fastload.gpu import transforms as G

    if ops is None:
        return Folded(), None
    sequence = list(ops.transforms) if type(ops) is G.Compose else [ops]
    flips: list[Any] = []
    normalize = None
    taken = 0
    for op in sequence:
        if type(op) is G.RandomHorizontalFlip:
            flips.append(op)
        elif type(op) is G.Normalize and normalize is None and op.dtype in normalize_dtypes:
            normalize = op
        else:
            break
        taken += 1
    rest = sequence[taken:]
    remainder = None if not rest else rest[0] if len(rest) == 1 else G.Compose(rest)
    return Folded(tuple(flips), normalize), remainder


@dataclass(frozen=True)
class ExecutorOptions:
    """How an executor runs.

    Attributes:
        device: Where batches are delivered: the CPU, or a CUDA device.
        num_threads: The executor's CPU threads (``max(1, num_workers)``).
        prefetch: Batches decoded ahead of the one in use (``prefetch_factor``, default 2).
        batch_size: The largest batch expected (the loader's ``batch_size``); a larger one
            rebuilds the engine's graph.
        pin_memory: Deliver CPU batches in pinned memory (torch's ``pin_memory``).
    """

    device: torch.device
    num_threads: int
    prefetch: int = 2
    batch_size: int = 1
    pin_memory: bool = False


# ---------------------------------------------------------------- reading and planning


@dataclass
class Read:
    """One batch's files, read and checked (in a reader thread).

    Attributes:
        indices: The dataset indices of the batch.
        paths: Their names (file paths, or shard members).
        data: The bytes of each readable file.
        targets: The target of each readable file (before ``target_transform``).
        sizes: The shown (width, height) of each readable file.
        infos: What each readable file's header says.
        good: Positions in ``indices`` of the readable files.
        bad: (path, reason, stage) of the others, the stage one of ``errors.STAGES``.
        views: Each readable file's planned view, when a planner process planned them.
    """

    indices: list[int]
    paths: list[str]
    data: list[np.ndarray] = field(default_factory=list)
    targets: list[Any] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    infos: list[ImageInfo] = field(default_factory=list)
    good: list[int] = field(default_factory=list)
    bad: list[tuple[str, str, str]] = field(default_factory=list)
    views: list[View] | None = None


def shown_size(data: bytes, info: ImageInfo) -> tuple[int, int]:
    """(width, height) as displayed; from the header, or from Pillow for other formats."""
    if info.shown_size is not None:
        return info.shown_size
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def read_batch(dataset: Any, indices: list[int]) -> Read:
    """Read and check the files of one batch of a fastload dataset (a dataset made with
    ``exif_orientation=False`` is read as if every file had orientation 1)."""
    read = Read(indices, [dataset.path(i) for i in indices])
    stored = getattr(dataset, "exif_orientation", True) is False
    for k, path in enumerate(read.paths):
        reading = True
        try:
            data, target = dataset.read_sample(indices[k])
            reading = False
            info = check_header(data, max_pixels=dataset.max_pixels)
            if stored and info.width is not None and info.height is not None:
                info = dataclasses.replace(info, orientation=1)  # the pixels as stored
            size = shown_size(data, info)
        except Exception as exc:
            read.bad.append((path, errors.reason(exc), errors.stage_of(exc, reading=reading)))
            continue
        read.data.append(np.frombuffer(data, dtype=np.uint8))
        read.targets.append(target)
        read.sizes.append(size)
        read.infos.append(info)
        read.good.append(k)
    return read


def plan_views(
    plan: Callable[[View], View] | None,
    sizes: list[tuple[int, int]],
    rng: torch.Tensor,
    seeds: list[int | None] | None = None,
    *,
    python_random: bool = True,
) -> tuple[list[View], torch.Tensor]:
    """Plan each image's view with torchvision's draws from the random state ``rng``, or from
    each sample's own seed.

    The ops draw from torch's global generator (torchvision's draws); ``rng`` (or the sample's
    seed) stands in for it meanwhile, so the user's random stream is untouched.

    Args:
        plan: The dataset's planned ops.
        sizes: Each image's shown (width, height).
        rng: The epoch's random state, drawn from in order.
        seeds: Each sample's seed (``SampleKey.seed``); when every sample has one, each is
            planned from its own seed and ``rng`` is not drawn from.
        python_random: Whether the plan may draw from Python's ``random`` too, which is then
            seeded with each sample's seed as well (``TransformSplit.draws_python``).

    Returns:
        The views, and the random state after the draws (for the next batch).
    """
    views = [View.full(w, h) for w, h in sizes]
    if plan is None:
        return views, rng
    known = [seed for seed in seeds or () if seed is not None]
    if seeds is not None and len(known) == len(seeds):
        # each sample's streams in turn, the caller's put back once (as `seeded`, per batch)
        generator = torch.default_generator
        streams = generator.get_state(), random.getstate() if python_random else None
        planned = []
        try:
            for view, seed in zip(views, known, strict=True):
                if python_random:
                    seed_both(seed)
                else:  # Python's seeding would cost twice what torch's does
                    generator.manual_seed(seed)
                planned.append(plan(view))
        finally:
            generator.set_state(streams[0])
            if streams[1] is not None:
                random.setstate(streams[1])
        return planned, rng
    saved = torch.get_rng_state()
    torch.set_rng_state(rng)
    try:
        views = [plan(v) for v in views]
    finally:
        rng = torch.get_rng_state()
        torch.set_rng_state(saved)
    return views, rng


# The executor's threads this many or more: reading and planning move to processes (half as
# many), since one process's Python cannot plan 20,000 samples/s (see
# benchmarks/executor_cpu_side.py: about 8,000 a core for read, header and plan).
PLANNERS_FROM = 4

_planned_dataset: Any = None  # in a planner process: the dataset it reads


def _start_planner(dataset: Any) -> None:
    global _planned_dataset
    _planned_dataset = dataset


def _read_and_plan(indices: list[int], seeds: list[int | None]) -> Read:
    """In a planner process: read, check and plan a batch; the bytes stay behind (the
    process that decodes reads them again, from the page cache, instead of receiving them)."""
    dataset = _planned_dataset
    read = read_batch(dataset, indices)
    fresh = torch.Generator().get_state()  # drawn from only by a plan without seeds: none
    split = dataset.transform_split
    read.views, _ = plan_views(
        split.plan,
        read.sizes,
        fresh,
        [seeds[k] for k in read.good],
        python_random=split.draws_python,
    )
    read.data = []
    return read


def read_planned(planners: Any, dataset: Any, indices: list[int], seeds: list[int | None]) -> Read:
    """A batch read and planned by a planner process (``planners``), with its bytes read here."""
    read = planners.submit(_read_and_plan, indices, seeds).result()
    read.data = [
        np.frombuffer(dataset.read_sample(indices[k])[0], dtype=np.uint8) for k in read.good
    ]
    return read


@dataclass
class Planned:
    """One batch planned for an engine: everything needed to feed it again after a failure.

    A batch whose files failed the checks under ``on_error="raise"`` is never fed: it carries
    the ``error`` to raise when its turn comes, so earlier batches are still delivered first.

    Attributes:
        paths: The files of the batch.
        targets: Their targets (before ``target_transform``).
        data: The bytes of each file.
        inputs: The engine's per-sample inputs, one list (or one array, the batch its outer
            dimension) per name (``"encoded"`` among them).
        error: The error to raise in this batch's place.
        seed: The batch's seed (``fastload.sampling.KeyedBatch``), if it has one.
    """

    paths: list[str]
    targets: list[Any]
    data: list[np.ndarray]
    inputs: dict[str, Any]
    error: Exception | None = None
    seed: int | None = None

    def keep(self, positions: list[int]) -> Planned:
        """The same batch with only the samples at ``positions``."""
        return Planned(
            [self.paths[k] for k in positions],
            [self.targets[k] for k in positions],
            [self.data[k] for k in positions],
            {name: _take(values, positions) for name, values in self.inputs.items()},
            seed=self.seed,
        )


def _take(values: Any, positions: list[int]) -> Any:
    """The entries at ``positions`` of a per-sample input (a list, or an array per batch)."""
    if isinstance(values, np.ndarray):
        return values[positions]
    return [values[k] for k in positions]


# ---------------------------------------------------------------- the engine


class BatchFailed(Exception):
    """The engine's library failed on a batch (a file it cannot decode, most often).

    Args:
        message: What the library said, in one line.
        positions: The samples it failed on, when the library says (else each file of the
            batch is decoded alone to find them).
    """

    def __init__(self, message: str, *, positions: list[int] | None = None) -> None:
        super().__init__(message)
        self.positions = positions


class Engine(ABC):
    """An executor's library: takes planned batches in order, hands back tensors in order."""

    @abstractmethod
    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, Any]:
        """The per-sample inputs that render each ``view`` (display coordinates) of the file
        whose shown size is ``size`` and whose header says ``info``."""

    @abstractmethod
    def fits(self, batch: int) -> bool:
        """Whether a batch of this size can go to the current graph (or a new one)."""

    @abstractmethod
    def feed(self, inputs: dict[str, Any]) -> None:
        """Queue one batch."""

    @abstractmethod
    def collect(self) -> torch.Tensor:
        """The oldest queued batch, as a tensor on the target device.

        Raises:
            BatchFailed: The library failed on that batch.
        """

    @abstractmethod
    def discard(self, *, grow_to: int = 0) -> None:
        """Drop the graph and what is queued in it (rebuilt on next use).

        Args:
            grow_to: The next graph takes batches of at least this size.
        """

    @abstractmethod
    def drain(self) -> None:
        """Collect and drop what an epoch left early left queued."""

    @abstractmethod
    def decode_alone(self, data: np.ndarray) -> None:
        """Decode one file alone, to find the one a batch failed on.

        Raises:
            ValueError: It cannot be decoded; the message says why.
        """


class BatchExecutor:
    """Runs a fastload dataset through an engine, a batch at a time; owned by one loader.

    Args:
        name: The backend's name (in errors and messages).
        dataset: A ``fastload.ImageList`` or ``fastload.ImageFolder``.
        options: Device, threads and prefetch depth.
        engine: Builds the engine from the translation and the folded ops (called once).
        batch_ops: The loader's ``batch_transforms``; the leading ops the engine runs are
            folded into it, the rest left in :attr:`remaining_ops` for ``fastload.gpu``.
        normalize_dtypes: The output dtypes of a ``Normalize`` the engine can fold.
    """

    def __init__(
        self,
        name: str,
        dataset: Any,
        options: ExecutorOptions,
        engine: Callable[[Translation, Folded], Engine],
        *,
        batch_ops: Any = None,
        normalize_dtypes: tuple[torch.dtype, ...] = (),
    ) -> None:
        self.name, self.dataset, self.options = name, dataset, options
        self.translation = translate(dataset.transform_split, name)
        self.folded, self.remaining_ops = fold_batch_ops(
            batch_ops, normalize_dtypes=normalize_dtypes
        )
        self.engine = engine(self.translation, self.folded)
        self._epoch_token: object | None = None
        self._draws = dataset.transform_split.draws
        self._planners: ProcessPoolExecutor | None = None

    def planners(self, seeds: list[int | None]) -> ProcessPoolExecutor | None:
        """The planner processes for a batch with these sample seeds, when they can plan it
        (every sample has its seed, or the plan draws nothing) and the executor has
        :data:`PLANNERS_FROM` threads or more; started on first use, kept across epochs."""
        if self.options.num_threads < PLANNERS_FROM:
            return None
        if self._draws and any(seed is None for seed in seeds):
            return None  # drawn in order from the epoch's stream: here, one batch after another
        if self._planners is None:
            self._planners = ProcessPoolExecutor(
                self.options.num_threads // 2,
                initializer=_start_planner,
                initargs=(self.dataset,),
            )
        return self._planners

    @property
    def planner_processes(self) -> int:
        """How many planner processes read and plan batches (0: this process does)."""
        return 0 if self._planners is None else self.options.num_threads // 2

    def close(self) -> None:
        """Stop the planner processes (the engine's library goes with the executor)."""
        planners = getattr(self, "_planners", None)  # None too when __init__ failed early
        if planners is not None:
            planners.shutdown(wait=False, cancel_futures=True)
            self._planners = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the pool may be gone first
            self.close()

    def epoch(
        self,
        batches: Iterator[list[int]],
        *,
        seed: int,
        target_transform: Callable[[int], Any] | None = None,
        on_drop: Callable[[int], None] | None = None,
        stage: Callable[..., Any] | None = None,
    ) -> Iterator[Any]:
        """Iterate one epoch: ``(images, labels)`` per batch of indices from ``batches``.

        Args:
            batches: Index lists, one per batch (the loader's batch sampler). Indices that
                carry a seed (``fastload.sampling.SampleKey``) are planned from it.
            seed: Seeds this epoch's per-sample random draws, for indices without a seed.
            target_transform: Called on each label (the dataset's).
            on_drop: Told, when a batch is dropped whole (``on_error="skip"`` and none of its
                files readable), how many batches are delivered before it.
            stage: Applied to each ``(images, labels)`` as ``stage(batch, seed=...)``: the
                batch ops the engine does not run (a ``fastload.gpu.stage.BatchStage``). The
                seed is derived from the batch's own (a ``KeyedBatch``'s), else ``None``.
        """
        self.engine.drain()  # a previous epoch's unused batches
        token = object()
        self._epoch_token = token
        return _Epoch(self, batches, seed, target_transform, token, on_drop, stage)

    def is_current(self, token: object) -> bool:
        """Whether the epoch holding ``token`` is the newest one."""
        return self._epoch_token is token


class _Epoch:
    """One pass over a batch sampler: read ahead, plan, feed, collect, isolate faults."""

    def __init__(
        self,
        owner: BatchExecutor,
        batches: Iterator[list[int]],
        seed: int,
        target_transform: Callable[[int], Any] | None,
        token: object,
        on_drop: Callable[[int], None] | None = None,
        stage: Callable[..., Any] | None = None,
    ) -> None:
        self._owner, self._engine, self._token = owner, owner.engine, token
        self._on_drop, self._delivered, self._stage = on_drop, 0, stage
        self._batches = batches
        self._target_transform = target_transform
        generator = torch.Generator()
        generator.manual_seed(seed)
        self._rng = generator.get_state()
        self._reader = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix=f"fastload-{owner.name}-read"
        )
        self._reads: deque[tuple[Future[Read], list[int | None], int | None]] = deque()
        self._queued: deque[Planned] = deque()
        self._skipped = 0
        self._done = False

    def __iter__(self) -> _Epoch:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if not self._owner.is_current(self._token):
            self._finish()
            raise RuntimeError(
                f"this {self._owner.name} loader iterator was replaced by a newer iter(loader); "
                f"a loader with backend={self._owner.name!r} runs one epoch at a time"
            )
        try:
            return self._next_batch()
        except BaseException:
            if not self._done:
                if self._owner.is_current(self._token) and self._queued:
                    # batches are left inside the engine: the next epoch starts on a new graph
                    self._engine.discard()
                self._finish()
            raise

    def _next_batch(self) -> Any:
        while True:
            self._schedule()
            if not self._queued:
                self._finish()
                raise StopIteration
            if self._queued[0].error is not None:
                raise self._queued[0].error
            try:
                images = self._engine.collect()
            except BatchFailed as exc:
                self._drop_bad_files(exc)
                continue
            self._delivered += 1
            planned = self._queued.popleft()
            batch = (images, self._labels(planned)) if self._owner.dataset.has_targets else images
            if self._stage is None:
                return batch
            # the flips folded into the plan drew from the batch's seed: the rest, from another
            seed = None if planned.seed is None else sample_seed(planned.seed, 1 << 32)
            return self._stage(batch, seed=seed)

    # ------------------------------------------------------------ reading and planning

    def _read_ahead(self) -> None:
        want = self._owner.options.prefetch + 2
        while len(self._reads) < want:
            indices = next(self._batches, None)
            if indices is None:
                return
            seeds = [getattr(i, "seed", None) for i in indices]
            seed = getattr(indices, "seed", None)
            indices = [int(i) for i in indices]
            planners = self._owner.planners(seeds)
            if planners is not None:  # each sample planned from its own seed, or no draws
                future = self._reader.submit(
                    read_planned, planners, self._owner.dataset, indices, seeds
                )
            else:
                future = self._reader.submit(read_batch, self._owner.dataset, indices)
            self._reads.append((future, seeds, seed))

    def _plan(self, read: Read, seeds: list[int | None], seed: int | None) -> Planned | None:
        dataset = self._owner.dataset
        for path, why, stage in read.bad:
            if dataset.on_error == "raise":
                error = errors.unusable(path, why, stage=stage, backend=self._owner.name)
                return Planned([], [], [], {}, error=error)
            dataset.bad_files[path] = why
            self._skipped += 1
        if not read.good:
            return None
        if read.views is not None:
            views = read.views
        else:
            views, self._rng = plan_views(
                self._owner.translation.plan,
                read.sizes,
                self._rng,
                [seeds[k] for k in read.good],
                python_random=self._owner.dataset.transform_split.draws_python,
            )
        flips = self._owner.folded.flips
        with ops_seeded(flips, seed):  # the batch's own stream, when it has one
            for op in flips:  # the op's own draws, one per delivered sample
                drawn = op.make_params(len(views), views[0].height, views[0].width)
                mirror = drawn["apply"].tolist()
                views = [v.mirrored() if f else v for v, f in zip(views, mirror, strict=True)]
        return Planned(
            [read.paths[k] for k in read.good],
            read.targets,
            read.data,
            self._engine.inputs(read.data, views, read.sizes, read.infos),
            seed=seed,
        )

    def _schedule(self) -> None:
        self._read_ahead()
        while len(self._queued) < self._owner.options.prefetch and self._reads:
            if self._queued and self._queued[-1].error is not None:
                return  # nothing is delivered past a batch that raises
            future, seeds, seed = self._reads.popleft()
            planned = self._plan(future.result(), seeds, seed)
            self._read_ahead()
            if planned is None:
                if self._on_drop is not None:  # delivered before it: those out, and those queued
                    self._on_drop(self._delivered + len(self._queued))
                continue
            if planned.error is None:
                if not self._engine.fits(len(planned.paths)):
                    # a larger batch than the graph was built for (a custom batch_sampler): a
                    # new graph takes the batches already queued again, in their order
                    self._engine.discard(grow_to=len(planned.paths))
                    self._feed_again()
                self._engine.feed(planned.inputs)
            self._queued.append(planned)

    def _feed_again(self) -> None:
        """Feed the queued batches to a new graph, in their order."""
        for queued in self._queued:
            if queued.error is None:
                self._engine.feed(queued.inputs)

    # ------------------------------------------------------------ delivering

    def _labels(self, planned: Planned) -> Any:
        from torch.utils.data import default_collate

        labels: Any
        if self._target_transform is None:
            labels = default_collate(planned.targets)  # ints: an int64 tensor
        else:
            labels = default_collate([self._target_transform(x) for x in planned.targets])
        device = self._owner.options.device
        if device.type == "cuda" and isinstance(labels, torch.Tensor):
            labels = labels.to(device, non_blocking=True)
        return labels

    def _drop_bad_files(self, exc: BatchFailed) -> None:
        """The engine failed on the oldest batch: name the file; raise, or drop it and feed again.

        Each file of the batch is decoded alone to find the one(s) that failed. With
        ``on_error="skip"`` they are recorded, and the batch without them and the batches
        queued behind it are fed to a new graph.
        """
        dataset, name = self._owner.dataset, self._owner.name
        self._engine.discard()  # the failure took the graph's queued work with it
        planned = self._queued[0]
        culprits: dict[int, str] = {}
        for k, data in enumerate(planned.data):
            if exc.positions is not None and k not in exc.positions:
                continue  # the library named the files it failed on
            try:
                self._engine.decode_alone(data)
            except ValueError as bad:
                culprits[k] = str(bad)
        if not culprits:
            listed = ", ".join(repr(p) for p in planned.paths[:4])
            more = f" and {len(planned.paths) - 4} more" if len(planned.paths) > 4 else ""
            raise errors.ImageDecodeError(
                f"the {name} backend failed on a batch of {len(planned.paths)} files ({listed}"
                f"{more}), though each decodes alone: {exc}"
            ) from exc
        if dataset.on_error == "raise":
            k, why = next(iter(culprits.items()))
            raise errors.cannot_read(planned.paths[k], name, why)
        for k, why in culprits.items():
            dataset.bad_files[planned.paths[k]] = why
            self._skipped += 1
        self._queued.popleft()
        keep = [k for k in range(len(planned.paths)) if k not in culprits]
        if keep:
            self._queued.appendleft(planned.keep(keep))
        elif self._on_drop is not None:
            self._on_drop(self._delivered)
        self._feed_again()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        for future, _, _ in self._reads:
            future.cancel()
        # the engine's threads fragment the C heap epoch after epoch; a few ms hand it back,
        # on a reader thread, while the next epoch starts (the engine has nothing queued)
        with contextlib.suppress(RuntimeError):  # no new threads at interpreter exit
            self._reader.submit(trim_heap)
        self._reader.shutdown(wait=False)
        errors.warn_skipped(self._skipped, stacklevel=4)
        self._skipped = 0

    def __del__(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.shutdown(wait=False, cancel_futures=True)
