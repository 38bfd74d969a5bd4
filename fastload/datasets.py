"""Image datasets: paths and labels in, decoding delegated to a backend.

Samples live in numpy arrays (UTF-8 bytes plus offsets for paths, int64 for labels), not in a
Python list of tuples: reading a list item in a forked DataLoader worker writes its reference
count, which copies the page it sits on, so over an epoch every worker ends up with a private
copy of the whole list (pytorch/pytorch issue 13246). Arrays have no per-item objects.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from fastload import backends, errors
from fastload.backends.base import read_file
from fastload.checks import check_int
from fastload.errors import UnreadableImageWarning
from fastload.sampling import SeededSamples, numpy_kept, seeded
from fastload.skipping import Skipped
from fastload.transforms import TransformSplit, split_transform

__all__ = [
    "ImageFolder",
    "ImageList",
    "Skipped",
    "UnreadableImageWarning",
]

OnError = Literal["raise", "skip"]
_ON_ERROR = ("raise", "skip")


def _check_options(on_error: str, max_pixels: int) -> None:
    if on_error not in _ON_ERROR:
        raise ValueError(f"on_error={on_error!r} is not valid; valid: 'raise', 'skip'")
    check_int("max_pixels", max_pixels, minimum=1)


class _Strings:
    """Many strings in two numpy arrays: no Python object per string."""

    def __init__(self, strings: Iterable[str]) -> None:
        encoded = [os.fsencode(s) for s in strings]
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=self._offsets[1:])
        self._bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> str:
        start, end = self._offsets[index], self._offsets[index + 1]
        return os.fsdecode(self._bytes[start:end].tobytes())

    @property
    def nbytes(self) -> int:
        return self._offsets.nbytes + self._bytes.nbytes


class ImageList(Dataset):
    """Images from a list of file paths and integer labels.

    Indexed with a :class:`fastload.sampling.SampleKey` (as ``fastload.DataLoader`` does by
    default), a sample's random transforms draw from the key's seed.

    ``ds[i]`` returns ``(image, target)``. The image is a C x H x W uint8 RGB tensor (EXIF
    orientation applied) when ``transform`` is ``None``, a fastload op or a ``Compose``
    starting with fastload ops (these run fused with decoding; any other callables in the
    ``Compose`` then get that tensor). Any other ``transform`` gets a PIL RGB image, as it
    would from ``torchvision.datasets.ImageFolder``.

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
        _check_options(on_error, max_pixels)
        self._init_samples([os.fspath(p) for p in paths], labels, root="")
        self.classes = list(classes) if classes is not None else []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)

    sample_keys = True  # honours SampleKey seeds: fastload.DataLoader sends them

    # ------------------------------------------------------------ construction

    def _init_samples(self, relative: list[str], labels: Sequence[int], root: str) -> None:
        self.root = root
        self._paths = _Strings(relative)
        self._labels = np.asarray(labels, dtype=np.int64).reshape(-1)

    def _setup(
        self,
        transform: Callable[[Any], Any] | None,
        target_transform: Callable[[int], Any] | None,
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
        self.bad_files: dict[str, str] = {}
        self._split = split_transform(transform)
        self._plan = self._split.plan

    @property
    def transform_split(self) -> TransformSplit:
        """The ``transform`` cut where decoding stops taking it over: the ``fused`` fastload
        ops, the callables run ``after`` them on the uint8 tensor, or a ``pil`` transform that
        gets a PIL image (see :func:`fastload.transforms.split_transform`)."""
        return self._split

    def using(self, backend: str) -> ImageList:
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

    def with_transform(self, transform: Callable[[Any], Any] | None) -> ImageList:
        """A copy of this dataset with another ``transform``.

        The copy shares the samples, the backend and :attr:`bad_files` with this dataset.
        """
        other = copy.copy(self)
        other.transform = transform
        other._split = split_transform(transform)
        other._plan = other._split.plan
        return other

    # ------------------------------------------------------------ torchvision's attributes

    def __len__(self) -> int:
        return len(self._labels)

    def path(self, index: int) -> str:
        """The file path of sample ``index``."""
        relative = self._paths[index]
        return os.path.join(self.root, relative) if self.root else relative

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

    # ------------------------------------------------------------ loading

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
        with numpy_kept():
            samples = [self[i] for i in indices]
        seed = getattr(indices, "seed", None)
        return samples if seed is None else SeededSamples(samples, seed)

    def _load(self, index: int) -> Any:
        path = self.path(index)
        target: Any = int(self._labels[index])
        try:
            image = self._read(path)
        except Exception as exc:
            why = errors.reason(exc)
            if self.on_error == "skip":
                self.bad_files[path] = why
                return Skipped(path, why)
            raise errors.cannot_read(path, self.backend, why) from exc
        # the user's own code runs outside the try: its bugs are not unreadable images
        if self._split.pil is not None:
            from PIL import Image

            image = self._split.pil(Image.fromarray(image))
        for op in self._split.after:
            image = op(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def _read(self, path: str) -> Any:
        """Read and decode (with the fused transform): the part ``on_error`` is about."""
        data = read_file(path)
        array = self._backend().decode(
            data,
            plan=self._plan,
            render=self._split.render,
            max_pixels=self.max_pixels,
            exif_orientation=self.exif_orientation,
        )
        if self._split.pil is not None:
            return array  # the caller makes the PIL image for the user's transform
        # A channels-first view of the decoder's buffer: collating copies it once, into the batch.
        return torch.from_numpy(array).permute(2, 0, 1)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_decoder"] = None  # library handles do not pickle; rebuilt in the new process
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} images, root={self.root!r}, "
            f"backend={self.backend!r}, on_error={self.on_error!r}, transform={self.transform!r})"
        )


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

        _check_options(on_error, max_pixels)
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
