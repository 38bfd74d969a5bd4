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

import copy
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from fastload import backends, errors
from fastload.backends.base import read_file
from fastload.checks import check_choice, check_int
from fastload.compact import Strings
from fastload.drawing import drawing, drawn, own_draws
from fastload.errors import UnreadableImageWarning
from fastload.options import ON_ERROR
from fastload.sampling import SeededSamples, seeded, streams_kept
from fastload.skipping import Skipped
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
        self.transform = transform
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
        self._split = split_transform(transform)
        self._plan = self._split.plan

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
        other.transform = transform
        other._split = split_transform(transform)
        other._plan = other._split.plan
        return other

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

    def __getitems__(self, indices: list[int]) -> list[Any]:
        # torch's fetcher calls this with a whole batch: a KeyedBatch's seed goes on with the
        # samples, to the collate function, for the batch ops
        with streams_kept():
            samples = [self[i] for i in indices]
        seed = getattr(indices, "seed", None)
        return samples if seed is None else SeededSamples(samples, seed)

    def _load(self, index: int) -> Any:
        reading = True
        try:
            data, target = self.read_sample(index)
            reading = False
            image = self._decode(data)
        except Exception as exc:
            return self._unusable(index, exc, reading=reading)
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
        if not self.has_targets:
            return image
        if self.target_transform is not None:
            with drawing():
                target = self.target_transform(target)
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

    def _decode(self, data: bytes) -> Any:
        """Decode (with the fused transform): the part ``on_error`` is about."""
        array = self._backend().decode(
            data,
            # fastload's own ops draw from the sample's generator; any other op, under the lock
            plan=drawn(self._plan) if self._split.draws_python else own_draws(self._plan),
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
