"""KeepAllFirst: torchvision's SanitizeBoundingBoxes, skipped only where it keeps every box."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchvision.transforms.v2 as v2
from torchvision import tv_tensors

from fastload.detection.sanitize import KeepAllFirst


def _sample(boxes: list[list[float]], *, labels_key: str = "labels") -> tuple[Any, Any]:
    image = tv_tensors.Image(torch.randint(0, 256, (3, 40, 50), dtype=torch.uint8))
    n = len(boxes)
    masks = torch.zeros(n, 40, 50, dtype=torch.uint8)
    for k, (x0, y0, x1, y1) in enumerate(boxes):
        masks[k, int(y0) : int(y1), int(x0) : int(x1)] = 1
    target = {
        "boxes": tv_tensors.BoundingBoxes(
            torch.tensor(boxes).reshape(-1, 4), format="XYXY", canvas_size=(40, 50)
        ),
        labels_key: torch.arange(n),
        "masks": tv_tensors.Mask(masks),
        "image_id": 7,
    }
    return image, target


def _assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _assert_same(got[key], want[key])
    elif isinstance(want, (tuple, list)):
        for a, b in zip(got, want, strict=True):
            _assert_same(a, b)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        if isinstance(want, tv_tensors.BoundingBoxes):
            assert (got.format, got.canvas_size) == (want.format, want.canvas_size)
    else:
        assert got == want


@pytest.mark.parametrize(
    "boxes",
    [
        [[1.0, 2.0, 20.0, 30.0], [5.0, 5.0, 45.0, 39.0]],  # every box kept
        [[1.0, 2.0, 20.0, 30.0], [5.0, 5.0, 5.5, 39.0]],  # one too narrow
        [[3.0, 3.0, 3.0, 9.0]],  # degenerate: none left
        [],  # no objects at all
    ],
)
@pytest.mark.parametrize("min_size, min_area", [(1.0, 1.0), (10.0, 300.0)])
def test_the_sample_is_what_torchvision_gives(
    boxes: list[list[float]], min_size: float, min_area: float
) -> None:
    op = v2.SanitizeBoundingBoxes(min_size=min_size, min_area=min_area)
    image, target = _sample(boxes)
    _assert_same(KeepAllFirst(op)(image, target), op(image, target))


def test_every_box_kept_hands_the_sample_on_without_copying_it() -> None:
    image, target = _sample([[1.0, 2.0, 20.0, 30.0]])
    got_image, got_target = KeepAllFirst(v2.SanitizeBoundingBoxes())(image, target)
    assert got_image is image and got_target["masks"] is target["masks"]


def test_labels_it_cannot_find_or_that_do_not_match_fail_as_torchvision_fails() -> None:
    op = v2.SanitizeBoundingBoxes()
    image, target = _sample([[1.0, 2.0, 20.0, 30.0]], labels_key="category")
    with pytest.raises(ValueError, match="Could not infer where the labels are"):
        op(image, target)
    with pytest.raises(ValueError, match="Could not infer where the labels are"):
        KeepAllFirst(op)(image, target)
    image, target = _sample([[1.0, 2.0, 20.0, 30.0]])
    target["labels"] = torch.arange(3)
    with pytest.raises(ValueError, match="must match the number of labels"):
        KeepAllFirst(op)(image, target)


def test_a_label_like_key_is_found_as_torchvision_finds_it() -> None:
    op = v2.SanitizeBoundingBoxes()
    image, target = _sample([[1.0, 2.0, 20.0, 30.0], [5.0, 5.0, 5.5, 39.0]], labels_key="my_label")
    _assert_same(KeepAllFirst(op)(image, target), op(image, target))
