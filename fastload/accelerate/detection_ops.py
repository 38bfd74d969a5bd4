"""torchvision's v2 detection and segmentation pipelines, fastload's way: the leading geometry
of the pipeline (``RandomShortestSize``, ``RandomResize``, ``ScaleJitter``, ``Resize``,
``RandomCrop``, ``RandomIoUCrop``, ``RandomHorizontalFlip``: the detection references'
``hflip``, ``multiscale``, ``ssdlite`` and ``ssd`` presets, ``lsj`` up to the references' own
``FixedSizeCrop``, the segmentation references' train preset) fused with
decoding, the boxes and masks moved with it (:mod:`fastload.detection.targets`), and the ops
after it run as written on ``(image, target)``, so that ``SanitizeBoundingBoxes``,
``ConvertBoundingBoxFormat`` and the rest keep torchvision's own meaning.

The dataset is ``wrap_dataset_for_transforms_v2`` of torchvision's ``CocoDetection`` or
``VOCSegmentation`` (or a ``Subset`` of it, as the references' detection training set is), or
fastload's own :class:`fastload.detection.CocoDetection` or
:class:`fastload.detection.SegmentationList` with a v2 pipeline. The segmentation references'
geometry (``RandomResize``, ``RandomCrop`` with padding and the mask's own fill) is fused the
same way.
"""

from __future__ import annotations

from typing import Any

from fastload import transforms as ft
from fastload.accelerate.torchvision_ops import RandomCropV2
from fastload.accelerate.walk import NotAccelerated, Translated, flatten, interpolation, name_of
from fastload.callables.handover import HandOn
from fastload.detection import CocoDetection, SegmentationList
from fastload.detection.convert import FloatImage, FloatOnDevice
from fastload.detection.iou_crop import RandomIoUCrop
from fastload.detection.joint import JointDataset, Undrawn
from fastload.detection.sanitize import KeepAllFirst
from fastload.detection.segmentation import TargetFirst
from fastload.detection.ssd import PhotometricFirst, RandomZoomOut
from fastload.gpu.transforms import ToFloat

__all__ = ["accelerate_detection", "is_detection", "translate_joint"]

AS_WRITTEN = "runs as written, per sample, on the fused image and its moved target"


def is_detection(dataset: Any) -> bool:
    """Whether ``dataset`` is one for this module: a dataset torchvision's
    ``wrap_dataset_for_transforms_v2`` wrapped (or a ``Subset`` of one; of those, fastload reads
    ``CocoDetection`` and ``VOCSegmentation``), or one of fastload's ``JointDataset``."""
    from torch.utils.data import Subset

    from fastload.compat import tv_tensor_wrapped

    if type(dataset) is Subset:
        return is_detection(dataset.dataset)
    return isinstance(dataset, JointDataset) or tv_tensor_wrapped(dataset) is not None


def accelerate_detection(
    dataset: Any, *, float_on_device: bool = False
) -> tuple[JointDataset, Translated]:
    """A fastload dataset (``CocoDetection``, ``SegmentationList``) that runs ``dataset``'s v2
    pipeline fused with decoding (``float_on_device``: see :func:`translate_joint`).

    Returns:
        The dataset to load from (given a ``Subset``, the images it serves, in its order), and
        the translation.

    Raises:
        NotAccelerated: The dataset or its pipeline cannot be read fastload's way.
    """
    from torch.utils.data import Subset

    if type(dataset) is Subset:
        fast, translated = accelerate_detection(dataset.dataset, float_on_device=float_on_device)
        return fast.subset(dataset.indices), translated
    if isinstance(dataset, JointDataset):
        if dataset.transform_split.pil is None:
            raise NotAccelerated(
                type(dataset).__name__, "its transforms are fastload's own already"
            )
        stacked = isinstance(dataset, SegmentationList)
        translated = translate_joint(
            dataset.transforms, stacked=stacked, float_on_device=float_on_device
        )
        return dataset.with_transform(translated.transform), translated
    return _from_torchvision(dataset, float_on_device=float_on_device)


