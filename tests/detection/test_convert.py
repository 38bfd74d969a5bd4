"""The image's float conversion, against v2's ``ToDtype(float32, scale=True)``."""

from __future__ import annotations

import torch
import torchvision.transforms.v2 as T
from torchvision import tv_tensors

from fastload.detection.convert import FloatImage


def test_the_values_are_v2s_bit_for_bit_and_the_masks_are_left_alone() -> None:
    image = tv_tensors.Image(torch.randint(0, 256, (3, 37, 50), dtype=torch.uint8))
    target = {"masks": tv_tensors.Mask(torch.ones(2, 37, 50, dtype=torch.uint8))}
    op = T.ToDtype(torch.float32, scale=True)
    converted, same = FloatImage(op)(image, target)
    assert type(converted) is tv_tensors.Image and same["masks"] is target["masks"]
    assert torch.equal(converted, op(image, target)[0])
    plain, _ = FloatImage(op)(image.as_subclass(torch.Tensor), target)
    assert type(plain) is torch.Tensor and torch.equal(plain, converted.as_subclass(torch.Tensor))


def test_the_user_op_still_converts_the_mask_as_its_dtypes_say() -> None:
    dtypes = {torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None}
    op = T.ToDtype(dtype=dtypes, scale=True)
    image = torch.randint(0, 256, (3, 8, 9), dtype=torch.uint8)
    mask = tv_tensors.Mask(torch.randint(0, 21, (1, 8, 9), dtype=torch.uint8))
    ours, theirs = FloatImage(op)(image, mask), op(image, mask)
    assert torch.equal(ours[0], theirs[0]) and ours[1].dtype == theirs[1].dtype == torch.int64
    assert torch.equal(ours[1], theirs[1]) and type(ours[1]) is tv_tensors.Mask


def test_in_a_worker_process_the_image_is_made_in_shared_memory() -> None:
    image = torch.randint(0, 256, (3, 20, 30), dtype=torch.uint8)
    op = T.ToDtype(torch.float32, scale=True)
    assert not FloatImage(op).image(image).is_shared()
    worker = FloatImage(op)
    worker.owner = -1  # as in a process forked after the op was made
    converted = worker.image(image)
    assert converted.is_shared() and torch.equal(converted, image.float().mul_(1 / 255))


def test_stacked_samples_are_made_in_plain_memory_in_torchs_layout() -> None:
    """The collate stacks them into shared memory of its own: a sample's own would be a
    second copy; a channels-last image or a crop's view comes out contiguous, same values."""
    op = T.ToDtype(torch.float32, scale=True)
    whole = torch.randint(0, 256, (40, 50, 3), dtype=torch.uint8).permute(2, 0, 1)
    for image in (whole, whole[:, 5:30, 7:40]):  # channels-last, and a view of a crop
        worker = FloatImage(op, stacked=True)
        worker.owner = -1
        converted = worker.image(image)
        assert not converted.is_shared() and converted.is_contiguous()
        assert torch.equal(converted, op(image))
    handed = FloatImage(op)
    handed.owner = -1
    assert handed.image(whole).stride() == whole.stride()  # its own dense layout, as v2's
    view = handed.image(whole[:, 5:30, 7:40])
    assert view.is_contiguous() and view.is_shared()


def test_what_is_not_uint8_passes_unchanged() -> None:
    image = torch.rand(3, 4, 4)
    assert FloatImage(T.ToDtype(torch.float32, scale=True)).image(image) is image
