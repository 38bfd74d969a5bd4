"""Image datasets: where each sample's bytes are, and one decode path for all of them.

:class:`ImageDataset` holds what every fastload dataset shares (the transform split, the
backend, the error policy, per-sample seeds); a subclass says only where a sample's bytes and
target are (:meth:`ImageDataset.read_sample`) and what to call it in errors
(:meth:`ImageDataset.path`). :class:`ImageList` and :class:`ImageFolder` read files;
``fastload.ImageShards`` reads members of tar shards.

Samples live in numpy arrays (:class:`fastload.compact.Strings` for paths, int64 for labels),
not in a Python list of tuples (see :mod:`fastload.compact`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from fastload import backends, buffers, errors, shared_buffers, stacked
from fastload.backends.base import (
    JpegPlan,
    decodes_resized_many,
    plan_jpeg,
    read_file,
    read_files,
    read_header,
)
from fastload.checks import check_choice, check_int
from fastload.compact import Strings
from fastload.crop_recipes import crop_recipe
from fastload.drawing import drawing, drawn, own_draws
from fastload.errors import UnreadableImageWarning
from fastload.gpu import functional as batch_ops
from fastload.image import ImageInfo
from fastload.options import ON_ERROR
from fastload.sampling import SeededSamples, seeded, streams_kept
from fastload.skipping import Skipped
from fastload.stacked import Normalizing, StackedSamples
from fastload.transforms import TransformSplit, split_transform

__all__ = [
    "ImageDataset",
    "ImageFolder",
    "ImageList",
    "Skipped",
    "UnreadableImageWarning",
    "check_options",
]

OnError = Literal["raise", "skip"]
_UNSET = object()  # a target not transformed yet


def check_options(on_error: str, max_pixels: int) -> None:
    """Check the options every fastload dataset takes.

    Raises:
        ValueError: ``on_error`` is not ``"raise"`` or ``"skip"``, or ``max_pixels`` is not a
            positive int.
    """
    check_choice("on_error", on_error, ON_ERROR)
    check_int("max_pixels", max_pixels, minimum=1)


class ImageDataset(Dataset):
    """What every fastload image dataset shares: decoding, transforms, errors, seeds.

    A subclass sets up its samples, calls :meth:`_setup`, and defines ``__len__``,
    :meth:`path` and :meth:`read_sample`. Indexed with a :class:`fastload.sampling.SampleKey`
    (as ``fastload.DataLoader`` does by default), a sample's random transforms draw from the
    key's seed.

    ``ds[i]`` returns ``(image, target)``. The image is a C x H x W uint8 RGB tensor (EXIF
    orientation applied) when ``transform`` is ``None``, a fastload op or a ``Compose``
    starting with fastload ops (these run fused with decoding; any other callables in the
    ``Compose`` then get that tensor). Any other ``transform`` gets a PIL RGB image, as it
    would from ``torchvision.datasets.ImageFolder``.
    """

    sample_keys = True  # honours SampleKey seeds: fastload.DataLoader sends them
    # a sample is this class's (image, target): load_stacked may decode a batch of them at once
    stacks_samples = True
    has_targets = True  # False: a sample is its image alone (ImageShards(target=None))
    root = ""

    def _setup(
        self,
        transform: Callable[[Any], Any] | None,
        target_transform: Callable[[Any], Any] | None,
        backend: str,
        on_error: OnError,
        max_pixels: int,
        exif_orientation: bool,
    ) -> None:
        if not isinstance(exif_orientation, bool):
            raise ValueError(f"exif_orientation={exif_orientation!r} must be True or False")
        self.exif_orientation = exif_orientation
        self.target_transform = target_transform
        self.on_error = on_error
        self.max_pixels = max_pixels
        self.backend = backends.resolve(backend)
        # a backend named, not chosen by "auto": a CUDA loader keeps it (no GPU decoder swap)
        self.backend_named = backend != "auto"
        # OpenCV runs single-threaded from here on, in this process and the workers it forks:
        # the workers are the parallelism, and a child forked after OpenCV started its thread
        # pool can deadlock in the next OpenCV call that reaches the pool.
        import cv2

        cv2.setNumThreads(0)
        self._decoder: backends.Backend | None = backends.create(self.backend)
        self._decoder_pid = os.getpid()
        if not hasattr(self, "bad_files"):
            self.bad_files: dict[str, str] = {}
        self._set_transform(transform)

    # ------------------------------------------------------------ what a subclass says

    def __len__(self) -> int:
        raise NotImplementedError

    def path(self, index: int) -> str:
        """The name of sample ``index`` in errors and in :attr:`bad_files` (a file's path)."""
        raise NotImplementedError

    def read_sample(self, index: int) -> tuple[bytes, Any]:
        """The encoded image of sample ``index`` and its target (before ``target_transform``).

        Runs in the worker processes or the executor's reader threads; any exception it
        raises is an unreadable sample (``on_error``).
        """
        raise NotImplementedError

    # ------------------------------------------------------------ shared

    @property
    def transform_split(self) -> TransformSplit:
        """The ``transform`` cut where decoding stops taking it over: the ``fused`` fastload
        ops, the callables run ``after`` them on the uint8 tensor, or a ``pil`` transform that
        gets a PIL image (see :func:`fastload.transforms.split_transform`)."""
        return self._split

    def using(self, backend: str) -> Any:
        """A copy of this dataset that decodes with another per-sample backend.

        The copy shares the samples, the transform and :attr:`bad_files` with this dataset.

        Raises:
            ValueError: ``backend`` is not a registered backend.
            fastload.MissingDependencyError: Its library is not installed.
        """
        other = copy.copy(self)
        other.backend, other.backend_named = backends.resolve(backend), backend != "auto"
        other._decoder, other._decoder_pid = backends.create(other.backend), os.getpid()
        return other

    def with_transform(self, transform: Callable[[Any], Any] | None) -> Any:
        """A copy of this dataset with another ``transform``.

        The copy shares the samples, the backend and :attr:`bad_files` with this dataset.
        """
        other = copy.copy(self)
        other._set_transform(transform)
        return other

    def _set_transform(self, transform: Callable[[Any], Any] | None) -> None:
        self.transform = transform
        self._split = split_transform(transform)
        self._plan = self._split.plan
        # the random crop the backend may draw and plan itself, in its batch call
        self._crop_recipe = crop_recipe(self._split)

    def _backend(self) -> backends.Backend:
        if self._decoder is None or self._decoder_pid != os.getpid():
            self._decoder = backends.create(self.backend)
            self._decoder_pid = os.getpid()
        return self._decoder

    def __getitem__(self, index: int) -> Any:
        # A SampleKey from fastload.DataLoader (seeding="sample") carries the sample's own seed:
        # every draw of the transforms comes from it, whatever process loads the sample.
        with seeded(getattr(index, "seed", None)):
            return self._load(int(index))

    def __getitems__(self, indices: list[int]) -> Any:
        # torch's fetcher calls this with a whole batch: a KeyedBatch's seed goes on with the
        # samples, to the collate function, for the batch ops; in a worker process of a
        # loader whose collate chain takes them, the batch is decoded stacked
        if stacked.welcomed() and self._stackable(indices):
            return self._load_stacked(indices, stacked.welcomed_normalizing())
        return self._each(indices)

    def _each(self, indices: list[int]) -> list[Any]:
        """The samples of a batch, each loaded alone."""
        with streams_kept():
            samples = [self[i] for i in indices]
        seed = getattr(indices, "seed", None)
        return samples if seed is None else SeededSamples(samples, seed)

    def read_samples(self, indices: list[int]) -> list[tuple[bytes, Any] | None]:
        """:meth:`read_sample` for a batch: ``None`` for a sample that failed, which is then
        read alone (and its error reported as ``on_error`` says). A subclass that can read
        many at once for less overrides this (:class:`ImageList`: the GIL let go twice a
        batch, not twice a file)."""
        out: list[tuple[bytes, Any] | None] = []
        for index in indices:
            try:
                out.append(self.read_sample(index))
            except Exception:
                out.append(None)
        return out

    def load_stacked(self, keys: list[Any], *, normalizing: Normalizing | None = None) -> Any:
        """``__getitems__(keys)``, with the images decoded straight into one batch tensor
        where they can be: a :class:`~fastload.stacked.StackedSamples`, which fastload's
        collate links take as the batch (thread workers ask for it, see
        ``fastload.loader.threads``, and worker processes through ``__getitems__``, see
        :func:`fastload.stacked.welcome`). The same samples, pixels and draws as each loaded
        alone.

        With ``normalizing`` (the normalize the collate chain runs first), the batch is
        float32, each value written normalized by the decoder's resize as it makes it (no
        uint8 batch, no second pass), and says so (``StackedSamples.normalized``); the
        samples it falls back to a list for are the uint8 images as ever.

        It can be done where every key carries its seed (:class:`~fastload.sampling.SampleKey`),
        the transform is all fused with decoding, and the backend decodes many JPEGs at once
        (``Backend.decode_jpeg_resized_many``); else, and for the samples it cannot do that way
        (other formats, an EXIF orientation, a file that fails), each is loaded alone. Where
        one of those cannot join the batch (a skipped file, another size), the samples come
        back as a list.
        """
        if not self._stackable(keys):
            return self.__getitems__(keys)  # a subclass's own, or each sample alone
        return self._load_stacked(keys, normalizing)

    def _load_stacked(self, keys: list[Any], normalizing: Normalizing | None) -> Any:
        with streams_kept():
            reads = self.read_samples([int(k) for k in keys])
            out, drawn = self._decode_drawn(keys, reads, normalizing)
            plans, targets = self._plan_stacked(keys, reads, drawn)
            if out is None:
                first = next((p for p in plans if p is not None), None)
                if first is None:  # no JPEG to stack: each loaded alone, from the bytes read
                    return self._stacked(keys, reads, targets, None, set(), None)
                width, height = _shown_size(first[1])
                out = _batch_tensor(len(keys), height, width, normalizing)
            written = drawn | self._decode_into(out, reads, plans, normalizing)
            return self._stacked(keys, reads, targets, out, written, normalizing)

    def _decode_drawn(
        self,
        keys: list[Any],
        reads: list[tuple[bytes, Any] | None],
        normalizing: Normalizing | None,
    ) -> tuple[torch.Tensor | None, set[int]]:
        """The batch tensor and the slots the backend wrote, drawing and planning the crops
        itself (:mod:`fastload.crop_recipes`), where the transform is such a crop and the
        backend can; ``(None, set())`` elsewhere. The targets of the slots written must then
        be the labels as read: there is no ``target_transform``, whose draws would follow the
        crop's."""
        recipe = self._crop_recipe
        if recipe is None or self.target_transform is not None:
            return None, set()
        if torch.get_default_dtype() != torch.float32:  # torch's draws then differ
            return None, set()
        out = _batch_tensor(len(keys), recipe.height, recipe.width, normalizing)
        jobs = [
            (slot, read[0], key.seed)
            for slot, (key, read) in enumerate(zip(keys, reads, strict=True))
            if read is not None
        ]
        done = self._backend().decode_drawn_many(
            jobs,
            recipe,
            _written(out),
            max_pixels=self.max_pixels,
            exif_orientation=self.exif_orientation,
            normalizing=normalizing,
        )
        if done is None:  # the backend cannot: Python plans them all
            return None, set()
        return out, {slot for (slot, _, _), ok in zip(jobs, done, strict=True) if ok}

    def _stackable(self, keys: list[Any]) -> bool:
        split, kind = self._split, type(self)
        return (
            self.stacks_samples
            # a subclass that makes its samples (or batches) otherwise is asked for them
            and kind.__getitem__ is ImageDataset.__getitem__
            and kind.__getitems__ is ImageDataset.__getitems__
            and bool(keys)
            and self._plan is not None
            and split.pil is None
            and not split.after
            and all(getattr(k, "seed", None) is not None for k in keys)
            and decodes_resized_many(self._backend())
        )

    def _plan_stacked(
        self, keys: list[Any], reads: list[tuple[bytes, Any] | None], drawn: set[int]
    ) -> tuple[list[tuple[ImageInfo, JpegPlan] | None], list[Any]]:
        """Each read JPEG's draws and plan, made under its seed, and its target, transformed
        there after the draws, as ``_load`` does (:data:`_UNSET` for the samples not planned,
        whose targets are transformed when they are loaded alone). The slots in ``drawn``
        were planned and decoded by the backend: their targets are the labels read."""
        plans: list[tuple[ImageInfo, JpegPlan] | None] = []
        targets: list[Any] = []
        for slot, (key, read) in enumerate(zip(keys, reads, strict=True)):
            planned, target = None, _UNSET
            if slot in drawn:
                target = read[1]  # type: ignore[index]
            elif read is not None:
                with seeded(key.seed):
                    planned = self._jpeg_plan(read[0])
                    if planned is not None:
                        target = self._transform_target(read[1])
            plans.append(planned)
            targets.append(target)
        return plans, targets

    def _decode_into(
        self,
        out: torch.Tensor,
        reads: list[tuple[bytes, Any] | None],
        plans: list[tuple[ImageInfo, JpegPlan] | None],
        normalizing: Normalizing | None,
    ) -> set[int]:
        """Decode the planned JPEGs into their slots of ``out`` (N x 3 x H x W, normalized
        as ``normalizing`` says where it is given): those the backend takes many at a time
        in one call, the others one by one. The slots written; the rest are for ``_load``
        (another size, or a file that fails, which it reports)."""
        backend, render = self._backend(), self._split.render or {}
        size = (out.shape[3], out.shape[2])
        jobs, alone = [], []
        for slot, (read, planned) in enumerate(zip(reads, plans, strict=True)):
            if read is None or planned is None or _shown_size(planned[1]) != size:
                continue
            jp = planned[1]
            if jp.region is not None and not jp.oriented_after:
                jobs.append((slot, read[0], jp))
            else:
                alone.append(slot)
        written: set[int] = set()
        if jobs:  # (each call lets go of the GIL: none when the backend drew them all)
            done = backend.decode_jpeg_resized_many(
                jobs, _written(out), max_pixels=self.max_pixels, normalizing=normalizing
            )
            assert done is not None  # the backend decodes many: _stackable asked
            written = {slot for (slot, _, _), ok in zip(jobs, done, strict=True) if ok}
        for slot in alone:
            data, (info, jp) = reads[slot][0], plans[slot]  # type: ignore[index,misc]
            try:
                pixels = backend.decode_jpeg_planned(
                    data, info, jp, render=render, max_pixels=self.max_pixels
                )
            except Exception:
                continue  # loaded alone, which reports it
            if pixels.shape == (size[1], size[0], 3):
                _put(out, slot, pixels.transpose(2, 0, 1), normalizing)
                written.add(slot)
        return written

    def _jpeg_plan(self, data: bytes) -> tuple[ImageInfo, JpegPlan] | None:
        """A JPEG's header and plan; ``None`` for any other file, or one whose header fails
        (loaded alone, where its errors are reported)."""
        try:
            info, jpeg = read_header(
                data, max_pixels=self.max_pixels, exif_orientation=self.exif_orientation
            )
        except ValueError:
            return None
        if not jpeg:
            return None
        return info, plan_jpeg(info, self._drawing_plan(), self._split.render or {})

    def _stacked(
        self,
        keys: list[Any],
        reads: list[tuple[bytes, Any] | None],
        targets: list[Any],
        out: torch.Tensor | None,
        written: set[int],
        normalizing: Normalizing | None,
    ) -> Any:
        """The batch: the samples not written into ``out`` loaded alone and copied into their
        slots (normalized as the rest); a list of samples where one of them cannot be (or
        there is no ``out``), whose images are the samples' own (uint8)."""
        samples: list[Any] = [None] * len(keys)
        stackable = out is not None
        for slot, (key, read) in enumerate(zip(keys, reads, strict=True)):
            if slot in written:
                continue
            index, target = int(key), targets[slot]
            with seeded(key.seed):
                if read is None:
                    sample = self._load(index)
                elif target is _UNSET:
                    sample = self._finish(index, *read)
                else:  # its target was transformed after its draws, made again here
                    sample = self._with_target(self._load_image(index, read[0]), target)
            samples[slot] = sample
            image = sample[0] if self.has_targets and isinstance(sample, tuple) else sample
            if (
                out is None
                or not isinstance(image, torch.Tensor)
                or image.shape != out.shape[1:]
                or image.dtype != torch.uint8
            ):
                stackable = False
                continue
            _put(out, slot, image.numpy(), normalizing)
            targets[slot] = sample[1] if self.has_targets else None
        seed = getattr(keys, "seed", None)
        if stackable and out is not None:
            kept = targets if self.has_targets else None
            return StackedSamples(out, kept, seed, normalized=normalizing)
        for slot in written:
            assert out is not None
            image = out[slot] if normalizing is None else _decoded(out[slot], normalizing)
            samples[slot] = (image, targets[slot]) if self.has_targets else image
        return samples if seed is None else SeededSamples(samples, seed)

    def _load(self, index: int) -> Any:
        try:
            data, target = self.read_sample(index)
        except Exception as exc:
            return self._unusable(index, exc, reading=True)
        return self._finish(index, data, target)

    def _transform_target(self, target: Any) -> Any:
        if self.target_transform is None:
            return target
        with drawing():
            return self.target_transform(target)

    def _finish(self, index: int, data: bytes, target: Any) -> Any:
        """Sample ``index`` from its bytes and its target as read."""
        image = self._load_image(index, data)
        if isinstance(image, Skipped):
            return image
        return self._with_target(image, self._transform_target(target))

    def _load_image(self, index: int, data: bytes) -> Any:
        """Sample ``index``'s image from its bytes, the transform's every part run on it; a
        :class:`Skipped` marker for bytes that are no usable image, with ``on_error="skip"``."""
        try:
            image = self._decode(data)
        except Exception as exc:
            return self._unusable(index, exc, reading=False)
        # the user's own code runs outside the try: its bugs are not unreadable images
        # what may draw runs under drawing(): in a thread worker, with the sample's own streams
        if self._split.pil is not None:
            from PIL import Image

            with drawing():
                image = self._split.pil(Image.fromarray(image))
        if self._split.after:
            with drawing():
                for op in self._split.after:
                    image = op(image)
        return image

    def _with_target(self, image: Any, target: Any) -> Any:
        if isinstance(image, Skipped) or not self.has_targets:
            return image
        return image, target

    def _unusable(self, index: int, exc: Exception, *, reading: bool) -> Skipped:
        """Sample ``index`` could not be read or decoded: skipped (and recorded in
        :attr:`bad_files`) with ``on_error="skip"``, else one error naming it.

        Raises:
            ImageDecodeError: ``on_error="raise"``; worded by where it failed.
        """
        path, why = self.path(index), errors.reason(exc)
        if self.on_error == "skip":
            self.bad_files[path] = why
            return Skipped(path, why)
        stage = errors.stage_of(exc, reading=reading)
        raise errors.unusable(path, why, stage=stage, backend=self.backend) from exc

    def _drawing_plan(self) -> Any:
        """The plan, drawing as it must: fastload's own ops from the sample's generator, any
        other op under the lock with the sample's streams (``fastload.drawing``)."""
        return drawn(self._plan) if self._split.draws_python else own_draws(self._plan)

    def _decode(self, data: bytes) -> Any:
        """Decode (with the fused transform): the part ``on_error`` is about."""
        array = self._backend().decode(
            data,
            plan=self._drawing_plan(),
            render=self._split.render,
            max_pixels=self.max_pixels,
            exif_orientation=self.exif_orientation,
        )
        if self._split.pil is not None:
            return array  # the caller makes the PIL image for the user's transform
        # A channels-first view of the decoder's buffer: collating copies it once, into the batch.
        return torch.from_numpy(array.transpose(2, 0, 1))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_decoder"] = None  # library handles do not pickle; rebuilt in the new process
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} images, root={self.root!r}, "
            f"backend={self.backend!r}, on_error={self.on_error!r}, transform={self.transform!r})"
        )


