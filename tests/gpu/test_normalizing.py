"""The compiled normalize kernel (fastload/gpu/normalizing.c) against torchvision's Normalize.

The kernel is built wherever fastload installs with a C compiler: in CI a missing kernel fails
these tests (as a missing backend does), elsewhere it skips them.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from strictness import backends_required

from fastload import gpu
from fastload.gpu import functional as F
from fastload.gpu.stage import BatchStage
from fastload.memory import buffers

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
KERNEL = F.NORMALIZE_KERNEL


def kernel():
    """The kernel; where it is not built, a skip here and a failure in CI (strictness.py)."""
    try:
        return importlib.import_module(KERNEL)
    except ImportError as exc:
        if backends_required():
            raise
        pytest.skip(f"the normalize kernel is not built here: {exc}")


def images(n: int, c: int, h: int, w: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(n * 131 + h * 7 + w)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=generator)


def torchvisions(x: torch.Tensor, mean: list[float], std: list[float]) -> torch.Tensor:
    return TF.normalize(TF.to_dtype(x, torch.float32, scale=True), mean, std)


def factors_and_shifts(mean: list[float], std: list[float]) -> tuple[list[float], list[float]]:
    return [1 / (255 * s) for s in std], [-m / s for m, s in zip(mean, std, strict=True)]


def test_the_kernel_is_built() -> None:
    assert callable(kernel().planes)


@pytest.mark.parametrize(
    "shape",
    [
        (2, 3, 5, 7),  # fewer values a plane than one vector step
        (3, 3, 37, 29),  # planes that end mid-vector and start unaligned after the first
        (8, 3, 128, 160),  # 1.9 MB of float32: written with streaming stores
        (2, 1, 64, 64),
    ],
)
def test_planes_give_torchvisions_values(shape: tuple[int, int, int, int]) -> None:
    x = images(*shape)
    mean, std = MEAN[: shape[1]], STD[: shape[1]]
    out = torch.full(shape, float("nan"))
    kernel().planes(x.numpy(), out.numpy(), shape[2] * shape[3], *factors_and_shifts(mean, std))
    torch.testing.assert_close(out, torchvisions(x, mean, std), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "shape",
    [
        (2, 3, 5, 7),  # fewer pixels than one vector step
        (3, 3, 37, 29),  # vector steps, then the last pixels one by one
        (8, 3, 128, 160),
        (2, 1, 6, 6),  # other channel counts: one pixel at a time
        (2, 4, 9, 9),
    ],
)
def test_channels_last_interleaves_each_images_pixels(shape: tuple[int, int, int, int]) -> None:
    x = images(*shape)
    n, c, h, w = shape
    mean, std = [0.485, 0.456, 0.406, 0.5][:c], [0.229, 0.224, 0.225, 0.25][:c]
    out = torch.full((n, h, w, c), float("nan"))
    kernel().planes(x.numpy(), out.numpy(), h * w, *factors_and_shifts(mean, std), True)
    expected = torchvisions(x, mean, std)
    torch.testing.assert_close(out.permute(0, 3, 1, 2), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("values", [100, 2**20])
def test_an_output_that_starts_unaligned_is_written_whole(values: int) -> None:
    x = images(1, 1, 1, values)
    memory = torch.full((values + 1,), float("nan"))
    out = memory[1:]  # 4 bytes past the allocation's alignment
    kernel().planes(x.numpy(), out.numpy(), values, [1 / 255], [-0.5])
    assert torch.isnan(memory[0])
    torch.testing.assert_close(out, x.flatten().float() / 255 - 0.5, atol=1e-6, rtol=1e-6)


def test_one_mean_for_every_channel() -> None:
    x = images(4, 3, 9, 11)
    out = torch.empty(x.shape)
    kernel().planes(x.numpy(), out.numpy(), 99, [1 / (255 * 0.25)], [-2.0])
    torch.testing.assert_close(out, torchvisions(x, [0.5] * 3, [0.25] * 3), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda x: np.empty(x.size, np.float64), "float32"),
        (lambda x: np.empty(x.size - 1, np.float32), "dst holds 59 float32 values; src has 60"),
        (lambda x: np.empty(x.size, np.float32)[::2], "contiguous"),
    ],
)
def test_a_bad_output_is_refused(make, message: str) -> None:
    x = images(2, 3, 2, 5).numpy()
    with pytest.raises((ValueError, BufferError), match=message):
        kernel().planes(x, make(x), 10, [1.0] * 3, [0.0] * 3)


def test_planes_that_do_not_divide_the_batch_are_refused() -> None:
    x = images(1, 3, 2, 5).numpy()
    with pytest.raises(ValueError, match="not whole planes of 7 values for 3 channels"):
        kernel().planes(x, np.empty(x.size, np.float32), 7, [1.0] * 3, [0.0] * 3)
    with pytest.raises(ValueError, match="one value a channel"):
        kernel().planes(x, np.empty(x.size, np.float32), 10, [1.0] * 3, [0.0] * 2)


@pytest.mark.parametrize("built", [True, False])
def test_normalize_gives_the_same_values_with_and_without_the_kernel(
    built: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel writes a contiguous uint8 batch in one call; without it (no C compiler at
    install), OpenCV's planes give the same batch."""
    calls = []
    if built:
        planes = kernel().planes
        monkeypatch.setattr(kernel(), "planes", lambda *args: calls.append(1) or planes(*args))
    else:
        monkeypatch.setitem(sys.modules, KERNEL, None)  # its import fails, as when not built
    x = images(5, 3, 40, 48)
    out = F.normalize(x, MEAN, STD)
    assert bool(calls) is built  # the kernel wrote it, or OpenCV did
    assert out.dtype == torch.float32 and out.is_contiguous()
    torch.testing.assert_close(out, torchvisions(x, MEAN, STD), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("built", [True, False])
def test_a_batch_asked_in_channels_last_is_written_so(
    built: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within buffers.channels_last the normalized batch is made in that layout, by the kernel
    in its one pass or, without it, by torch's ops; outside it, contiguous as before."""
    if not built:
        monkeypatch.setitem(sys.modules, KERNEL, None)
    x = images(4, 3, 20, 24)
    with buffers.channels_last():
        out = F.normalize(x, MEAN, STD)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    torch.testing.assert_close(out, torchvisions(x, MEAN, STD), atol=1e-6, rtol=1e-6)
    assert F.normalize(x, MEAN, STD).is_contiguous()


def test_the_stage_delivers_channels_last_in_the_memory_normalize_wrote() -> None:
    """No copy into channels-last memory after the ops: the batch the stage hands out is the
    kept buffer normalize took (the ring keeps it alive, so no new memory can be at its
    address)."""
    ring = buffers.BatchRing(2)
    buffers.use(ring)
    try:
        kept = ring.take((4, 20, 24, 3), torch.float32)  # N x H x W x C: channels-last memory
        address = kept.data_ptr()
        del kept  # free in the ring again
        x = images(4, 3, 20, 24)
        out = BatchStage(gpu.Normalize(MEAN, STD), channels_last=True)(x)
        assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
        torch.testing.assert_close(out, torchvisions(x, MEAN, STD), atol=1e-6, rtol=1e-6)
        assert out.data_ptr() == address
    finally:
        buffers.use(None)
