"""The detection references' v2 pipelines on a COCO set, accelerated, against torchvision's own
wrapped ``CocoDetection`` running them: sample by sample, same seeds.

The presets are built here as ``references/detection/presets.py`` builds them (backend "pil",
``use_v2=True``), from torchvision's own ops; the dataset as its ``coco_utils.get_coco`` builds
it (``wrap_dataset_for_transforms_v2`` with its target keys, and the training set a ``Subset``
of the images with annotations); batches with its ``collate_fn`` (``tuple(zip(*batch))``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
import torchvision.transforms.v2 as T
from cocosets import coco_set, grey_and_cmyk
from torchvision import tv_tensors
from torchvision.datasets import CocoDetection as TorchvisionCoco

import fastload
from fastload.accelerate import NotAccelerated, accelerate_dataset
from fastload.detection import CocoDetection

MULTISCALE = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
MEAN = (123.0, 117.0, 104.0)  # the detection presets' mean


class Preset:
    """The shape of the references' presets: a Compose behind a ``__call__`` that hands on
    ``(image, target)``."""

    def __init__(self, ops: list[Any]) -> None:
        self.transforms = T.Compose(ops)

    def __call__(self, img: Any, target: Any) -> Any:
        return self.transforms(img, target)


class FixedSizeCrop:
    """Stands in for the detection references' own ``FixedSizeCrop`` (their ``transforms.py``,
    not torchvision's, so not importable here): like theirs, it works on a PIL image only,
    crops to at most ``size`` at an offset drawn with ``torch.rand(1)``, then pads the right
    and bottom with ``fill``. What fastload must get right is what it is handed: the PIL image
    and the target torchvision would have at that point."""

    def __init__(self, size: tuple[int, int], fill: tuple[float, ...]) -> None:
        self.size, self.fill = size, [int(v) for v in fill]

    def __call__(self, image: Any, target: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        import torchvision.transforms.v2.functional as F
        from PIL import Image

        assert isinstance(image, Image.Image), type(image)
        height, width = image.height, image.width
        new_h, new_w = min(height, self.size[0]), min(width, self.size[1])
        drawn = torch.rand(1)
        top, left = int((height - new_h) * drawn), int((width - new_w) * drawn)
        moved = {"image": image, **target}
        for key in ("image", "boxes", "masks"):
            if key in moved:
                moved[key] = F.crop(moved[key], top, left, new_h, new_w)
                padding = [0, 0, self.size[1] - new_w, self.size[0] - new_h]
                fill = self.fill if key == "image" else 0
                moved[key] = F.pad(moved[key], padding, fill=fill)
        image = moved.pop("image")
        return image, moved


def detection_train(augmentation: str) -> Preset:
    """``DetectionPresetTrain(data_augmentation=..., backend="pil", use_v2=True)``'s ops."""
    ops: list[Any] = []
    if augmentation == "hflip":
        ops += [T.RandomHorizontalFlip(p=0.5)]
    elif augmentation == "multiscale":
        ops += [T.RandomShortestSize(min_size=MULTISCALE, max_size=1333)]
        ops += [T.RandomHorizontalFlip(p=0.5)]
    elif augmentation == "lsj":
        ops += [T.ScaleJitter(target_size=(1024, 1024), antialias=True)]
        ops += [FixedSizeCrop((1024, 1024), fill=MEAN), T.RandomHorizontalFlip(p=0.5)]
    elif augmentation == "ssdlite":
        ops += [T.RandomIoUCrop(), T.RandomHorizontalFlip(p=0.5)]
    elif augmentation == "ssd":
        fill = defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})
        ops += [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=fill), T.RandomIoUCrop()]
        ops += [T.RandomHorizontalFlip(p=0.5)]
    ops += [T.ToImage(), T.ToDtype(torch.float, scale=True)]
    ops += [T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY)]
    ops += [T.SanitizeBoundingBoxes(), T.ToPureTensor()]
    return Preset(ops)


def detection_eval() -> Preset:
    """``DetectionPresetEval(backend="pil", use_v2=True)``'s ops with a resize in front, as
    evaluation at a fixed scale adds (the preset alone has no geometry: nothing to fuse)."""
    return Preset([T.Resize(600, max_size=1000), T.ToImage(), T.ToDtype(torch.float, scale=True)])