def _batch_tensor(
    count: int, height: int, width: int, normalizing: Normalizing | None
) -> torch.Tensor:
    """An uninitialised uint8 batch (float32 where it is to be ``normalizing``'s, laid out as
    it says) in the memory it is handed on in: the calling thread's ring (a worker thread's,
    or the loader's own with no workers), or a worker process's shared memory (sent to the
    loader's process as it is), where there is one."""
    shape = (count, 3, height, width)
    if normalizing is not None:
        layout = buffers.channels_last() if normalizing.channels_last else contextlib.nullcontext()
        with layout:
            return batch_ops.float_batch(torch.Size(shape))
    ring = buffers.current()
    if ring is not None:
        return ring.take(shape, torch.uint8)
    kept = shared_buffers.take(torch.Size(shape), torch.uint8)
    return kept if kept is not None else torch.empty(shape, dtype=torch.uint8)


def _written(out: torch.Tensor) -> np.ndarray:
    """The memory a decoder writes the batch ``out`` through: N x 3 x H x W, or N x H x W x 3
    for a batch in channels-last memory."""
    return out.numpy() if out.is_contiguous() else out.permute(0, 2, 3, 1).numpy()


def _put(out: torch.Tensor, slot: int, image: np.ndarray, normalizing: Normalizing | None) -> None:
    """A sample's uint8 image (3 x H x W) into its slot of the batch, normalized as the
    decoder wrote the others where ``normalizing`` is given."""
    if normalizing is None:
        out.numpy()[slot] = image
        return
    planes = torch.from_numpy(np.require(image, requirements=["C", "W"]))[None]
    factors, shifts = normalizing.factors, normalizing.shifts
    batch_ops.normalize_planes(planes, factors, shifts, out=out[slot : slot + 1])


