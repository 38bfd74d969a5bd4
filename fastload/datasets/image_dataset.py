"""The decode path every fastload dataset shares: :class:`ImageDataset` holds the transform
split, the backend, the error policy and the per-sample seeds, and turns a sample's bytes into
its image and target (a batch's decoded into one tensor by :mod:`fastload.datasets.stacking`).
A subclass says only where a sample's bytes and target are (:meth:`ImageDataset.read_sample`)
and what to call it in errors (:meth:`ImageDataset.path`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from fastload import backends, errors
from fastload.backends.base import decodes_resized_many
from fastload.checks import check_choice, check_int
from fastload.datasets.skipping import Skipped
from fastload.datasets.stacking import StackedLoading
from fastload.memory import stacked
from fastload.options import ON_ERROR
from fastload.sampling import SeededSamples, seeded, streams_kept
from fastload.sampling.drawing import drawing, drawn, own_draws
from fastload.transforms import TransformSplit, split_transform
from fastload.transforms.crop_recipes import crop_recipe

__all__ = ["ImageDataset", "OnError", "check_options"]

OnError = Literal["raise", "skip"]


def check_options(on_error: str, max_pixels: int) -> None:
    """Check the options every fastload dataset takes.

    Raises:
        ValueError: ``on_error`` is not ``"raise"`` or ``"skip"``, or ``max_pixels`` is not a
            positive int.
    """
    check_choice("on_error", on_error, ON_ERROR)
    check_int("max_pixels", max_pixels, minimum=1)


class ImageDataset(StackedLoading, Dataset):
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
        read alone (and its error reported as ``on_error`` says). A subclass that can read many at
        once for less overrides this (:class:`~fastload.datasets.folders.ImageList`: the GIL let go
        twice a batch, not twice a file)."""
        out: list[tuple[bytes, Any] | None] = []
        for index in indices:
            try:
                out.append(self.read_sample(index))
            except Exception:
                out.append(None)
        return out

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
        other op under the lock with the sample's streams (``fastload.sampling.drawing``)."""
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
