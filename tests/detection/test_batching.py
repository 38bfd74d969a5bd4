"""Padded batches of differently sized images, against torchvision's detection models' own
batching (``GeneralizedRCNNTransform.batch_images``), and through a real loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from cocosets import coco_set
from test_detection_ops import collate, detection_train

import fastload
from fastload.detection import PaddedBatch, pad_images
from fastload.detection.batching import leaves_images


def test_pad_images_is_torchvisions_batching() -> None:
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    generator = torch.Generator().manual_seed(0)
    sizes = [(3, 37, 90), (3, 64, 33), (3, 100, 100)]
    images = [torch.rand(size, generator=generator) for size in sizes]
    theirs = GeneralizedRCNNTransform(800, 1333, [0.0] * 3, [1.0] * 3).batch_images(images, 32)
    padded, kept = pad_images(images, multiple=32)
    assert torch.equal(padded, theirs)
    assert kept.tolist() == [[37, 90], [64, 33], [100, 100]]


def test_pad_images_refuses_mixed_images_and_bad_options() -> None:
    with pytest.raises(ValueError, match="one dtype and channel count"):
        pad_images([torch.zeros(3, 4, 4), torch.zeros(1, 4, 4)])
    with pytest.raises(ValueError, match="no image"):
        pad_images([])
    with pytest.raises(ValueError, match=r"multiple=0 must be a positive int"):
        PaddedBatch(multiple=0)


def wrapped_train(tmp_path: Path) -> torch.utils.data.Subset:
    folder, annotations = coco_set(tmp_path, images=6)
    dataset = torchvision.datasets.CocoDetection(
        str(folder), str(annotations), transforms=detection_train("multiscale")
    )
    return torchvision.datasets.wrap_dataset_for_transforms_v2(
        dataset, target_keys=["boxes", "labels", "image_id", "masks"]
    )


def test_a_loader_gives_padded_batches_of_the_swapped_samples(tmp_path: Path) -> None:
    dataset = wrapped_train(tmp_path)
    loader = fastload.DataLoader(
        dataset, batch_size=3, num_workers=2, collate_fn=PaddedBatch(), accelerate=True
    )
    for images, sizes, targets in loader:
        assert images.ndim == 4 and images.shape[-1] % 32 == 0 and images.shape[-2] % 32 == 0
        for image, (height, width), target in zip(images, sizes.tolist(), targets, strict=True):
            assert target["masks"].shape[-2:] == (height, width)
            assert torch.all(image[:, height:, :] == 0) and torch.all(image[:, :, width:] == 0)


@pytest.mark.gpu
def test_the_prefetcher_moves_lists_of_images_and_target_dicts(tmp_path: Path) -> None:
    """With a CUDA device the references' lists of images and target dicts reach the device,
    pinned and copied on the prefetcher's stream, each target tensor of the type the dataset
    gives (the references' pipeline ends in ``ToPureTensor``)."""
    dataset = wrapped_train(tmp_path)
    kinds = {key: type(value) for key, value in dataset[0][1].items()}
    loader = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, collate_fn=collate, device="cuda", accelerate=True
    )
    seen = 0
    for images, targets in loader:
        for image, target in zip(images, targets, strict=True):
            assert image.is_cuda and image.dtype == torch.float32
            assert {key: type(value) for key, value in target.items()} == kinds
            assert target["boxes"].is_cuda and target["masks"].is_cuda
            seen += 1
    assert seen == len(dataset)
    padded = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, collate_fn=PaddedBatch(), device="cuda"
    )
    images, sizes, _ = next(iter(padded))
    assert images.is_cuda and images.shape[-1] % 32 == 0 and sizes.shape == (2, 2)


def test_batch_transforms_run_on_the_references_lists_of_images(tmp_path: Path) -> None:
    """The references' collate keeps images of different sizes in a tuple: ``gpu.Normalize``
    normalizes each as torchvision does, the targets pass untouched, the draws unchanged."""
    import torchvision.transforms.v2.functional as TF

    from fastload import gpu

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    dataset = wrapped_train(tmp_path)

    def batches(**options: object) -> list[tuple[Any, ...]]:
        loader = fastload.DataLoader(
            dataset,
            batch_size=3,
            num_workers=2,
            collate_fn=collate,
            accelerate=True,
            generator=torch.Generator().manual_seed(0),
            **options,
        )
        return list(loader)

    plain = batches()
    normalized = batches(batch_transforms=gpu.Normalize(mean, std))
    assert len(plain) == len(normalized) == 2
    assert len({tuple(i.shape) for images, _ in plain for i in images}) > 1
    for (images, targets), (ours, our_targets) in zip(plain, normalized, strict=True):
        assert isinstance(ours, tuple)
        for image, result in zip(images, ours, strict=True):
            torch.testing.assert_close(result, TF.normalize(image, mean, std))
        for target, our_target in zip(targets, our_targets, strict=True):
            assert torch.equal(target["boxes"], our_target["boxes"])
            assert torch.equal(target["masks"], our_target["masks"])
    with pytest.raises(ValueError, match="cannot run on a batch of images of different sizes"):
        flip = gpu.RandomHorizontalFlip()
        next(iter(fastload.DataLoader(dataset, collate_fn=collate, batch_transforms=flip)))