def wrapped(folder: Path, annotations: Path, preset: Any, masks: bool) -> Any:
    keys = ["boxes", "labels", "image_id"] + (["masks"] if masks else [])
    dataset = TorchvisionCoco(str(folder), str(annotations), transforms=preset)
    return torchvision.datasets.wrap_dataset_for_transforms_v2(dataset, target_keys=keys)


def compare(fast: Any, theirs: Any, index: int, seed: int, *, where: str) -> None:
    """Sample ``index`` of both datasets drawn from ``seed``: the same sample, or the same
    error (torchvision's SanitizeBoundingBoxes refuses a target with no labels, RandomIoUCrop
    one with no boxes: an image with no annotation, which the references' training set leaves
    out; fastload's error names the image)."""
    torch.manual_seed(seed)
    try:
        expected = theirs[index]
    except ValueError as exc:
        torch.manual_seed(seed)
        with pytest.raises(type(exc), match="Could not infer where the labels are"):
            fast[index]
        return
    except TypeError:
        torch.manual_seed(seed)
        with pytest.raises(fastload.ImageDecodeError, match="requires bounding boxes"):
            fast[index]
        return
    torch.manual_seed(seed)
    assert_same_sample(fast[index], expected, where=where)


def assert_same_sample(ours: Any, theirs: Any, *, where: str) -> None:
    (image, target), (expected, expected_target) = ours, theirs
    assert type(image) is type(expected) and image.dtype == expected.dtype, where
    assert image.shape == expected.shape, where
    scale = 255.0 if image.dtype == torch.uint8 else 1.0
    difference = (image.double() - expected.double()).abs() / scale
    assert difference.mean() < 0.012 and difference.max() < 0.35, (where, difference.mean())
    assert set(target) == set(expected_target), where
    for key, value in expected_target.items():
        got = target[key]
        if key == "boxes":
            assert type(got) is type(value), where
            torch.testing.assert_close(got, value, atol=1e-3, rtol=0, msg=where)
            if isinstance(value, tv_tensors.BoundingBoxes):
                assert got.canvas_size == value.canvas_size and got.format == value.format
        elif isinstance(value, torch.Tensor):
            assert type(got) is type(value) and got.dtype == value.dtype, (where, key)
            assert torch.equal(got, value), (where, key)
        else:
            assert got == value, (where, key)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("coco")
    return coco_set(root, images=9, empty=(4,))


@pytest.mark.parametrize("augmentation", ["hflip", "multiscale", "ssdlite", "ssd", "lsj"])
@pytest.mark.parametrize("masks", [False, True])
def test_the_train_presets_give_torchvisions_samples(
    coco: tuple[Path, Path], augmentation: str, masks: bool
) -> None:
    """``lsj``'s ``FixedSizeCrop`` is the references' own: fused up to it, it runs as written
    on the PIL image torchvision would hand it, and the flip after it too."""
    theirs = wrapped(*coco, detection_train(augmentation), masks)
    fast, translated = accelerate_dataset(theirs, batches=False)
    assert isinstance(fast, CocoDetection) and len(fast) == len(theirs)
    last = "ScaleJitter" if augmentation == "lsj" else "RandomHorizontalFlip"
    assert [type(op).__name__ for op in translated.fused][-1] == last
    for index in range(len(theirs)):
        for seed in (index, 100 + index):
            compare(fast, theirs, index, seed, where=f"{augmentation} {index} {seed}")


def test_the_eval_preset_and_a_fixed_resize(coco: tuple[Path, Path]) -> None:
    theirs = wrapped(*coco, detection_eval(), masks=True)
    fast, translated = accelerate_dataset(theirs, batches=False)
    assert translated.fused_from == (repr(detection_eval().transforms.transforms[0]),)
    for index in range(len(theirs)):
        assert_same_sample(fast[index], theirs[index], where=f"eval {index}")


def test_the_training_subset_of_images_with_annotations(coco: tuple[Path, Path]) -> None:
    """The references keep the images with annotations as a Subset; its indices stay."""
    theirs = wrapped(*coco, detection_train("multiscale"), masks=False)
    kept = [i for i, image_id in enumerate(theirs.ids) if theirs.coco.getAnnIds(imgIds=image_id)]
    subset = torch.utils.data.Subset(theirs, kept)
    fast, _ = accelerate_dataset(subset, batches=False)
    assert isinstance(fast, CocoDetection) and fast.ids == [theirs.ids[i] for i in kept]
    torch.manual_seed(3)
    expected = subset[2]
    torch.manual_seed(3)
    assert_same_sample(fast[2], expected, where="subset")


