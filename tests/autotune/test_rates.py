"""Reading a stream of batches: every sample counted, whatever shape torch's loader (and the
collate functions public training scripts use) gives its batches."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchvision import tv_tensors

from fastload.autotune.rates import read_rate

SAMPLES = 10


def _image(k: int) -> torch.Tensor:
    return torch.full((3, 6 + k % 3, 8), k, dtype=torch.uint8)  # detection's sizes vary


def _detection(k: int) -> tuple[Any, dict[str, Any]]:
    boxes = tv_tensors.BoundingBoxes(
        torch.tensor([[0, 0, 4, 4]]), format="XYXY", canvas_size=(6, 8)
    )
    return tv_tensors.Image(_image(k)), {"boxes": boxes, "labels": torch.tensor([k % 5])}


def _references_collate(batch: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*batch))  # noqa: B905 (torchvision's detection references' own)


SHAPES: dict[str, tuple[Callable[[int], Any], Callable[[list[Any]], Any] | None]] = {
    "(images, labels)": (lambda k: (_image(0), k), None),
    "a dict whose first value is a string (webdataset's __key__)": (
        lambda k: {"__key__": f"sample{k:04d}", "pixel_values": _image(0).float(), "label": k},
        None,
    ),
    "a dict of strings and a nested dict": (
        lambda k: {"caption": f"a photo {k}", "meta": {"index": k}},
        None,
    ),
    "two views a sample and a label": (lambda k: ([_image(0), _image(1)], k), None),
    "detection, torchvision references' collate": (_detection, _references_collate),
    "detection, a list of samples": (_detection, lambda batch: batch),
    "strings": (lambda k: f"line {k}", None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_every_sample_is_counted(shape: str, batch_size: int) -> None:
    sample, collate = SHAPES[shape]
    dataset = [sample(k) for k in range(SAMPLES)]
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, collate_fn=collate)
    ticks = itertools.count()
    reading = read_rate(iter(loader), count=len(loader), clock=lambda: float(next(ticks)))
    assert (reading.samples, reading.batches) == (SAMPLES, len(loader))


def test_a_batch_that_tells_no_size_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot tell how many samples a dict batch holds"):
        read_rate(iter([{}]), count=1)
