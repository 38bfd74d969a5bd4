"""Reading and planning a batch: reader threads read each batch's files and check their headers;
each sample's view is planned with torchvision's draws; with :data:`PLANNERS_FROM` threads or
more, planner processes read and plan (:func:`read_planned`).
"""

from __future__ import annotations

import dataclasses
import gc
import io
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fastload import errors
from fastload.backends.headers import check_header
from fastload.pixels.image import ImageInfo
from fastload.pixels.resampling import View
from fastload.sampling import seed_both

__all__ = [
    "PLANNERS_FROM",
    "Planned",
    "Read",
    "plan_views",
    "read_batch",
    "read_planned",
    "shown_size",
    "start_planner",
]


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
# benchmarks/loader/executor_cpu_side.py: about 8,000 a core for read, header and plan).
PLANNERS_FROM = 4

_planned_dataset: Any = None  # in a planner process: the dataset it reads


def start_planner(dataset: Any) -> None:
    """A planner process's start: what it inherited frozen first (a forked process must not
    finalize the main process's garbage, e.g. record_stream'd CUDA tensors, as the loader's
    workers must not), then the dataset it plans."""
    global _planned_dataset
    gc.freeze()
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