def _from_torchvision(dataset: Any, *, float_on_device: bool) -> tuple[JointDataset, Translated]:
    import torchvision
    from torchvision.datasets import CocoDetection as TorchvisionCoco
    from torchvision.datasets import VOCSegmentation
    from torchvision.datasets.vision import StandardTransform

    from fastload.compat import tv_tensor_wrapped

    wrapped = tv_tensor_wrapped(dataset)
    if wrapped is None:
        raise NotAccelerated(type(dataset).__name__, "not a v2-wrapped torchvision dataset")
    inner, keys = wrapped
    if type(inner) not in (TorchvisionCoco, VOCSegmentation):
        raise NotAccelerated(
            type(inner).__name__, "fastload reads torchvision's CocoDetection and VOCSegmentation"
        )
    if torchvision.get_image_backend() != "PIL":
        raise NotAccelerated("loader", f"torchvision's {torchvision.get_image_backend()} backend")
    transforms = dataset.transforms
    if isinstance(transforms, StandardTransform):  # transform= given, not transforms=
        raise NotAccelerated(
            "transform=", "a transform of the image alone would leave its target where it was"
        )
    stacked = type(inner) is VOCSegmentation
    translated = translate_joint(transforms, stacked=stacked, float_on_device=float_on_device)
    if type(inner) is VOCSegmentation:
        return SegmentationList(inner.images, inner.masks, translated.transform), translated
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
    if kind is v2.RandomZoomOut:
        return _zoom_out(op)
    if kind is v2.RandomIoUCrop:
        return RandomIoUCrop(
            op.min_scale,
            op.max_scale,
            op.min_aspect_ratio,
            op.max_aspect_ratio,
            op.options,
            op.trials,
        )
    if kind is v2.RandomCrop:
        return _random_crop(op)
    if _is_references_pad(op):
        return _pad_if_smaller(op)
    if kind not in (v2.RandomShortestSize, v2.Resize, v2.RandomResize, v2.ScaleJitter):
        return None
    if op.antialias is not True:
        raise NotAccelerated(repr(op), "antialias=False (fastload resamples with antialiasing)")
    if kind is v2.RandomShortestSize:
        return ft.RandomShortestSize(
            list(op.min_size), op.max_size, interpolation=interpolation(op)
        )
    if kind is v2.RandomResize:
        return ft.RandomResize(op.min_size, op.max_size, interpolation=interpolation(op))
    if kind is v2.ScaleJitter:
        return ft.ScaleJitter(op.target_size, op.scale_range, interpolation=interpolation(op))
    if op.size is None:
        raise NotAccelerated(repr(op), "size=None (max_size alone)")
    return ft.Resize(op.size, interpolation(op), max_size=op.max_size)


def _random_crop(op: Any) -> ft.Transform:
    """v2's ``RandomCrop``: without padding, v2's draws; with it, the image padded with zeros
    and masks with their own fill."""
    from PIL import Image
    from torchvision import tv_tensors

    if op.padding is None and not op.pad_if_needed:
        return RandomCropV2(tuple(op.size))
    if op.padding_mode != "constant":
        raise NotAccelerated(
            repr(op), f"padding_mode={op.padding_mode!r} (fastload pads with a fill)"
        )
    fills = dict(op.fill)
    image_fill = fills.get(Image.Image, fills.get("others"))
    if not _zero(image_fill):
        raise NotAccelerated(repr(op), f"the image's fill {image_fill!r} (fastload pads with 0)")
    mask_fill = fills.get(tv_tensors.Mask, fills.get("others"))
    return ft.RandomCropWithPadding(
        tuple(op.size),
        padding=tuple(op.padding) if op.padding is not None else (0, 0, 0, 0),
        pad_if_needed=op.pad_if_needed,
        mask_fill=int(mask_fill) if mask_fill is not None else 0,
    )


def _is_references_pad(op: Any) -> bool:
    """Whether ``op`` is the segmentation references' own ``PadIfSmaller`` (their
    ``v2_extras``): a v2 op of that name, with an int ``size``, whose drawn padding is right
    and bottom up to ``size`` (asked of its own ``make_params`` for two images)."""
    import torch
    import torchvision.transforms.v2 as v2
    from torchvision import tv_tensors

    if type(op).__name__ != "PadIfSmaller" or not isinstance(op, v2.Transform):
        return False
    size = getattr(op, "size", None)
    if not isinstance(size, int) or size < 2 or not isinstance(getattr(op, "fill", None), dict):
        return False
    small = tv_tensors.Image(torch.zeros((1, 1, 1), dtype=torch.uint8).expand(3, 1, size - 1))
    large = tv_tensors.Image(torch.zeros((1, 1, 1), dtype=torch.uint8).expand(3, size, size))
    try:
        padded, kept = op.make_params([small]), op.make_params([large])
    except Exception:
        return False
    return (
        list(padded.get("padding", ())) == [0, 0, 1, size - 1]
        and padded.get("needs_padding") is True
        and kept.get("needs_padding") is False
    )


