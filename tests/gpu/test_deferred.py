"""Draws made per sample, applied on the batch: what travels from the samples to the ops."""

from __future__ import annotations

import pytest
import torch

from fastload.datasets.skipping import Skipped
from fastload.gpu.deferred import Deferred, DrawPerSample, Pending, applying, split_drawn
from fastload.gpu.policies import PerImageRandomErasing
from fastload.sampling import SeededSamples


def test_split_keeps_markers_and_the_batch_seed_and_lines_the_draws_up() -> None:
    image = torch.zeros(3, 4, 4, dtype=torch.uint8)
    marker = Skipped("bad.jpg", "truncated")
    samples = SeededSamples([(Pending(image, ("a",)), 0), marker, (Pending(image, ("b",)), 1)], 7)
    plain, draws = split_drawn(samples)
    assert isinstance(plain, SeededSamples) and plain.seed == 7
    assert plain[1] is marker and plain[0][0] is image and plain[2][1] == 1
    assert draws == [("a",), ("b",)]  # one per sample that will be in the batch
    assert split_drawn([(image, 0)]) == ([(image, 0)], None)


def test_a_deferred_op_applies_its_slot_of_each_samples_draws() -> None:
    erase = PerImageRandomErasing(p=1.0, value=9)
    images = torch.zeros(2, 3, 16, 16)
    torch.manual_seed(0)
    pending = [DrawPerSample([erase])(image) for image in images]
    op = Deferred(erase, 0, "boxes")
    with applying([p.draws for p in pending]):
        out = op(images)
    torch.manual_seed(0)
    assert torch.equal(out, erase(images))  # the same draws, made one sample at a time
    with pytest.raises(RuntimeError, match="came without them"):
        op(images)
