"""COCO-format detection over a folder, read fastload's way.

:class:`CocoDetection` gives, for the same annotation file and folder, the samples that
``wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection(root, annFile))`` gives:
the same order (image ids sorted), the same targets
(:func:`fastload.detection.targets.coco_target`).
What differs is the way there: fastload's planned ops (``fastload.transforms``) at the head of
``transforms`` run fused with decoding, and the boxes and masks move with them; the ops after
them get ``(image, target)`` and run as written. ``fastload.DataLoader(...,
accelerate=True)`` makes one from torchvision's wrapped dataset and its v2 pipeline.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

from fastload import backends
from fastload.backends.files import read_file
from fastload.datasets import OnError, check_options
from fastload.detection.joint import JointDataset
from fastload.detection.targets import (
    DEFAULT_KEYS,
    TARGET_KEYS,
    Step,
    coco_target,
    move_target,
    pycocotools_mask,
)
from fastload.shards.format.coco import CocoImages, read_coco, torchvision_coco

__all__ = ["CocoDetection", "as_coco", "target_keys_of"]


class CocoDetection(JointDataset):
    """Images of a folder with their COCO-format annotations: ``ds[i]`` is ``(image,
    target)`` as torchvision's v2-wrapped ``CocoDetection`` gives it.

    The image is a C x H x W uint8 ``tv_tensors.Image`` when ``transforms`` is ``None`` or
    ends with fastload's ops. ``transforms`` is called as ``transforms(image, target)``:

    * a ``fastload.transforms.Compose`` whose leading ops are fastload's: those run fused with
      decoding and move the target's boxes and masks alike; the callables after them get
      ``(image, target)`` (a ``HandOn`` among them gets the image alone);
    * anything else (torchvision's v2 pipeline): it gets the PIL image and the target, as
      torchvision's wrapped dataset gives them.

    Args:
        root: The folder the annotations' ``file_name`` are relative to.
        annFile: The COCO annotation file (JSON), or its content already parsed (as
            pycocotools' ``COCO.dataset`` holds it).
        transforms: What to do with each ``(image, target)`` (see above).
        ids: The image ids to read, in this order; ``None``: every image, sorted by id.
        target_keys: Which keys the target has (torchvision's wrapper's ``target_keys``):
            a collection of ``"image_id"``, ``"boxes"``, ``"masks"``, ``"labels"`` and COCO's
            own keys, or ``"all"``; ``None``: ``image_id``, ``boxes`` and ``labels``.
        backend: ``"auto"`` or a per-sample decoder of ``fastload.backends.names()``.
        on_error: ``"raise"`` or ``"skip"`` (see ``fastload.ImageList``).
        max_pixels: Refuse images whose header claims more pixels.

    Raises:
        ValueError: A bad option, a target key torchvision does not offer, an annotation
            naming an image the file does not list, or an id that is not an image's.
        fastload.MissingDependencyError: ``masks`` asked for without pycocotools.
        FileNotFoundError: ``annFile`` does not exist.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        annFile: str | os.PathLike[str] | dict[str, Any],  # torchvision's name
        transforms: Callable[..., Any] | None = None,
        *,
        ids: Collection[int] | None = None,
        target_keys: Collection[str] | str | None = None,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
    ) -> None:
        check_options(on_error, max_pixels)
        self.root = os.fspath(root)
        self.target_keys = target_keys_of(target_keys)
        if "masks" in self.target_keys:
            pycocotools_mask()  # missing: said now, with the install command, not per sample
        images = read_coco(self.root, annFile, ids)
        self.ids, self._files = images.ids, images.files
        self._annotations, self.categories = images.annotations, images.categories
        self._setup_joint(transforms, backend, on_error, max_pixels)

    def __len__(self) -> int:
        return len(self.ids)

    def path(self, index: int) -> str:
        """The file of image ``index``."""
        return os.path.join(self.root, self._files[index])

    def annotations(self, index: int) -> list[dict[str, Any]]:
        """Image ``index``'s annotations, as its annotation file gives them."""
        return self._annotations[index]

    def coco_images(self) -> CocoImages:
        """Its images, ids and annotations, in its order (what ``fastload.pack`` writes)."""
        return CocoImages(self.root, self.ids, self._files, self._annotations, self.categories)

    def read_sample(self, index: int) -> tuple[bytes, list[dict[str, Any]]]:
        """The bytes of image ``index``'s file, and its annotations."""
        return read_file(self.path(index)), self._annotations[index]

    def subset(self, indices: Sequence[int]) -> CocoDetection:
        """A copy holding the images at ``indices``, in that order (what
        ``torch.utils.data.Subset(self, indices)`` serves, as a dataset of its own).

        The copy shares the transforms, the backend and :attr:`bad_files` with this dataset.
        """
        other = copy.copy(self)
        picked = [int(i) for i in indices]
        other.ids = [self.ids[i] for i in picked]
        other._files = [self._files[i] for i in picked]
        other._annotations = [self._annotations[i] for i in picked]
        return other

    def make_target(self, index: int, extra: Any, canvas: tuple[int, int]) -> dict[str, Any]:
        """Image ``index``'s target from its annotations (``extra``), on its canvas."""
        return coco_target(extra, self.ids[index], canvas, self.target_keys)

    def move(self, target: Any, moving: Sequence[Step]) -> Any:
        return move_target(target, moving, mask_fill=self.mask_fill)


def as_coco(dataset: Any) -> CocoDetection | None:
    """``dataset`` as fastload's :class:`CocoDetection` (the same images, ids and
    annotations), if it is one, or torchvision's ``CocoDetection`` (v2-wrapped or not);
    ``None`` for any other dataset."""
    if isinstance(dataset, CocoDetection):
        return dataset
    found = torchvision_coco(dataset)
    return None if found is None else CocoDetection(found[0], found[1], ids=found[2])


def target_keys_of(keys: Collection[str] | str | None) -> frozenset[str]:
    """The target keys ``target_keys=`` names (torchvision's wrapper's meaning).

    Raises:
        ValueError: A key torchvision does not offer, or a string other than ``"all"``.
    """
    if keys is None:
        return DEFAULT_KEYS
    if keys == "all":
        return TARGET_KEYS
    if isinstance(keys, str) or not set(keys) <= TARGET_KEYS:
        raise ValueError(
            f"target_keys={keys!r} is not valid; valid: 'all', None, or a collection of "
            f"{', '.join(sorted(TARGET_KEYS))}"
        )
    return frozenset(keys)
