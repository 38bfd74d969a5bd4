"""Translate a torchvision pipeline, whole or its leading part, and a dataset with it: the walk
over its ops (:mod:`fastload.accelerate.walk`) with each op's translator
(:mod:`fastload.accelerate.table`)."""

from __future__ import annotations

from typing import Any

import torch

from fastload import transforms as ft
from fastload.accelerate.hf_datasets import rows_transform
from fastload.accelerate.table import conversion_forms, translators
from fastload.accelerate.timm_ops import timm_folder
from fastload.accelerate.walk import (
    PER_SAMPLE,
    NotAccelerated,
    Translated,
    Walk,
    flatten,
    name_of,
    with_dtype,
)
from fastload.callables.handover import HandBack, HandOn
from fastload.datasets import ImageDataset, ImageList
from fastload.datasets.tables import TableRows, is_hf_dataset, is_hf_stream
from fastload.gpu.transforms import Normalize

__all__ = ["accelerate_dataset", "translate_transform"]


def translate_transform(
    transform: Any, *, given: str = "pil", batches: bool = True, policies: bool = False
) -> Translated:
    """Translate a torchvision transform into fastload's ops, whole or its leading part.

    When every op translates (and ``batches``), the geometry is fused with decoding and the
    conversion and ``Normalize`` become batch ops (and the ops that draw per image, drawn per
    sample: :mod:`fastload.gpu.deferred`). Otherwise the longest leading run of geometry is
    fused, the rest runs as written, per sample, on what torchvision would have at that point
    (:class:`HandOn`), except a trailing conversion that runs on batches (:class:`HandBack`).

    Args:
        transform: A torchvision op or ``Compose`` (v1 or v2) of them.
        given: What the transform gets: ``"pil"`` (a PIL image, as from torchvision's
            ``ImageFolder``) or ``"uint8"`` (a C x H x W uint8 tensor, after fastload's fused ops).
        batches: Whether the loader collates with torch's default collate, so that the
            conversion may run on whole batches; if not, it runs per sample, as written.
        policies: Whether torchvision's policies (``TrivialAugmentWide``, ``RandAugment``,
            ``AutoAugment``, ``AugMix``) and ``ColorJitter`` run on whole batches (drawn per
            sample): where the batch stage runs on a CUDA device. On the CPU Pillow's
            per-image ops are faster than the batched tensor ops, so there they run as
            written. (``RandomErasing`` after the conversion runs on batches either way.)

    Returns:
        The fused ops, the batch ops or the ops run as written, and what each came from.

    Raises:
        NotAccelerated: Not even the first op can be fused; names every op in the way.
    """
    if transform is None:
        raise NotAccelerated("transform=None", "the dataset yields PIL images, nothing to batch")
    if given not in ("pil", "uint8"):
        raise ValueError(f"given={given!r} is not valid; valid: 'pil', 'uint8'")
    table = translators()
    ops = list(flatten(transform, table))
    walk = Walk([], [], [], tensor=given == "uint8", policies=policies)
    blocked: list[tuple[str, str]] = []
    cut: int | None = None  # ops[:cut] are geometry on the PIL image: what a partial run fuses
    for i, op in enumerate(ops):
        fused, converted = len(walk.fused), len(walk.batch_from)
        try:
            translator = table.get(type(op))
            if translator is None:
                raise NotAccelerated(
                    name_of(op), "not an op fastload can run with the same meaning"
                )
            translator(walk, op)
            if not batches and len(walk.batch_from) > converted:
                raise NotAccelerated(with_dtype(op, walk.dtype), PER_SAMPLE)
        except NotAccelerated as why:  # the walk goes on: every blocker is named at once
            blocked.append((why.what, why.why))
        if cut is None and (blocked or len(walk.fused) == fused or walk.tensor):
            cut = i
    if not blocked and walk.tensor:
        return _whole(walk, transform)
    cut = cut if cut is not None else len(ops)
    return _partial(ops, walk.fused, cut, tuple(blocked), batches=batches, policies=policies)


def _whole(walk: Walk, transform: Any) -> Translated:
    """Every op translated: the geometry fused; the ops drawn per sample, the conversion and
    Normalize on batches, in the pipeline's order."""
    from fastload.gpu.deferred import Deferred

    deferred = [
        Deferred(op, slot, "ops" if slot < walk.before else "boxes")
        for slot, op in enumerate(walk.drawn)
    ]
    batch: list[Any] = deferred[: walk.before]
    if walk.dtype.is_floating_point:
        if walk.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise NotAccelerated(repr(transform), f"images of {walk.dtype}")
        mean, std = walk.mean or (0.0,), walk.std or (1.0,)
        batch.append(Normalize(mean, std, dtype=walk.dtype))
    batch += deferred[walk.before :]
    return Translated(
        tuple(walk.fused),
        tuple(batch),
        tuple(walk.fused_from),
        tuple(walk.batch_from),
        walk.dtype,
        drawn=tuple(walk.drawn),
    )