def test_an_image_left_with_no_box_is_kept_as_torchvision_keeps_it(tmp_path: Path) -> None:
    """Degenerate boxes leave with their labels and masks (SanitizeBoundingBoxes, as written);
    an image with none left, or none at all, is still a sample."""
    folder, annotations = coco_set(tmp_path, images=3, empty=(1,))
    degenerate = {
        "id": 99,
        "image_id": 1000 - 7 * 2,
        "category_id": 2,
        "bbox": [10.0, 10.0, 0.0, 5.0],
        "area": 0.0,
        "iscrowd": 0,
        "segmentation": [[10.0, 10.0, 10.0, 15.0, 10.5, 12.0]],
    }
    folder, annotations = coco_set(tmp_path, images=3, empty=(1,), extra_annotations=[degenerate])
    theirs = wrapped(folder, annotations, detection_train("hflip"), masks=True)
    fast, _ = accelerate_dataset(theirs, batches=False)
    for index in range(3):
        compare(fast, theirs, index, index, where=f"sanitized {index}")


def test_grayscale_and_cmyk_images_come_out_rgb_as_torchvisions(tmp_path: Path) -> None:
    """Their boxes are whole numbers in the JSON, as some tools write them: int64 boxes, as
    torchvision makes them."""
    folder, _ = coco_set(tmp_path, images=1)
    extra = grey_and_cmyk(folder)
    boxes = [
        {"id": 50 + k, "image_id": e["id"], "category_id": 1, "bbox": [5, 6, 40, 30]}
        for k, e in enumerate(extra)
    ]
    folder, annotations = coco_set(tmp_path, images=1, extra_images=extra, extra_annotations=boxes)
    theirs = wrapped(folder, annotations, detection_train("multiscale"), masks=False)
    fast, _ = accelerate_dataset(theirs, batches=False)
    for index in range(len(theirs)):
        compare(fast, theirs, index, index, where=f"modes {index}")


def test_a_missing_image_is_one_error_naming_it_or_skipped(tmp_path: Path) -> None:
    folder, annotations = coco_set(tmp_path, images=3)
    (folder / "0001.jpg").unlink()
    fast = CocoDetection(folder, annotations)
    with pytest.raises(fastload.ImageDecodeError, match=r"0001\.jpg"):
        fast[1]
    skipping = CocoDetection(folder, annotations, on_error="skip")
    assert isinstance(skipping[1], fastload.Skipped)
    assert list(skipping.bad_files) == [str(folder / "0001.jpg")]


def test_an_annotation_naming_no_listed_image_is_one_error(tmp_path: Path) -> None:
    stray = {"id": 7, "image_id": 4242, "category_id": 1, "bbox": [0, 0, 4, 4]}
    folder, annotations = coco_set(tmp_path, images=2, extra_annotations=[stray])
    with pytest.raises(ValueError, match=r"names image 4242"):
        CocoDetection(folder, annotations)


def test_what_does_not_translate_says_why(coco: tuple[Path, Path]) -> None:
    tensor_first = Preset([T.ToImage(), T.RandomHorizontalFlip(), T.ToDtype(torch.float)])
    with pytest.raises(NotAccelerated, match="resample a tensor"):
        accelerate_dataset(wrapped(*coco, tensor_first, masks=False), batches=False)
    evaluation = Preset([T.ToImage(), T.ToDtype(torch.float, scale=True), T.ToPureTensor()])
    with pytest.raises(NotAccelerated, match="no geometry follows: nothing to fuse"):
        accelerate_dataset(wrapped(*coco, evaluation, masks=False), batches=False)
    photometric = Preset([T.RandomPhotometricDistort(), T.ToImage()])
    with pytest.raises(NotAccelerated, match="RandomPhotometricDistort"):
        accelerate_dataset(wrapped(*coco, photometric, masks=False), batches=False)
    image_only = TorchvisionCoco(str(coco[0]), str(coco[1]), transform=T.RandomHorizontalFlip())
    wrapped_image_only = torchvision.datasets.wrap_dataset_for_transforms_v2(image_only)
    with pytest.raises(NotAccelerated, match="its target where it was"):
        accelerate_dataset(wrapped_image_only, batches=False)


