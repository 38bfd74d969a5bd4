"""What goes into a thread's kept memory when a field is stacked there, against torch's own
collate of the same tensors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.utils.data import default_collate

from fastload.loader.collate import stack_in_ring
from fastload.memory import buffers


def _images(count: int = 4, *, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    # 4 x 3 x 64 x 64 float32 is 196 KiB: past the size that goes by value
    return [torch.full((3, 64, 64), k, dtype=dtype) for k in range(count)]


def _ring_of_one() -> tuple[buffers.BatchRing, int]:
    """A ring keeping one free buffer of a batch of :func:`_images`, and its address."""
    ring = buffers.BatchRing(1)
    address = ring.take((4, 3, 64, 64), torch.float32).data_ptr()  # dropped: free again
    return ring, address


def test_a_plain_column_stacks_into_the_threads_ring() -> None:
    ring, address = _ring_of_one()
    with buffers.using(ring):
        batch = stack_in_ring(_images())
    assert batch.data_ptr() == address
    assert torch.equal(batch, default_collate(_images()))


class _Marked(torch.Tensor):
    pass


def _needing_grad() -> list[torch.Tensor]:
    return [image.requires_grad_() for image in _images()]


def _one_marked() -> list[torch.Tensor]:
    images = _images()
    images[2] = images[2].as_subclass(_Marked)
    return images


def _two_dtypes() -> list[torch.Tensor]:
    images = _images()
    images[1] = images[1].double()
    return images


@pytest.mark.parametrize(
    "column",
    [_needing_grad, _one_marked, _two_dtypes],
    ids=["needing grad", "a subclass among them", "two dtypes"],
)
def test_a_column_a_kept_buffer_cannot_hold_as_torch_makes_it_is_torchs(
    column: Callable[[], list[torch.Tensor]],
) -> None:
    ring, address = _ring_of_one()
    with buffers.using(ring):
        batch = stack_in_ring(column())
    want = default_collate(column())
    assert batch.data_ptr() != address
    assert type(batch) is type(want)
    assert batch.dtype == want.dtype
    assert batch.requires_grad == want.requires_grad
    assert torch.equal(batch, want)


def test_tensors_of_two_shapes_get_torchs_error() -> None:
    column = [*_images(2), torch.zeros(3, 64, 65)]
    with pytest.raises(RuntimeError) as theirs:
        default_collate(column)
    with buffers.using(buffers.BatchRing(2)), pytest.raises(RuntimeError) as ours:
        stack_in_ring(column)
    assert str(ours.value) == str(theirs.value)