def _pad_if_smaller(op: Any) -> ft.PadIfSmaller:
    from PIL import Image
    from torchvision import tv_tensors

    image_fill, mask_fill = _fill_for(op.fill, Image.Image), _fill_for(op.fill, tv_tensors.Mask)
    if not _zero(image_fill):
        raise NotAccelerated(repr(op), f"the image's fill {image_fill!r} (fastload pads with 0)")
    return ft.PadIfSmaller(op.size, mask_fill=int(mask_fill) if mask_fill is not None else 0)


def _fill_for(fills: dict[Any, Any], kind: type) -> Any:
    """The fill v2 finds for ``kind`` in a fill dict: the type's own, else ``"others"``,
    else none (looked up with ``in`` and ``get()``, never ``[]``, so that a
    ``defaultdict``'s default is not made up, as v2 never finds it)."""
    return fills[kind] if kind in fills else fills.get("others")


def _is_voc_converter(op: Any) -> bool:
    """Whether ``op`` is the segmentation references' ``CocoDetectionToVOCSegmentation``
    (their ``v2_extras``; known by its name): it merges COCO's instance masks into one class
    mask, reading no pixel and drawing nothing."""
    import torchvision.transforms.v2 as v2

    return type(op).__name__ == "CocoDetectionToVOCSegmentation" and isinstance(op, v2.Transform)


def _converts_to_float32(op: Any, form: str) -> bool:
    """Whether ``op`` is v2's ``ToDtype`` making the image (a ``tv_tensors.Image`` for the
    ``"image"`` form, a plain tensor for ``"uint8"``) float32 scaled to [0, 1]."""
    import torch
    import torchvision.transforms.v2 as v2
    from torchvision import tv_tensors

    if type(op) is not v2.ToDtype or not op.scale:
        return False
    dtype = op.dtype
    if isinstance(dtype, dict):
        kind = tv_tensors.Image if form == "image" else torch.Tensor
        dtype = dtype.get(kind, dtype.get("others"))
    return dtype is torch.float32


def _float_later(rest: list[Any]) -> bool:
    """Whether ``rest`` is v2's ``ToDtype(torch.float32, scale=True)`` (images only) followed
    only by ops that leave the image's values unread: boxes' formats and clamps,
    ``SanitizeBoundingBoxes`` finding the labels its default way, ``ToPureTensor``."""
    import torch
    import torchvision.transforms.v2 as v2

    if not rest or type(rest[0]) is not v2.ToDtype or not rest[0].scale:
        return False
    if rest[0].dtype is not torch.float32:  # a dict of dtypes may convert more than the image
        return False
    unread = (v2.ConvertBoundingBoxFormat, v2.ClampBoundingBoxes, v2.ToPureTensor)
    return all(type(op) in unread or _sanitizes_by_default(op) for op in rest[1:])


def _draws_nothing(op: Any) -> bool:
    """Whether ``op`` is a v2 op that draws no random number (a conversion, a box format,
    ``SanitizeBoundingBoxes`` finding the labels its default way)."""
    import torchvision.transforms.v2 as v2

    quiet = (
        v2.ToImage,
        v2.PILToTensor,
        v2.ToDtype,
        v2.ToPureTensor,
        v2.Normalize,
        v2.ConvertBoundingBoxFormat,
        v2.ClampBoundingBoxes,
    )
    if type(op) in quiet:
        return True
    return isinstance(op, KeepAllFirst) or _sanitizes_by_default(op)


def _sanitizes_by_default(op: Any) -> bool:
    """Whether ``op`` is v2's ``SanitizeBoundingBoxes`` finding the labels its default way."""
    import torchvision.transforms.v2 as v2

    return type(op) is v2.SanitizeBoundingBoxes and op.labels_getter == "default"


def _is_geometry(op: Any) -> bool:
    try:
        return _geometry(op) is not None
    except NotAccelerated:
        return True


def _zoom_out(op: Any) -> RandomZoomOut:
    """v2's ``RandomZoomOut``, with the fills v2 finds for a PIL image and a mask (a type in
    the fill dict, else its ``"others"``, else none: 0. A ``defaultdict``'s default is never
    found that way, so the SSD preset's mean reaches masks and PIL images as 0)."""
    from PIL import Image
    from torchvision import tv_tensors

    fills = op.fill if isinstance(op.fill, dict) else {"others": op.fill}
    image, mask = _fill_for(fills, Image.Image), _fill_for(fills, tv_tensors.Mask)
    colour = (
        (0, 0, 0)
        if image is None
        else tuple(image)
        if isinstance(image, (list, tuple))
        else (image,) * 3
    )
    return RandomZoomOut(
        image_fill=colour,
        mask_fill=int(mask) if mask is not None else 0,
        side_range=tuple(op.side_range),
        p=op.p,
    )


