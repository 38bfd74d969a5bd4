"""COCO detection samples in tar shards: what ``fastload.pack`` writes of a COCO dataset, read
back as torchvision's v2-wrapped ``CocoDetection`` gives its samples.

A pack of a COCO dataset holds ``KEY.jpg`` (the image file's bytes) and ``KEY.json`` (the
image's ``image_id`` and ``annotations``, as the annotation file gives them) for each image,
and the dataset's ``categories`` in its manifest. :class:`CocoShards` reads them with
everything of :class:`fastload.ImageShards` (local or remote shards, the cache,
:class:`fastload.ShardSampler`, ``on_error``) and makes each target the way
:class:`fastload.detection.CocoDetection` makes it from a folder: the same image gives the same
``(image, target)`` either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

from fastload import backends
from fastload.datasets import OnError
from fastload.detection.coco import target_keys_of
from fastload.detection.joint import JointDataset
from fastload.detection.targets import Step, coco_target, move_target, pycocotools_mask
from fastload.shards.dataset import ImageShards
from fastload.shards.storage.remote import DEFAULT_TIMEOUT

__all__ = ["CocoShards"]


class CocoShards(JointDataset, ImageShards):
    """A COCO dataset packed as tar shards (``fastload.pack`` of a ``CocoDetection``):
    ``ds[i]`` is ``(image, target)`` as :class:`fastload.detection.CocoDetection` gives it
    for the same image.

    Samples are numbered shard by shard, as :class:`fastload.ImageShards` numbers them (a pack
    shuffles the images across shards by default: the order is the pack's, not the ids').
    ``transforms`` is called as :class:`fastload.detection.CocoDetection` calls it: fastload's
    leading ops fused with decoding, or torchvision's v2 pipeline on the PIL image and target
    (which ``fastload.DataLoader(..., accelerate=True)`` translates).

    Args:
        source: A pack of a COCO dataset (a folder, its ``manifest.json``, or its URL), or any
            shards whose samples have an image and a ``.json`` member with ``image_id`` and
            ``annotations`` (see :class:`fastload.ImageShards` for the forms).
        transforms: What to do with each ``(image, target)`` (see above).
        target_keys: Which keys the target has, as for
            :class:`fastload.detection.CocoDetection`.
        backend: ``"auto"`` or a per-sample decoder of ``fastload.backends.names()``.
        on_error: ``"raise"`` or ``"skip"``, as for :class:`fastload.ImageShards`; a
            ``.json`` member without ``image_id`` and ``annotations`` makes its sample
            unreadable.
        max_pixels: Refuse images whose header claims more pixels.
        storage_options: For remote shards (see :class:`fastload.ImageShards`).
        cache_dir: For remote shards (see :class:`fastload.ImageShards`).
        cache_limit: For remote shards (see :class:`fastload.ImageShards`).
        timeout: For remote shards (see :class:`fastload.ImageShards`).

    Attributes:
        categories: The COCO categories the pack's manifest lists (empty for shards without
            a manifest).

    Raises:
        ValueError: A bad option or target key, or shards that cannot be read (see
            :class:`fastload.ImageShards`).
        fastload.MissingDependencyError: ``masks`` asked for without pycocotools.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        transforms: Callable[..., Any] | None = None,
        *,
        target_keys: Collection[str] | str | None = None,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.target_keys = target_keys_of(target_keys)
        if "masks" in self.target_keys:
            pycocotools_mask()  # missing: said now, with the install command, not per sample
        ImageShards.__init__(
            self,
            source,
            backend=backend,
            on_error=on_error,
            max_pixels=max_pixels,
            exif_orientation=False,
            target="json",
            storage_options=storage_options,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            timeout=timeout,
        )
        self.categories = list(self.manifest.categories) if self.manifest is not None else []
        self._setup_joint(transforms, backend, on_error, max_pixels)

    def subset(self, indices: Sequence[int]) -> CocoShards:
        """A copy holding the samples at ``indices``, in that order (see
        :meth:`fastload.ImageShards.subset`): what ``torch.utils.data.Subset`` of this dataset
        serves, as the references' training set keeps the images with annotations."""
        other: CocoShards = ImageShards.subset(self, indices)
        return other

    def make_target(self, index: int, extra: Any, canvas: tuple[int, int]) -> dict[str, Any]:
        """Sample ``index``'s target from its ``.json`` member (``extra``), on its canvas.

        Raises:
            ValueError: The member holds no ``image_id`` and ``annotations``.
        """
        if not (isinstance(extra, dict) and "image_id" in extra and "annotations" in extra):
            found = sorted(extra) if isinstance(extra, dict) else type(extra).__name__
            raise ValueError(
                f"its .json member holds {found}, not a COCO image's 'image_id' and "
                "'annotations' (what fastload.pack writes of a CocoDetection)"
            )
        return coco_target(extra["annotations"], extra["image_id"], canvas, self.target_keys)

    def move(self, target: Any, moving: Sequence[Step]) -> Any:
        return move_target(target, moving, mask_fill=self.mask_fill)
