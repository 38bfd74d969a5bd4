"""The segmentation references' v2 training pipeline, accelerated, against torchvision's own
wrapped datasets running it: sample by sample, same seeds. On VOC-layout files
(``VOCSegmentation``), and on a COCO set read the references' way (``CocoDetection`` whose
instances their ``CocoDetectionToVOCSegmentation`` merges into one class mask, chained with the
preset by their own ``Compose``).

The preset is ``references/segmentation/presets.py``'s ``SegmentationPresetTrain`` (backend
"pil", ``use_v2=True``) built from torchvision's own ops, at a smaller scale for the test's
images. The references' own classes (``PadIfSmaller``, the converter, their ``Compose``) are not
importable: stand-ins of their shape are written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as T
from images import jpeg_bytes, photo
from PIL import Image
from torchvision import tv_tensors

import fastload
from fastload.accelerate import accelerate_dataset
from fastload.detection import SegmentationList

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def voc_layout(root: Path, sizes: list[tuple[int, int]]) -> Path:
    """VOC 2012's folders with one JPEG and one palette PNG mask (classes 0-20, 255 on the
    objects' borders) per image, and the train split listing them."""
    base = root / "VOCdevkit" / "VOC2012"
    for name in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (base / name).mkdir(parents=True, exist_ok=True)
    names = []
    rng = np.random.default_rng(0)
    for i, (width, height) in enumerate(sizes):
        name = f"2007_{i:06d}"
        (base / "JPEGImages" / f"{name}.jpg").write_bytes(jpeg_bytes(photo(width, height, i)))
        mask = np.zeros((height, width), dtype=np.uint8)
        for _ in range(3):
            x, y = int(rng.integers(0, width - 20)), int(rng.integers(0, height - 20))
            w, h = int(rng.integers(10, width - x)), int(rng.integers(10, height - y))
            mask[y : y + h, x : x + w] = 255
            mask[y + 1 : y + h - 1, x + 1 : x + w - 1] = int(rng.integers(1, 21))
        png = Image.fromarray(mask, "P")
        png.putpalette([v for c in range(256) for v in (c, 255 - c, (7 * c) % 256)])
        png.save(base / "SegmentationClass" / f"{name}.png")
        names.append(name)
    (base / "ImageSets" / "Segmentation" / "train.txt").write_text("\n".join(names) + "\n")
    return root


class PadIfSmaller(T.Transform):
    """The shape of the references' ``v2_extras.PadIfSmaller``: a v2 op padding right and
    bottom up to ``size``, masks with their own fill (written here)."""

    def __init__(self, size: int, fill: dict[Any, int]) -> None:
        super().__init__()
        self.size, self.fill = size, fill

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        height, width = T.query_size(flat_inputs)
        padding = [0, 0, max(self.size - width, 0), max(self.size - height, 0)]
        return {"padding": padding, "needs_padding": any(padding)}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if not params["needs_padding"]:
            return inpt
        fill = self.fill[tv_tensors.Mask] if isinstance(inpt, tv_tensors.Mask) else 0
        return T.functional.pad(inpt, padding=params["padding"], fill=fill)


class CallablePad:
    """The same padding as a plain callable: not an op fastload can read, run as written."""

    def __init__(self, size: int, fill: dict[Any, int]) -> None:
        self.size, self.fill = size, fill

    def __call__(self, image: Any, mask: Any) -> Any:
        width, height = T.functional.get_size(image)[::-1]
        padding = [0, 0, max(self.size - width, 0), max(self.size - height, 0)]
        image = T.functional.pad(image, padding, fill=self.fill["others"])
        return image, T.functional.pad(mask, padding, fill=self.fill[tv_tensors.Mask])


