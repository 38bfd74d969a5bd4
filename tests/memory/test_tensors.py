"""Batch helpers against torch's own default_collate."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from fastload.memory.tensors import collated_around, stackable_firsts


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _image(k: int) -> torch.Tensor:
    return torch.full((3, 4, 5), k, dtype=torch.uint8)


@pytest.mark.parametrize(
    "samples",
    [
        [(_image(0),), (_image(1),)],
        [(_image(0), 3), (_image(1), 4)],
        [
            (_image(0), {"boxes": torch.zeros(2, 4)}, "a"),
            (_image(1), {"boxes": torch.ones(2, 4)}, "b"),
        ],
    ],
    ids=["one field", "with labels", "with dicts and strings"],
)
def test_stacking_the_first_fields_then_the_rest_is_default_collate(samples: Any) -> None:
    firsts = stackable_firsts(samples)
    assert firsts is not None
    got = collated_around(torch.stack(firsts), samples)
    want = default_collate(samples)
    assert _same(got, want)


@pytest.mark.parametrize(
    "samples",
    [
        [],
        _image(0),
        [_image(0), _image(1)],
        [[_image(0), 1], [_image(1), 2]],
        [(_image(0), 1), (torch.zeros(3, 4, 6, dtype=torch.uint8), 2)],
        [(_image(0), 1), (_image(1).float(), 2)],
        [(1, _image(0)), (2, _image(1))],
        [(_image(0), 1), ()],
    ],
    ids=[
        "empty",
        "a tensor",
        "tensors",
        "lists",
        "two shapes",
        "two dtypes",
        "ints first",
        "empty tuple",
    ],
)
def test_anything_default_collate_would_not_stack_as_one_first_field_is_refused(
    samples: Any,
) -> None:
    assert stackable_firsts(samples) is None