@pytest.mark.gpu
def test_batch_transforms_run_on_lists_of_images_on_the_device(tmp_path: Path) -> None:
    """With a CUDA device the ops run on the copied images, on the prefetcher's stream."""
    from fastload import gpu

    dataset = wrapped_train(tmp_path)
    jitter = gpu.Compose(
        [gpu.ColorJitter(0.4, 0.4, 0.4, 0.1), gpu.Normalize([0.5] * 3, [0.25] * 3)]
    )
    loader = fastload.DataLoader(
        dataset,
        batch_size=3,
        num_workers=2,
        collate_fn=collate,
        device="cuda",
        accelerate=True,
        batch_transforms=jitter,
    )
    for images, targets in loader:
        for image, target in zip(images, targets, strict=True):
            assert image.is_cuda and image.dtype == torch.float32
            assert image.shape[-2:] == target["masks"].shape[-2:]
            assert image.min() < 0  # normalized


def test_the_collates_that_leave_images_as_they_are() -> None:
    """Only after these may a uint8 image be made float after collating (on the device)."""
    assert leaves_images(collate) and leaves_images(PaddedBatch())
    assert not leaves_images(PaddedBatch(fill=0.5))  # 0.5 has no uint8 value
    assert not leaves_images(torch.utils.data.default_collate)
    assert not leaves_images(lambda batch: [torch.stack(f) for f in zip(*batch, strict=True)])


@pytest.mark.gpu
def test_on_the_device_the_images_are_made_float_there_with_the_workers_bits(
    tmp_path: Path,
) -> None:
    """A CUDA loader hands its workers' uint8 images over and makes them float after the
    copy: the same images, bit for bit, as the loader that makes them float in its workers."""
    dataset = wrapped_train(tmp_path)
    common = {"batch_size": 2, "num_workers": 2, "collate_fn": collate, "accelerate": True}
    common["seeding"] = "sample"  # each sample from its own streams, whichever worker reads it
    on_device = fastload.DataLoader(
        dataset, device="cuda", generator=torch.Generator().manual_seed(5), **common
    )
    in_workers = fastload.DataLoader(dataset, generator=torch.Generator().manual_seed(5), **common)
    assert "made float on the device" in fastload.explain(on_device)
    assert "made float on the device" not in fastload.explain(in_workers)
    pairs = zip(on_device, in_workers, strict=True)
    for (images, targets), (expected, expected_targets) in pairs:
        for image, target, other, other_target in zip(
            images, targets, expected, expected_targets, strict=True
        ):
            assert image.is_cuda and image.dtype == torch.float32
            assert torch.equal(image.cpu(), other)
            assert torch.equal(target["boxes"].cpu(), other_target["boxes"])


@pytest.mark.parametrize("collate_fn", [collate, PaddedBatch()], ids=["references", "padded"])
def test_the_plan_for_a_cuda_device_leaves_the_float_conversion_to_the_batch_stage(
    tmp_path: Path, collate_fn: Any
) -> None:
    """Planned for a CUDA device (no GPU needed to plan): the batch stage, which runs after the
    copy, makes the collated uint8 images float, the same bits as the workers would."""
    from fastload.gpu.stage import BatchStage
    from fastload.loader.plan import translate

    dataset = wrapped_train(tmp_path)
    loader = fastload.DataLoader(dataset, batch_size=2, collate_fn=collate_fn, accelerate=True)
    on_device = translate(loader, loader.options(), torch.device("cuda"))
    on_cpu = translate(loader, loader.options(), None)
    assert isinstance(on_device.batch_ops, fastload.gpu.ToFloat) and on_cpu.batch_ops is None
    assert "(the image's part)" in str(on_device.acceleration)
    torch.manual_seed(0)
    uint8 = collate_fn([on_device.dataset[i] for i in range(2)])
    torch.manual_seed(0)
    expected = collate_fn([on_cpu.dataset[i] for i in range(2)])
    floated = BatchStage(on_device.batch_ops, channels_last=False)(uint8)
    for image, other in zip(floated[0], expected[0], strict=True):
        assert image.dtype == torch.float32 and torch.equal(image, other)
    not_leaving = fastload.DataLoader(dataset, batch_size=2, collate_fn=PaddedBatch(fill=0.5))
    kept = translate(not_leaving, not_leaving.options(), torch.device("cuda"))
    assert kept.batch_ops is None  # a fill with no uint8 value: made float in the workers
