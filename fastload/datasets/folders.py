"""Image files as datasets: :class:`ImageList` (paths and labels) and :class:`ImageFolder`
(class folders, as torchvision's ``ImageFolder`` reads them).

Samples live in numpy arrays (:class:`fastload.memory.compact.Strings` for paths, int64 for
labels), not in a Python list of tuples (see :mod:`fastload.memory.compact`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fastload import backends
from fastload.backends.files import read_file, read_files
from fastload.datasets.image_dataset import ImageDataset, OnError, check_options
from fastload.memory.compact import Strings

__all__ = ["ImageFolder", "ImageList"]


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
