"""Padded batches of differently sized images, against torchvision's detection models' own
batching (``GeneralizedRCNNTransform.batch_images``), and through a real loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from cocosets import coco_set
from test_detection_ops import collate, detection_train

import fastload
from fastload.detection import PaddedBatch, pad_images


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
    pinned and copied on the prefetcher's stream, the boxes still ``BoundingBoxes``."""
    from torchvision import tv_tensors

    dataset = wrapped_train(tmp_path)
    loader = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, collate_fn=collate, device="cuda", accelerate=True
    )
    seen = 0
    for images, targets in loader:
        for image, target in zip(images, targets, strict=True):
            assert image.is_cuda and image.dtype == torch.float32
            assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
            assert target["boxes"].is_cuda and target["masks"].is_cuda
            seen += 1
    assert seen == len(dataset)
    padded = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, collate_fn=PaddedBatch(), device="cuda"
    )
    images, sizes, _ = next(iter(padded))
    assert images.is_cuda and images.shape[-1] % 32 == 0 and sizes.shape == (2, 2)