def _zero(fill: Any) -> bool:
    if fill is None or isinstance(fill, (int, float)):
        return not fill
    return all(v == 0 for v in fill)


def translate_joint(
    transforms: Any, *, stacked: bool = False, float_on_device: bool = False
) -> Translated:
    """Translate a v2 pipeline called as ``transforms(image, target)``: its leading geometry
    fused, the rest as written.

    Args:
        transforms: The pipeline.
        stacked: The samples are batched by stacking them (segmentation: images and masks of
            one size): a float conversion then makes the image in plain memory
            (:class:`fastload.detection.convert.FloatImage`).
        float_on_device: The batches go to a CUDA device, collated by a function that leaves
            the images as they are: a float conversion of the image followed only by ops that
            do not read its values is left to the device (a batch op,
            :class:`fastload.gpu.ToFloat`), the images crossing as uint8.

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
        if not fused and _is_voc_converter(op):
            fused.append(TargetFirst(op))  # the class mask it makes moves with the geometry
            continue
        if not fused and type(op) is v2.RandomPhotometricDistort:
            fused.append(PhotometricFirst(op))  # drawn first, applied to the whole image
            continue
        ours = _geometry(op)
        if ours is None:
            break
        if isinstance(ours, ft.Resize) and any(isinstance(f, ft.Resize) for f in fused):
            raise NotAccelerated(repr(op), "a second resize (fastload resamples once)")
        fused.append(ours)
    if fused and all(isinstance(f, (PhotometricFirst, TargetFirst)) for f in fused):
        after = name_of(ops[len(fused)]) if len(ops) > len(fused) else "nothing"
        raise NotAccelerated(repr(ops[0]), f"no geometry fastload fuses follows it ({after})")
    # a class mask made by the first op: segmentation samples, batched by stacking
    stacked = stacked or any(isinstance(f, TargetFirst) for f in fused)
    if not fused:
        first = ops[0] if ops else transforms
        why = "not geometry fastload moves boxes and masks with"
        if isinstance(first, (v2.ToImage, v2.PILToTensor)):
            why = "the geometry after it would resample a tensor, which fastload does not match"
            if not any(_is_geometry(op) for op in ops[1:]):
                why = "no geometry follows: nothing to fuse (the image is decoded whole either way)"
        raise NotAccelerated(name_of(first), why)
    fills = {op.mask_fill for op in fused if hasattr(op, "mask_fill")}
    if len(fills) > 1:  # the masks' padding is one value (fastload.detection.joint)
        raise NotAccelerated(repr(transforms), f"ops that pad masks with different fills {fills}")
    rest = ops[len(fused) :]
    hand_on = HandOn("pil")
    form = conversion_forms().get(type(rest[0])) if rest else None
    if form in ("uint8", "image"):
        hand_on, rest = HandOn(form, repr(rest[0])), rest[1:]
    later = float_on_device and not stacked and form in ("uint8", "image") and _float_later(rest)
    if later:  # the conversion moves to the batches, its fallback to the end of the rest
        rest = [*rest[1:], rest[0]]
    blockers = ((name_of(rest[0]), AS_WRITTEN),) if rest else ()
    batch, rest = _per_sample_rest(rest, form, stacked=stacked, later=later)
    return Translated(
        tuple(fused),
        batch,
        tuple(repr(op) for op in ops[: len(fused)]),
        tuple(f"{op.to_dtype!r} (the image's part)" for op in rest if type(op) is FloatOnDevice),
        None,
        rest=tuple(rest),
        hand_on=hand_on,
        blockers=blockers,
    )


def _per_sample_rest(
    rest: list[Any], form: str | None, *, stacked: bool, later: bool
) -> tuple[tuple[Any, ...], list[Any]]:
    """The batch ops and the ops run per sample after the fused ones and the hand-on: the
    image's float conversion made where it costs least (``later``: on the device, the
    ``ToDtype`` last in ``rest``), ``SanitizeBoundingBoxes`` skipping its copy where it keeps
    every box, what draws nothing marked as such."""
    batch: tuple[Any, ...] = ()
    if later:
        batch, rest = (ToFloat(),), [*rest[:-1], FloatOnDevice(rest[-1])]
    elif rest and form in ("uint8", "image") and _converts_to_float32(rest[0], form):
        rest = [FloatImage(rest[0], stacked=stacked), *rest[1:]]
    rest = [KeepAllFirst(op) if _sanitizes_by_default(op) else op for op in rest]
    # what draws nothing runs outside the draws' lock in thread workers
    return batch, [Undrawn(op) if _draws_nothing(op) else op for op in rest]