@pytest.mark.parametrize("augmentation", ["hflip", "multiscale", "ssd"])
def test_on_a_device_the_float_conversion_is_left_to_the_batch_stage(
    coco: tuple[Path, Path], augmentation: str
) -> None:
    """With a CUDA device (and a collate that leaves images as they are) the samples keep
    their uint8 image, and the batch op ``ToFloat`` makes it torchvision's float image."""
    theirs = wrapped(*coco, detection_train(augmentation), masks=True)
    fast, translated = accelerate_dataset(theirs, batches=False, float_on_device=True)
    assert [type(op) for op in translated.batch] == [fastload.gpu.ToFloat]
    assert translated.batch_from == ("ToDtype(scale=True) (the image's part)",)
    assert "made float on the device" in repr(translated.rest[-1])
    in_workers, _ = accelerate_dataset(theirs, batches=False)
    for index in (0, 1, 2, 3):  # 4 has no annotation
        torch.manual_seed(index)
        expected = theirs[index]
        torch.manual_seed(index)
        image, target = fast[index]
        assert image.dtype == torch.uint8 and type(image) is torch.Tensor
        floated = fastload.gpu.ToFloat()(image[None])[0]
        assert_same_sample((floated, target), expected, where=f"{augmentation} {index}")
        torch.manual_seed(index)
        assert torch.equal(floated, in_workers[index][0])  # the same bits as made per sample


def test_the_float_conversion_stays_per_sample_where_an_op_after_it_reads_the_image(
    coco: tuple[Path, Path],
) -> None:
    scale = T.ToDtype(torch.float, scale=True)
    normalized = Preset([T.RandomHorizontalFlip(), T.ToImage(), scale, T.Normalize([0.5], [0.2])])
    by_type = T.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)
    typed = Preset([T.RandomHorizontalFlip(), T.ToImage(), by_type, T.ToPureTensor()])
    for preset in (normalized, typed):
        fast, translated = accelerate_dataset(
            wrapped(*coco, preset, masks=False), batches=False, float_on_device=True
        )
        assert translated.batch == () and "in shared memory" in repr(translated.rest[0])
        torch.manual_seed(0)
        assert fast[0][0].dtype == torch.float32


def test_a_float_conversion_left_to_the_device_keeps_a_tv_tensor_image_converted_here(
    coco: tuple[Path, Path],
) -> None:
    """Without ``ToPureTensor`` the image is still a ``tv_tensors.Image`` at the end: it is
    converted per sample, as written (the batch op then leaves a float image alone)."""
    preset = Preset([T.RandomHorizontalFlip(), T.ToImage(), T.ToDtype(torch.float, scale=True)])
    theirs = wrapped(*coco, preset, masks=False)
    fast, translated = accelerate_dataset(theirs, batches=False, float_on_device=True)
    assert [type(op) for op in translated.batch] == [fastload.gpu.ToFloat]
    torch.manual_seed(1)
    expected = theirs[1]
    torch.manual_seed(1)
    image, target = fast[1]
    assert type(image) is tv_tensors.Image and image.dtype == torch.float32
    assert fastload.gpu.ToFloat()(image[None]).dtype == torch.float32
    assert_same_sample((image, target), expected, where="tv_tensors.Image")


def collate(batch: list[Any]) -> tuple[Any, ...]:
    """The references' ``utils.collate_fn``."""
    return tuple(zip(*batch))  # noqa: B905 (the references' own)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_the_swap_with_the_references_collate_in_workers(
    coco: tuple[Path, Path], worker_type: str
) -> None:
    whole = wrapped(*coco, detection_train("multiscale"), masks=True)
    kept = [i for i, image_id in enumerate(whole.ids) if whole.coco.getAnnIds(imgIds=image_id)]
    dataset = torch.utils.data.Subset(whole, kept)
    loader = fastload.DataLoader(
        dataset,
        batch_size=2,
        num_workers=2,
        worker_type=worker_type,
        # threads draw each sample from its own streams (seeding="sample"); processes keep
        # torch's per-worker streams, as stock torchvision draws
        seeding="sample" if worker_type == "thread" else "auto",
        collate_fn=collate,
        accelerate=True,
    )
    text = fastload.explain(loader)
    assert "accelerated in part" in text, text
    assert "RandomShortestSize" in text and "SanitizeBoundingBoxes" in text, text
    seen = []
    for images, targets in loader:
        assert len(images) == len(targets) <= 2
        for image, target in zip(images, targets, strict=True):
            assert image.dtype == torch.float32 and image.ndim == 3
            assert min(image.shape[1:]) in MULTISCALE or max(image.shape[1:]) == 1333
            if "masks" in target:
                assert target["masks"].shape[1:] == image.shape[1:]
            seen.append(target["image_id"])
    stock = torch.utils.data.DataLoader(dataset, batch_size=2, collate_fn=collate)
    assert sorted(seen) == sorted(t["image_id"] for _, targets in stock for t in targets)