def _partial(
    ops: list[Any],
    fused: list[ft.Transform],
    cut: int,
    blockers: tuple[tuple[str, str], ...],
    *,
    batches: bool,
    policies: bool,
) -> Translated:
    """The leading geometry (``ops[:cut]``) fused; the rest as written, per sample, except a
    trailing conversion (and ``Normalize``, ``RandomErasing``) that can run on whole batches.

    Raises:
        NotAccelerated: Nothing leads that could be fused.
    """
    if cut == 0:
        if not blockers:  # a tensor given, nothing but conversions: the batch needs them
            blockers = ((name_of(ops[0]) if ops else "transform", PER_SAMPLE),)
        raise NotAccelerated(*blockers[0], blockers=blockers)
    rest, tail = ops[cut:], _batch_tail(ops, cut + 1, policies) if batches else None
    if tail is not None:
        rest = ops[cut : len(ops) - len(tail.batch_from)]
    hand_on = HandOn("pil")
    form = conversion_forms().get(type(rest[0])) if rest else None
    if form is not None:
        hand_on, rest = HandOn(form, repr(rest[0])), rest[1:]
    if tail is not None:
        first = ops[len(ops) - len(tail.batch_from)]
        rest.append(
            HandBack(tail.batch_from[0], tensors=conversion_forms()[type(first)] == "image")
        )
        if tail.drawn:  # drawn where torchvision draws them: after the ops run as written
            from fastload.gpu.deferred import DrawPerSample

            rest.append(DrawPerSample(tail.drawn))
    return Translated(
        tuple(fused[:cut]),
        tail.batch if tail is not None else (),
        tuple(repr(op) for op in ops[:cut]),
        tail.batch_from if tail is not None else (),
        tail.dtype if tail is not None else None,
        rest=tuple(rest),
        hand_on=hand_on,
        blockers=blockers,
    )


def _batch_tail(ops: list[Any], start: int, policies: bool) -> Translated | None:
    """The longest tail of ``ops`` (from ``start`` on) that begins with a conversion of a PIL
    image and runs whole on batches, translated; ``None`` when there is none."""
    table, forms = translators(), conversion_forms()
    for s in range(start, len(ops)):
        if type(ops[s]) not in forms:
            continue
        walk = Walk([], [], [], policies=policies)
        try:
            for op in ops[s:]:
                table[type(op)](walk, op)  # a KeyError: an op with no translator
                if walk.fused:  # geometry after the conversion: not batch work
                    break
            else:
                if walk.tensor:
                    return _whole(walk, ops[s:])
        except (KeyError, NotAccelerated):
            continue
    return None


def accelerate_dataset(
    dataset: Any,
    *,
    batches: bool = True,
    policies: bool = False,
    float_on_device: bool = False,
    stacks: str | None = None,
) -> tuple[ImageDataset, Translated]:
    """A fastload dataset that runs ``dataset``'s pipeline fused with decoding.

    Args:
        dataset: A ``torchvision.datasets.ImageFolder`` / ``DatasetFolder`` with torchvision's
            image loader, timm's ``ImageDataset`` over a folder, or a fastload dataset
            (``ImageFolder``, ``ImageList``, ``ImageShards``) whose ``transform`` is
            torchvision's (or timm's).
        batches: Whether batches are collated by torch's default collate (see
            :func:`translate_transform`).
        policies: Whether torchvision's policies run on batches (see
            :func:`translate_transform`).
        float_on_device: Detection: the image's float conversion may be left to the device
            (see :func:`fastload.accelerate.detection_ops.translate_joint`).
        stacks: A Hugging Face dataset's rows: the key whose images the loader's collate
            function provably stacks and reads nowhere else
            (:func:`fastload.accelerate.hf_datasets.stacked_column`); when it is the key the
            rows' transform writes, the conversion runs on the stacked batch.

    Returns:
        The dataset to load from (same samples, labels, classes and ``target_transform``;
        EXIF orientation as the original applies it), and the translation, whose ``batch_ops``
        complete the pipeline on whole batches (or whose ``rest`` runs per sample, as written).

    Raises:
        NotAccelerated: The dataset or an op of its transform cannot be run fastload's way.
    """
    from fastload.accelerate.detection_ops import accelerate_detection, is_detection

    if is_detection(dataset):  # images with boxes and masks: COCO, torchvision's or fastload's
        return accelerate_detection(dataset, float_on_device=float_on_device)
    if isinstance(dataset, ImageDataset):  # fastload's own: a folder, a list, shards
        return _accelerate_own(dataset, batches=batches, policies=policies)
    if is_hf_dataset(dataset):  # its with_transform, of transformers' example's shape
        return _accelerate_rows(dataset, policies=policies, stacks=stacks)
    if is_hf_stream(dataset):
        raise NotAccelerated(
            type(dataset).__name__,
            "a streaming datasets.IterableDataset runs as written; "
            "fastload.ImageTableStream(stream, transform) reads its images fused with the "
            "transform",
        )
    timm = timm_folder(dataset)  # timm's ImageDataset over a folder (its train.py's)
    if timm is not None:
        classes = sorted(timm.class_to_idx, key=timm.class_to_idx.__getitem__)
        return _as_list(
            dataset, timm.paths, timm.labels, classes, timm.class_to_idx, batches, policies
        )
    from torchvision.datasets import DatasetFolder
    from torchvision.datasets.folder import default_loader, pil_loader

    name = type(dataset).__name__
    if not isinstance(dataset, DatasetFolder):
        raise NotAccelerated(
            name,
            "not a torchvision ImageFolder / DatasetFolder, a timm ImageDataset or a fastload "
            "dataset",
        )
    if type(dataset).__getitem__ is not DatasetFolder.__getitem__:
        raise NotAccelerated(name, "it overrides __getitem__")
    if dataset.loader is not pil_loader and dataset.loader is not default_loader:
        raise NotAccelerated(f"loader={name_of(dataset.loader)}", "a custom image loader")
    import torchvision

    if dataset.loader is default_loader and torchvision.get_image_backend() != "PIL":
        raise NotAccelerated("loader", f"torchvision's {torchvision.get_image_backend()} backend")
    paths = [path for path, _ in dataset.samples]
    labels = [label for _, label in dataset.samples]
    return _as_list(
        dataset, paths, labels, dataset.classes, dataset.class_to_idx, batches, policies
    )