def preset(crop: int, *, pad: str = "v2") -> T.Compose:
    """The train preset; ``pad``: ``"v2"`` (``RandomCrop(pad_if_needed=True)``),
    ``"reference"`` (the references' ``PadIfSmaller``, then ``RandomCrop``) or ``"callable"``."""
    fill = {tv_tensors.Mask: 255, "others": 0}
    ops: list[Any] = [T.RandomResize(min_size=crop // 2, max_size=crop * 2)]
    ops.append(T.RandomHorizontalFlip(0.5))
    if pad == "v2":
        ops.append(T.RandomCrop(crop, pad_if_needed=True, fill=fill))
    else:
        padding = PadIfSmaller if pad == "reference" else CallablePad
        ops += [padding(crop, fill), T.RandomCrop(crop)]
    ops.append(T.PILToTensor())
    dtypes = {torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None}
    ops += [T.ToDtype(dtype=dtypes, scale=True), T.Normalize(mean=MEAN, std=STD)]
    return T.Compose([*ops, T.ToPureTensor()])


@pytest.fixture(scope="module")
def voc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sizes = [(320, 240), (200, 300), (150, 120), (400, 260), (90, 160)]
    return voc_layout(tmp_path_factory.mktemp("voc"), sizes)


def wrapped(root: Path, transforms: Any) -> Any:
    dataset = torchvision.datasets.VOCSegmentation(str(root), year="2012", transforms=transforms)
    return torchvision.datasets.wrap_dataset_for_transforms_v2(dataset)


def assert_same(ours: Any, theirs: Any, where: str) -> None:
    (image, mask), (expected, expected_mask) = ours, theirs
    assert type(image) is type(expected) and image.shape == expected.shape, where
    assert image.dtype == expected.dtype == torch.float32, where
    # normalized: a grey level is 1 / (255 * std) apart
    difference = ((image - expected).abs() * torch.tensor(STD).view(3, 1, 1) * 255).mean()
    assert difference < 3.0, (where, float(difference))
    assert type(mask) is type(expected_mask) and mask.dtype == expected_mask.dtype, where
    assert torch.equal(mask, expected_mask), where


@pytest.mark.parametrize("pad", ["v2", "reference", "callable"])
def test_the_train_preset_gives_torchvisions_samples(voc: Path, pad: str) -> None:
    theirs = wrapped(voc, preset(200, pad=pad))
    fast, translated = accelerate_dataset(theirs, batches=False)
    assert isinstance(fast, SegmentationList) and len(fast) == len(theirs)
    fused = [type(op).__name__ for op in translated.fused]
    if pad == "v2":
        assert fused == ["RandomResize", "RandomHorizontalFlip", "RandomCropWithPadding"]
    elif pad == "reference":
        assert fused == ["RandomResize", "RandomHorizontalFlip", "PadIfSmaller", "RandomCropV2"]
    else:  # a callable ends the fused part
        assert fused == ["RandomResize", "RandomHorizontalFlip"]
        assert translated.hand_on is not None and translated.hand_on.form == "pil"
    for index in range(len(theirs)):
        for seed in (index, 50 + index, 99 + index):
            torch.manual_seed(seed)
            expected = theirs[index]
            torch.manual_seed(seed)
            assert_same(fast[index], expected, f"{index} {seed}")


def test_a_pad_of_another_shape_is_not_the_references(voc: Path) -> None:
    """An op named ``PadIfSmaller`` that pads on all sides is not read as the references' op."""

    class Centred(PadIfSmaller):
        def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
            params = super().make_params(flat_inputs)
            right, bottom = params["padding"][2:]
            params["padding"] = [right // 2, bottom // 2, right - right // 2, bottom - bottom // 2]
            return params

    Centred.__name__ = "PadIfSmaller"
    fill = {tv_tensors.Mask: 255, "others": 0}
    pipeline = T.Compose([T.RandomResize(100, 400), Centred(200, fill), T.RandomCrop(200)])
    _, translated = accelerate_dataset(wrapped(voc, pipeline), batches=False)
    assert [type(op).__name__ for op in translated.fused] == ["RandomResize"]


def test_padding_shows_the_masks_fill(voc: Path) -> None:
    """A crop larger than every image: both axes padded, the mask with 255."""
    theirs = wrapped(voc, preset(900))
    fast, _ = accelerate_dataset(theirs, batches=False)
    torch.manual_seed(4)
    expected = theirs[4]
    torch.manual_seed(4)
    image, mask = fast[4]
    assert_same((image, mask), expected, "padded")
    assert (mask == 255).any() and mask.shape == (1, 900, 900)


def test_a_mask_of_another_size_is_one_error_naming_the_image(tmp_path: Path) -> None:
    root = voc_layout(tmp_path, [(120, 90), (100, 80)])
    masks = root / "VOCdevkit" / "VOC2012" / "SegmentationClass"
    Image.new("P", (50, 50)).save(masks / "2007_000001.png")
    plain = torchvision.datasets.VOCSegmentation(str(root), year="2012")
    fast = SegmentationList(plain.images, plain.masks)
    assert fast[0][1].shape == (1, 90, 120)
    with pytest.raises(fastload.ImageDecodeError, match=r"2007_000001\.jpg.*50 x 50"):
        fast[1]
    skipping = SegmentationList(plain.images, plain.masks, on_error="skip")
    assert isinstance(skipping[1], fastload.Skipped)


def test_the_swap_in_workers_with_default_collate(voc: Path) -> None:
    """Fixed-size crops batch with torch's default collate, as the references' loader does."""
    dataset = wrapped(voc, preset(128))
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, accelerate=True)
    text = fastload.explain(loader)
    assert "accelerated in part" in text and "RandomCrop(size=(128, 128)" in text, text
    assert "made float once, for the collate to stack" in text, text  # no shared copy of its own
    shapes = [(tuple(images.shape), tuple(masks.shape)) for images, masks in loader]
    assert shapes == [((2, 3, 128, 128), (2, 1, 128, 128))] * 2 + [
        ((1, 3, 128, 128), (1, 1, 128, 128))
    ]


# COCO's category ids of VOC's 20 classes, in VOC's order (0: background)
VOC_FROM_COCO = [0, 5, 2, 16, 9, 44, 6, 3, 17, 62, 21, 67, 18, 19, 4, 1, 64, 20, 63, 7, 72]


class CocoDetectionToVOCSegmentation(T.Transform):
    """The shape of the references' converter: the instances of VOC's classes merged into one
    class mask, 255 where two overlap, zeros for an image with none (written here)."""

    def forward(self, image: Any, target: dict[str, Any]) -> tuple[Any, Any]:
        height, width = T.functional.get_size(image)
        merged = torch.zeros((height, width), dtype=torch.uint8)
        overlap = torch.zeros((height, width), dtype=torch.int64)
        for mask, label in zip(target.get("masks", ()), target.get("labels", ()), strict=True):
            if int(label) in VOC_FROM_COCO:
                merged[mask.bool()] = VOC_FROM_COCO.index(int(label))
                overlap += mask.bool()
        merged[overlap > 1] = 255
        return image, tv_tensors.Mask(merged)


class Chain:
    """The shape of the references' own ``Compose`` of ``(image, target)`` ops."""

    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, image, target):
        for t in self.transforms:
            image, target = t(image, target)
        return image, target


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A COCO set whose second image holds no VOC class (its class mask is all background)."""
    import json

    from fastload.synthetic import make_coco

    folder, annotations = make_coco(tmp_path_factory.mktemp("coco"), images=5, seed=3)
    content = json.loads(annotations.read_text())
    for i, annotation in enumerate(content["annotations"]):
        voc = annotation["image_id"] != 2 and i % 3 != 0
        annotation["category_id"] = VOC_FROM_COCO[1 + i % 20] if voc else 8  # 8: not VOC's
    annotations.write_text(json.dumps(content))
    return folder, annotations


def coco_wrapped(coco: tuple[Path, Path], crop: int) -> Any:
    transforms = Chain([CocoDetectionToVOCSegmentation(), preset(crop, pad="reference")])
    dataset = torchvision.datasets.CocoDetection(*map(str, coco), transforms=transforms)
    return torchvision.datasets.wrap_dataset_for_transforms_v2(dataset, {"masks", "labels"})


def test_coco_read_the_references_way_gives_torchvisions_samples(coco: tuple[Path, Path]) -> None:
    theirs = coco_wrapped(coco, 300)
    fast, translated = accelerate_dataset(theirs, batches=False)
    names = ["TargetFirst", "RandomResize", "RandomHorizontalFlip", "PadIfSmaller", "RandomCropV2"]
    assert [type(op).__name__ for op in translated.fused] == names
    seen = set()
    for index in range(len(theirs)):
        for seed in (index, 50 + index):
            torch.manual_seed(seed)
            expected = theirs[index]
            torch.manual_seed(seed)
            assert_same(fast[index], expected, f"{index} {seed}")
            seen |= set(expected[1].unique().tolist())
    assert 0 in seen and 255 in seen and len(seen) > 4  # background, overlaps, classes


def test_coco_read_the_references_way_in_workers(coco: tuple[Path, Path]) -> None:
    dataset = coco_wrapped(coco, 128)
    loader = fastload.DataLoader(dataset, batch_size=2, num_workers=2, accelerate=True)
    text = fastload.explain(loader)
    assert "accelerated in part" in text and "CocoDetectionToVOCSegmentation()" in text, text
    assert "PadIfSmaller(size=128)" in text and "made float once" in text, text
    shapes = [(tuple(images.shape), tuple(masks.shape)) for images, masks in loader]
    # the converter's masks are H x W (VOC's PNGs give 1 x H x W)
    assert shapes == [((2, 3, 128, 128), (2, 128, 128))] * 2 + [((1, 3, 128, 128), (1, 128, 128))]
