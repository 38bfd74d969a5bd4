"""Batch helpers against torch's own default_collate."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from fastload.memory.tensors import (
    collated_around,
    images_key,
    inputs_of,
    stackable_fields,
    stackable_firsts,
    targets_of,
)


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
    got = collated_around({0: torch.stack(firsts)}, samples)
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


def _record(k: int) -> dict[str, Any]:
    """A sample as Hugging Face image pipelines make them."""
    return {
        "label": k,
        "pixel_values": _image(k).float(),
        "mask": torch.full((4, 5), k, dtype=torch.uint8),
        "name": f"n{k}",
    }


def _pair(k: int) -> tuple[Any, ...]:
    """A segmentation sample as a tuple: the image, its mask, a name."""
    return _image(k), torch.full((4, 5), k, dtype=torch.int64), f"n{k}"


@pytest.mark.parametrize(
    ("samples", "fields"),
    [
        ([(_image(0), 3), (_image(1), 4)], [0]),
        ([_pair(0), _pair(1)], [0, 1]),
        ([_record(0), _record(1), _record(2)], ["pixel_values", "mask"]),
        ([{1: k, 0: _image(k)} for k in range(3)], [0]),  # a dict's keys may be ints
    ],
    ids=["tuples", "tuples with masks", "dicts", "int keys"],
)
def test_stacking_the_fields_then_the_rest_is_default_collate(
    samples: Any, fields: list[Any]
) -> None:
    """The images first (a dict's largest field), then the later fields of plain tensors; any
    of them stacked already, the rest collated around them is default_collate's batch."""
    found = stackable_fields(samples)
    assert [field for field, _ in found] == fields
    want = default_collate(samples)
    for some in range(1, len(found) + 1):
        stacked = {field: torch.stack(column) for field, column in found[:some]}
        assert _same(collated_around(stacked, samples), want)


@pytest.mark.parametrize(
    ("samples", "fields"),
    [
        # the pixels of two shapes: the masks, the only field that stacks
        ([_record(0), {**_record(1), "pixel_values": torch.zeros(3, 4, 6)}], ["mask"]),
        ([{"label": 0, "name": "a"}, {"label": 1, "name": "b"}], []),
        ([_record(0), (_image(1), 1)], []),
        ([collections.OrderedDict(_record(0)), collections.OrderedDict(_record(1))], []),
        # the masks of two dtypes, or one missing: the images alone
        ([_pair(0), (_image(1), torch.zeros(4, 5, dtype=torch.uint8), "b")], [0]),
        ([_pair(0), {**_record(1), "mask": None}][::-1], []),
        ([{**_record(0), "mask": None}, _record(1)], ["pixel_values"]),
    ],
    ids=[
        "two shapes",
        "no tensor",
        "a dict and a tuple",
        "a dict subclass",
        "masks of two dtypes",
        "a tuple and a dict",
        "a mask missing",
    ],
)
def test_a_field_stacks_only_where_every_sample_has_one_shape_and_dtype(
    samples: Any, fields: list[Any]
) -> None:
    assert [field for field, _ in stackable_fields(samples)] == fields


def test_tuples_of_unequal_lengths_get_default_collates_error() -> None:
    """Only the images stack; collating the rest around them refuses as torch does."""
    samples = [_pair(0), _pair(1)[:2]]
    assert [field for field, _ in stackable_fields(samples)] == [0]
    with pytest.raises(RuntimeError) as theirs:
        default_collate(samples)
    with pytest.raises(RuntimeError) as ours:
        collated_around({0: torch.stack([_image(0), _image(1)])}, samples)
    assert str(ours.value) == str(theirs.value)


def test_a_dict_batchs_images_are_its_largest_4d_tensor() -> None:
    small, large = torch.zeros(2, 1, 4, 4), torch.zeros(2, 3, 4, 4)
    batch = {"mask": small, "pixel_values": large, "tokens": torch.zeros(2, 99)}
    assert images_key(batch) == "pixel_values"
    assert images_key({"first": large, "second": large.clone()}) == "first"
    assert images_key({"tokens": torch.zeros(2, 99), "label": 3}) is None


def test_a_dict_batch_from_default_collate_reads_as_images_and_labels() -> None:
    samples = [
        {"__key__": f"s{k}", "pixel_values": _image(k), "labels": k, "label": 9} for k in range(3)
    ]
    batch = default_collate(samples)
    assert inputs_of(batch) is batch["pixel_values"] and targets_of(batch) is batch["labels"]
    plain = default_collate([{"text": torch.zeros(4), "label": k} for k in range(3)])
    assert inputs_of(plain) is plain["text"] and targets_of(plain) is plain["label"]
    assert targets_of(default_collate([{"pixel_values": _image(0)}])) is None