def _as_list(
    dataset: Any,
    paths: list[str],
    labels: list[int],
    classes: list[str],
    class_to_idx: dict[str, int],
    batches: bool,
    policies: bool,
) -> tuple[ImageDataset, Translated]:
    """A dataset of image files (torchvision's or timm's) as a fastload ``ImageList`` running
    its transform translated."""
    translated = translate_transform(dataset.transform, batches=batches, policies=policies)
    fast = ImageList(
        paths,
        labels,
        translated.transform,
        dataset.target_transform,
        classes=classes,
        exif_orientation=False,  # torchvision's and timm's loaders keep the stored pixels
    )
    fast.class_to_idx = dict(class_to_idx)
    return fast, translated


def _accelerate_rows(
    dataset: Any, *, policies: bool, stacks: str | None
) -> tuple[ImageDataset, Translated]:
    """:func:`accelerate_dataset` for a Hugging Face dataset whose ``with_transform`` is of
    transformers' example's shape (:mod:`fastload.accelerate.hf_datasets`): its rows read as
    :class:`TableRows`, the image column decoded fused with the function's pipeline (EXIF
    orientation applied, as ``datasets`` applies it); the conversion on the stacked batch when
    the collate function stacks the images the function writes (``stacks``), else per row.

    Raises:
        NotAccelerated: The function is not of that shape (and the hint that
            :class:`fastload.ImageTable` reads the images), or its pipeline cannot be fused.
    """
    try:
        work = rows_transform(dataset)
    except NotAccelerated as why:
        raise NotAccelerated(
            why.what,
            f"{why.why}: it runs as you wrote it; fastload.ImageTable(dataset, transform) reads "
            "the images fused with the transform",
        ) from None
    rows = TableRows(dataset, work.pipeline, image=work.image, key=work.key)
    return _accelerate_own(rows, batches=stacks == work.key, policies=policies)


def _accelerate_own(
    dataset: ImageDataset, *, batches: bool, policies: bool
) -> tuple[ImageDataset, Translated]:
    """:func:`accelerate_dataset` for a fastload dataset: a torchvision transform in place of
    fastload's ops, or torchvision's tensor ops after them (those move to the batch)."""
    split = dataset.transform_split
    if split.pil is not None:
        translated = translate_transform(split.pil, batches=batches, policies=policies)
        return dataset.with_transform(translated.transform), translated
    if not split.after:
        raise NotAccelerated(
            type(dataset).__name__, "its transform is fastload's own already (nothing to do)"
        )
    rest = translate_transform(list(split.after), given="uint8", batches=batches, policies=policies)
    translated = Translated(
        split.fused + rest.fused,
        rest.batch,
        tuple(repr(op) for op in split.fused) + rest.fused_from,
        rest.batch_from,
        rest.dtype,
        drawn=rest.drawn,
    )
    return dataset.with_transform(translated.transform), translated