def test_thread_workers_give_what_worker_processes_give_sample_for_sample(
    coco: tuple[Path, Path],
) -> None:
    """With each sample's own streams (seeding="sample"), threads and processes draw the same:
    the ops that draw nothing (the photometric distortion's pixels, drawn when planned; the
    conversions; SanitizeBoundingBoxes) run outside the draws' lock, in parallel."""
    whole = wrapped(*coco, detection_train("ssd"), masks=True)
    kept = [i for i, image_id in enumerate(whole.ids) if whole.coco.getAnnIds(imgIds=image_id)]
    dataset = torch.utils.data.Subset(whole, kept)
    batches = {}
    for worker_type in ("process", "thread"):
        loader = fastload.DataLoader(
            dataset,
            batch_size=2,
            num_workers=2,
            worker_type=worker_type,
            seeding="sample",
            collate_fn=collate,
            accelerate=True,
        )
        torch.manual_seed(0)  # the epoch's base seed, which each sample's seed comes from
        batches[worker_type] = list(loader)
    assert len(batches["thread"]) == len(batches["process"]) > 0
    for (images, targets), (expected, expected_targets) in zip(
        batches["thread"], batches["process"], strict=True
    ):
        for image, target, other, other_target in zip(
            images, targets, expected, expected_targets, strict=True
        ):
            assert torch.equal(image, other)
            assert set(target) == set(other_target)
            for key, value in target.items():
                same = torch.equal if torch.is_tensor(value) else (lambda a, b: a == b)
                assert same(value, other_target[key]), key


class AspectGroups(torch.utils.data.Sampler):
    """The shape of the references' ``GroupedBatchSampler``: batches of indices drawn from a
    sampler, each batch from one aspect-ratio group (written here)."""

    def __init__(self, sampler: Any, groups: list[int], batch_size: int) -> None:
        self.sampler, self.groups, self.batch_size = sampler, groups, batch_size

    def __iter__(self) -> Any:
        waiting: dict[int, list[int]] = {}
        for index in self.sampler:
            group = waiting.setdefault(self.groups[index], [])
            group.append(index)
            if len(group) == self.batch_size:
                yield list(group)
                group.clear()
        for group in waiting.values():
            if group:
                yield list(group)

    def __len__(self) -> int:
        return len(list(iter(self)))


def test_an_aspect_ratio_batch_sampler_keeps_its_batches(coco: tuple[Path, Path]) -> None:
    whole = wrapped(*coco, detection_train("hflip"), masks=False)
    kept = [i for i, image_id in enumerate(whole.ids) if whole.coco.getAnnIds(imgIds=image_id)]
    dataset = torch.utils.data.Subset(whole, kept)
    groups = []
    for index in kept:
        info = whole.coco.imgs[whole.ids[index]]
        groups.append(int(info["width"] >= info["height"]))
    sampler = AspectGroups(torch.utils.data.SequentialSampler(dataset), groups, 2)
    loader = fastload.DataLoader(
        dataset, batch_sampler=sampler, num_workers=2, collate_fn=collate, accelerate=True
    )
    assert "accelerated in part" in fastload.explain(loader)
    batches = [[t["image_id"] for t in targets] for _, targets in loader]
    assert batches == [[whole.ids[kept[i]] for i in batch] for batch in sampler]
    for images, _ in loader:
        landscape = {int(image.shape[-1] >= image.shape[-2]) for image in images}
        assert len(landscape) == 1


def test_masks_without_pycocotools_say_how_to_install_it_at_once(
    coco: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pycocotools", None)  # as if not installed
    with pytest.raises(fastload.MissingDependencyError, match=r"fastload\[detection\]"):
        CocoDetection(*coco, target_keys=["boxes", "masks"])
    assert len(CocoDetection(*coco)) == 9  # boxes alone need no pycocotools