def _decoded(image: torch.Tensor, normalizing: Normalizing) -> torch.Tensor:
    """The uint8 image a slot was normalized from: ``v * factor + shift`` is one to one on
    0-255 (the factors are not zero), and undone in float64 its rounding errors are far under
    half a level, so the bytes come back exactly."""
    factors = torch.tensor(normalizing.factors, dtype=torch.float64).reshape(3, 1, 1)
    shifts = torch.tensor(normalizing.shifts, dtype=torch.float64).reshape(3, 1, 1)
    levels = ((image.double() - shifts) / factors).round_().clamp_(0, 255)
    return levels.to(torch.uint8).contiguous()


def _shown_size(plan: JpegPlan) -> tuple[int, int]:
    """The (width, height) ``plan`` decodes to, once oriented."""
    stored = plan.stored
    return (stored.height, stored.width) if stored.transpose else (stored.width, stored.height)


class ImageList(ImageDataset):
    """Images from a list of file paths and integer labels.

    ``ds[i]`` returns ``(image, target)`` (see :class:`ImageDataset` for the image).

    Args:
        paths: Image file paths.
        labels: One integer label per path.
        transform: What to do with each image (see above).
        target_transform: Called on each label.
        classes: Class names, indexed by label, when there are names.
        backend: ``"auto"`` (the fastest usable here) or any name in
            ``fastload.backends.names()``: a per-sample decoder (``"region"``,
            ``"turbojpeg"``, ``"opencv"``, ``"pillow"``), or a batch executor (``"dali"``,
            ``"nvimgcodec"``), which ``fastload.DataLoader`` then runs in place of the workers
            (indexed directly, the dataset decodes with the executor's library, one file at a
            time).
        on_error: ``"raise"``: an unreadable image raises :class:`ImageDecodeError` naming the
            file, the backend and the reason. ``"skip"``: it is dropped from its batch by
            ``fastload.DataLoader``, which warns once per epoch with the count and records the
            file in :attr:`bad_files`.
        max_pixels: Refuse (as unreadable) images whose header claims more pixels.
        exif_orientation: Apply each file's EXIF orientation (the default); ``False`` keeps
            the stored pixels, as ``torchvision.datasets.ImageFolder``'s loader does.

    Raises:
        ValueError: A bad ``backend``, ``on_error`` or ``max_pixels``, or paths and labels of
            different lengths.
        fastload.MissingDependencyError: The backend's library is not installed.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        labels: Sequence[int],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        classes: Sequence[str] | None = None,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
    ) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"got {len(paths)} paths but {len(labels)} labels")
        check_options(on_error, max_pixels)
        self._init_samples([os.fspath(p) for p in paths], labels, root="")
        self.classes = list(classes) if classes is not None else []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)

    def _init_samples(self, relative: list[str], labels: Sequence[int], root: str) -> None:
        self.root = root
        self._paths = Strings(relative)
        self._labels = np.asarray(labels, dtype=np.int64).reshape(-1)

    # ------------------------------------------------------------ torchvision's attributes

    def __len__(self) -> int:
        return len(self._labels)

    def path(self, index: int) -> str:
        """The file path of sample ``index``."""
        relative = self._paths[index]
        return os.path.join(self.root, relative) if self.root else relative

    def read_sample(self, index: int) -> tuple[bytes, int]:
        """The bytes of sample ``index``'s file, and its label."""
        return read_file(self.path(index)), int(self._labels[index])

    def read_samples(self, indices: list[int]) -> list[tuple[bytes, Any] | None]:
        """The bytes of many samples' files, with their labels (``None`` for a file that
        could not be read so: it is read alone, which reports why)."""
        if type(self).read_sample is not ImageList.read_sample:  # a subclass reads otherwise
            return super().read_samples(indices)
        found = read_files([self.path(i) for i in indices])
        labels = self._labels[indices].tolist()
        return [
            None if data is None else (data, label)
            for data, label in zip(found, labels, strict=True)
        ]

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``(path, label)`` pairs, as torchvision's ImageFolder has them.

        Built on each access from the compact arrays; code that runs in workers should use
        :meth:`path` and :attr:`labels` instead.
        """
        return [(self.path(i), int(label)) for i, label in enumerate(self._labels)]

    @property
    def imgs(self) -> list[tuple[str, int]]:
        """The same as :attr:`samples` (torchvision's older name)."""
        return self.samples

    @property
    def targets(self) -> list[int]:
        """The labels as a list of ints, as torchvision's ImageFolder has them."""
        return self._labels.tolist()

    @property
    def labels(self) -> np.ndarray:
        """The labels as an int64 array (read-only view)."""
        view = self._labels.view()
        view.flags.writeable = False
        return view


class ImageFolder(ImageList):
    """Images in class folders (``root/<class>/<image>``), as ``torchvision.datasets.ImageFolder``.

    ``classes``, ``class_to_idx``, ``samples`` and ``targets`` are the same as torchvision's on
    the same folder (found with torchvision's own functions: same extensions, same order).

    Args:
        root: The folder holding one sub-folder per class.
        transform: What to do with each image (see :class:`ImageList`).
        target_transform: Called on each label.
        backend: ``"auto"`` or any name in ``fastload.backends.names()`` (see
            :class:`ImageList`).
        on_error: ``"raise"`` or ``"skip"`` (see :class:`ImageList`).
        max_pixels: Refuse images whose header claims more pixels.
        exif_orientation: Apply each file's EXIF orientation (see :class:`ImageList`).
        is_valid_file: Decides which files count, instead of the extension list (torchvision's
            option of the same name).

    Raises:
        FileNotFoundError: ``root`` has no class folders, or a class folder has no images.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        is_valid_file: Callable[[str], bool] | None = None,
    ) -> None:
        from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

        check_options(on_error, max_pixels)
        root = os.fspath(root)
        classes, class_to_idx = find_classes(root)
        extensions = None if is_valid_file is not None else IMG_EXTENSIONS
        found = make_dataset(root, class_to_idx, extensions, is_valid_file)
        prefix = os.path.join(root, "")
        relative = [p[len(prefix) :] if p.startswith(prefix) else p for p, _ in found]
        self._init_samples(relative, [label for _, label in found], root=root)
        self.classes = classes
        self.class_to_idx = class_to_idx
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)
