"""torchvision's v2 detection pipelines on COCO, fastload's way: the leading geometry of the
pipeline (``RandomShortestSize``, ``Resize``, ``RandomHorizontalFlip``: the references'
``hflip`` and ``multiscale`` presets and their eval preset) fused with decoding, the boxes and
masks moved with it (:mod:`fastload.detection.targets`), and the ops after it run as written
on ``(image, target)``, so that ``SanitizeBoundingBoxes``, ``ConvertBoundingBoxFormat`` and the
rest keep torchvision's own meaning.

The dataset is ``wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection(...))``
(or a ``Subset`` of it, as the references' training set is), or fastload's own
:class:`fastload.detection.CocoDetection` with a v2 pipeline.
"""

from __future__ import annotations

from typing import Any

from fastload import transforms as ft
from fastload.accelerate.walk import NotAccelerated, Translated, flatten, interpolation, name_of
from fastload.detection import CocoDetection
from fastload.handover import HandOn

__all__ = ["accelerate_detection", "is_detection", "translate_joint"]

AS_WRITTEN = "runs as written, per sample, on the fused image and its moved target"


def is_detection(dataset: Any) -> bool:
    """Whether ``dataset`` is one this module reads: torchvision's v2-wrapped COCO dataset (or a
    ``Subset`` of one), or fastload's ``CocoDetection``."""
    from torch.utils.data import Subset

    from fastload.compat import tv_tensor_wrapped

    if type(dataset) is Subset:
        return is_detection(dataset.dataset)
    return isinstance(dataset, CocoDetection) or tv_tensor_wrapped(dataset) is not None


def accelerate_detection(dataset: Any) -> tuple[CocoDetection, Translated]:
    """A fastload ``CocoDetection`` that runs ``dataset``'s v2 pipeline fused with decoding.

    Returns:
        The dataset to load from (given a ``Subset``, the images it serves, in its order), and
        the translation.

    Raises:
        NotAccelerated: The dataset or its pipeline cannot be read fastload's way.
    """
    from torch.utils.data import Subset

    if type(dataset) is Subset:
        fast, translated = accelerate_detection(dataset.dataset)
        return fast.subset(dataset.indices), translated
    if isinstance(dataset, CocoDetection):
        if dataset.transform_split.pil is None:
            raise NotAccelerated(
                type(dataset).__name__, "its transforms are fastload's own already"
            )
        translated = translate_joint(dataset.transforms)
        return dataset.with_transform(translated.transform), translated
    return _from_torchvision(dataset)


def _from_torchvision(dataset: Any) -> tuple[CocoDetection, Translated]:
    import torchvision
    from torchvision.datasets import CocoDetection as TorchvisionCoco
    from torchvision.datasets.vision import StandardTransform

    from fastload.compat import tv_tensor_wrapped

    wrapped = tv_tensor_wrapped(dataset)
    if wrapped is None:
        raise NotAccelerated(type(dataset).__name__, "not a v2-wrapped CocoDetection")
    inner, keys = wrapped
    if type(inner) is not TorchvisionCoco:
        raise NotAccelerated(type(inner).__name__, "fastload reads torchvision's CocoDetection")
    if torchvision.get_image_backend() != "PIL":
        raise NotAccelerated("loader", f"torchvision's {torchvision.get_image_backend()} backend")
    transforms = dataset.transforms
    if isinstance(transforms, StandardTransform):  # transform= given, not transforms=
        raise NotAccelerated(
            "transform=", "a transform of the image alone would leave the boxes where they were"
        )
    translated = translate_joint(transforms)
    try:
        fast = CocoDetection(
            inner.root, inner.coco.dataset, translated.transform, ids=inner.ids, target_keys=keys
        )
    except ValueError as exc:
        raise NotAccelerated(type(inner).__name__, str(exc)) from None
    return fast, translated


def _geometry(op: Any) -> ft.Transform | None:
    """fastload's planned op for a v2 geometry op that moves targets as torchvision moves them;
    ``None`` for any other op."""
    import torchvision.transforms.v2 as v2

    kind = type(op)
    if kind is v2.RandomHorizontalFlip:
        return ft.RandomHorizontalFlip(op.p)
    if kind not in (v2.RandomShortestSize, v2.Resize):
        return None
    if op.antialias is not True:
        raise NotAccelerated(repr(op), "antialias=False (fastload resamples with antialiasing)")
    if kind is v2.RandomShortestSize:
        return ft.RandomShortestSize(
            list(op.min_size), op.max_size, interpolation=interpolation(op)
        )
    if op.size is None:
        raise NotAccelerated(repr(op), "size=None (max_size alone)")
    return ft.Resize(op.size, interpolation(op), max_size=op.max_size)


def translate_joint(transforms: Any) -> Translated:
    """Translate a v2 pipeline called as ``transforms(image, target)``: its leading geometry
    fused, the rest as written.

    Raises:
        NotAccelerated: Its first op is not geometry fastload moves targets with (or there is
            no op), or a second op resizes.
    """
    import torchvision.transforms.v2 as v2

    from fastload.accelerate.table import conversion_forms

    if transforms is None:
        raise NotAccelerated("transforms=None", "the dataset yields PIL images, nothing to fuse")
    ops = list(flatten(transforms, ()))
    fused: list[ft.Transform] = []
    for op in ops:
        ours = _geometry(op)
        if ours is None:
            break
        if isinstance(ours, ft.Resize) and any(isinstance(f, ft.Resize) for f in fused):
            raise NotAccelerated(repr(op), "a second resize (fastload resamples once)")
        fused.append(ours)
    if not fused:
        first = ops[0] if ops else transforms
        why = "not geometry fastload moves boxes and masks with"
        if isinstance(first, (v2.ToImage, v2.PILToTensor)):
            why = "the geometry after it would resample a tensor, which fastload does not match"
        raise NotAccelerated(name_of(first), why)
    rest = ops[len(fused) :]
    hand_on = HandOn("pil")
    form = conversion_forms().get(type(rest[0])) if rest else None
    if form in ("uint8", "image"):
        hand_on, rest = HandOn(form, repr(rest[0])), rest[1:]
    return Translated(
        tuple(fused),
        (),
        tuple(repr(op) for op in ops[: len(fused)]),
        (),
        None,
        rest=tuple(rest),
        hand_on=hand_on,
        blockers=tuple((name_of(op), AS_WRITTEN) for op in rest[:1]),
    )
