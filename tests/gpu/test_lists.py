"""Batch ops on lists of images of different sizes (detection batches), against torchvision's
kernels image by image."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from fastload import gpu
from fastload.gpu.lists import apply_to_images, is_image_list
from fastload.gpu.stage import BatchStage

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def images_of_sizes(*sizes: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator) for h, w in sizes
    )


def test_normalize_runs_on_each_image_with_torchvisions_values() -> None:
    images = images_of_sizes((37, 90), (64, 33), (100, 100))
    out = apply_to_images(gpu.Compose([gpu.Normalize(MEAN, STD)]), images)
    assert type(out) is tuple and len(out) == 3
    for image, result in zip(images, out, strict=True):
        expected = TF.normalize(TF.to_dtype(image, torch.float32, scale=True), MEAN, STD)
        assert result.shape == image.shape and result.dtype == torch.float32
        torch.testing.assert_close(result, expected, atol=1e-5, rtol=1e-5)


def test_each_image_draws_its_own_parameters_from_the_ops_generator() -> None:
    image = images_of_sizes((40, 60))[0]

    def jitter(seed: int) -> gpu.ColorJitter:
        return gpu.ColorJitter(0.4, 0.4, 0.4, 0.1, generator=torch.Generator().manual_seed(seed))

    first, second = apply_to_images(jitter(0), [image, image.clone()])
    assert not torch.equal(first, second)  # one draw each, not one for the list
    again = apply_to_images(jitter(0), [image, image.clone()])
    assert torch.equal(again[0], first) and torch.equal(again[1], second)
    assert torch.equal(first, jitter(0)(image[None])[0])  # the first draw is the op's own


@pytest.mark.parametrize(
    "op",
    [
        gpu.RandomHorizontalFlip(),
        gpu.RandomResizedCrop(32),
        gpu.MixUp(1.0, num_classes=3),
        gpu.AutoAugment(),
        gpu.Compose([gpu.Normalize(MEAN, STD), gpu.RandomVerticalFlip()]),
        gpu.RandomApply(gpu.RandomHorizontalFlip(p=1.0)),
    ],
    ids=lambda op: type(op).__name__,
)
def test_ops_that_move_pixels_or_mix_labels_are_refused(op) -> None:
    with pytest.raises(ValueError, match=r"cannot run on a batch of images of different sizes"):
        apply_to_images(op, images_of_sizes((20, 30), (30, 20)))


def test_a_callable_of_ones_own_gets_the_list_as_it_is() -> None:
    images = images_of_sizes((20, 30), (30, 20))
    seen = []
    assert apply_to_images(lambda batch: seen.append(batch) or batch, images) is images
    assert seen == [images]


def test_a_callable_of_ones_own_in_a_compose_gets_the_list_the_ops_before_it_made() -> None:
    """As with device="cuda", where the images' float conversion comes first."""
    images = images_of_sizes((20, 30), (30, 20))
    seen = []
    out = apply_to_images(gpu.Compose([gpu.ToFloat(), lambda b: seen.append(b) or b]), images)
    assert out is seen[0] and type(out) is type(images)  # a tuple stays one
    assert [image.dtype for image in out] == [torch.float32, torch.float32]
    with pytest.raises(ValueError, match="cannot run on a batch of images of different sizes"):
        apply_to_images(gpu.Compose([gpu.RandomHorizontalFlip(), lambda b: b]), images)


def test_an_image_that_is_not_chw_is_one_error_naming_it() -> None:
    images = [*images_of_sizes((20, 30)), torch.zeros(1, 3, 8, 8, dtype=torch.uint8)]
    with pytest.raises(ValueError, match=r"image 1 of the batch has shape \(1, 3, 8, 8\)"):
        apply_to_images(gpu.Normalize(MEAN, STD), images)


def test_the_batch_stage_transforms_the_images_and_leaves_the_targets() -> None:
    images = images_of_sizes((20, 30), (30, 20))
    targets = ({"boxes": torch.tensor([[1.0, 2.0, 5.0, 6.0]])}, {"boxes": torch.zeros(0, 4)})
    out_images, out_targets = BatchStage(gpu.Normalize(MEAN, STD), channels_last=False)(
        (images, targets)
    )
    assert out_targets is targets
    assert [tuple(i.shape) for i in out_images] == [(3, 20, 30), (3, 30, 20)]
    assert all(i.dtype == torch.float32 for i in out_images)
    assert BatchStage(None, channels_last=True)((images, targets)) == (images, targets)


def test_is_image_list() -> None:
    assert is_image_list(images_of_sizes((2, 2)))
    assert not is_image_list([]) and not is_image_list(torch.zeros(2, 3, 4, 4))
    assert not is_image_list([torch.zeros(3, 2, 2), {"boxes": None}])
