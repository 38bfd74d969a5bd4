"""``RandomIoUCrop``'s tries checked together, against v2's own ``make_params`` trying one at
a time: the same crop and the same random stream after it, seed after seed."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as T
from torchvision import tv_tensors

from fastload.detection.iou_crop import RandomIoUCrop
from fastload.pixels.resampling import View


def boxes(
    count: int, width: int, height: int, seed: int, dtype: torch.dtype
) -> tv_tensors.BoundingBoxes:
    rng = torch.Generator().manual_seed(seed)
    corner = torch.rand(count, 2, generator=rng) * torch.tensor([width * 0.8, height * 0.8])
    size = 4 + torch.rand(count, 2, generator=rng) * torch.tensor([width * 0.5, height * 0.5])
    xywh = torch.cat([corner, size], dim=1).to(dtype)
    return tv_tensors.BoundingBoxes(xywh, format="XYWH", canvas_size=(height, width))


@pytest.mark.parametrize("count", [0, 1, 3, 12])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("size", [(640, 480), (333, 517), (2000, 97)])
def test_the_crops_and_the_stream_after_them_are_v2s(count, dtype, size) -> None:
    width, height = size
    theirs = T.RandomIoUCrop()
    ours = RandomIoUCrop()
    image = tv_tensors.Image(torch.zeros(3, height, width, dtype=torch.uint8))
    for seed in range(25):
        given = boxes(count, width, height, seed, dtype)
        torch.manual_seed(seed)
        expected = theirs.make_params([image, given])
        after_theirs = torch.rand(3)
        torch.manual_seed(seed)
        crop = ours.make_params_with(View.full(width, height), given)
        assert torch.equal(torch.rand(3), after_theirs), seed
        if not expected:
            assert crop is None, seed
            continue
        assert crop is not None, seed
        assert (crop.top, crop.left, crop.height, crop.width) == (
            expected["top"],
            expected["left"],
            expected["height"],
            expected["width"],
        ), seed
        assert torch.equal(crop.inside, expected["is_within_crop_area"]), seed


def test_a_samples_own_generator_is_drawn_from_and_the_global_stream_left_alone() -> None:
    """Thread workers draw each sample from its own generator (fastload.sampling.drawing,
    seeded as a worker process seeds torch): the tries' numbers come from it, as v2's would from
    the seeded global stream, and the process's stream is untouched."""
    from fastload.sampling import drawing

    given = boxes(4, 640, 480, 1, torch.float32)
    image = tv_tensors.Image(torch.zeros(3, 480, 640, dtype=torch.uint8))
    for seed in range(10):
        torch.manual_seed(seed)
        expected = T.RandomIoUCrop().make_params([image, given])
        torch.manual_seed(1234)
        before = torch.get_rng_state()
        with drawing.sample(seed):
            plan = drawing.own_draws(RandomIoUCrop().make_params_with)
            assert plan is not None
            crop = plan(View.full(640, 480), given)
        assert torch.equal(torch.get_rng_state(), before)
        if not expected:
            assert crop is None
            continue
        assert crop is not None and (crop.top, crop.left) == (expected["top"], expected["left"])
