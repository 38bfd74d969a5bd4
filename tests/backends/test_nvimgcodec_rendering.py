"""The nvImageCodec executor's renderers on CPU tensors: the batch renderer (what the GPU path
runs) against the per-sample torch renderer and the CPU backends' renderer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from images import jpeg_bytes, photo, with_orientation
from torch.utils._python_dispatch import TorchDispatchMode

import fastload
from fastload import transforms as T
from fastload.backends.nvimgcodec import rendering
from fastload.pixels.image import probe
from fastload.transforms import View

TRANSFORMS = {
    "crop": T.RandomResizedCrop(48),
    "val": T.Compose([T.Resize(70), T.CenterCrop(60)]),
    "pad": T.CenterCrop(300),
    "bicubic-flip": T.Compose(
        [T.Resize((50, 30), interpolation="bicubic"), T.RandomHorizontalFlip(1.0)]
    ),
    "off-grid": T.Resize((37, 53)),  # a box off the pixel grid: sampled
    "nearest": T.Compose([T.Resize(64, interpolation="nearest"), T.CenterCrop(40)]),
}


def decoded(width: int, height: int, orientation: int, seed: int) -> tuple[np.ndarray, bytes]:
    source = photo(width, height, seed=seed)
    data = with_orientation(source, orientation) if orientation != 1 else jpeg_bytes(source)
    return np.asarray(fastload.backends.create("turbojpeg").decode_jpeg(data, 1)), data


def planned(transform, array: np.ndarray, data: bytes, seed: int, *, regions: bool):
    """A sample as the executor plans it, and the image it would decode for it."""
    info = probe(data)
    torch.manual_seed(seed)
    view = transform.plan(View.full(*info.shown_size))
    sample = rendering.plan_sample(view, info, info.shown_size, regions=regions)
    if sample.region is not None:
        x0, y0, x1, y1 = sample.region
        array = array[y0:y1, x0:x1]
    return torch.from_numpy(np.ascontiguousarray(array)), sample


def options_of(name: str) -> dict:
    mode = {"bicubic-flip": "bicubic", "nearest": "nearest"}.get(name, "bilinear")
    return {"interpolation": mode}


def batch_of(name: str, count: int, *, regions: bool = True, sizes=None):
    images, samples = [], []
    for k in range(count):
        width, height = sizes[k] if sizes else (200 - 7 * (k % 5), 150 + 5 * (k % 4))
        array, data = decoded(width, height, orientation=1 + k % 8, seed=k)
        image, sample = planned(TRANSFORMS[name], array, data, k, regions=regions)
        images.append(image)
        samples.append(sample)
    return images, samples


def differences(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    diff = (a.to(torch.int16) - b.to(torch.int16)).abs()
    return float(diff.float().mean()), int(diff.max())


@pytest.mark.parametrize("regions", [True, False], ids=["regions", "whole"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_the_batch_renderer_matches_both_per_sample_renderers(name: str, regions: bool) -> None:
    """Eight samples, EXIF orientations 1-8, images of several sizes, in one call."""
    images, samples = batch_of(name, 8, regions=regions)
    options = options_of(name)
    batch = rendering.render_batch(images, samples, options)
    assert batch.dtype == torch.uint8 and batch.is_contiguous()
    for k, (image, sample) in enumerate(zip(images, samples, strict=True)):
        alone = rendering.render_tensor(image, sample, options)
        mean, most = differences(batch[k], alone)
        assert batch[k].shape == alone.shape and mean <= 0.5 and most <= 1, (k, mean, most)
        cpu = torch.from_numpy(rendering.render_array(image.numpy(), sample, options))
        assert differences(batch[k], cpu.permute(2, 0, 1))[0] <= 1.5


def test_far_different_sizes_take_buckets_and_an_outlier_renders_alone() -> None:
    sizes = [(60, 50), (64, 48), (200, 160), (210, 150), (90, 80), (640, 480), (58, 61)]
    images, samples = batch_of("val", len(sizes), regions=False, sizes=sizes)
    buckets, alone = rendering.size_buckets([(i.shape[0], i.shape[1]) for i in images])
    assert alone == [5] and len(buckets) > 1
    assert sorted(k for bucket in buckets for k in bucket) == [0, 1, 2, 3, 4, 6]
    batch = rendering.render_batch(images, samples, {})
    for k, (image, sample) in enumerate(zip(images, samples, strict=True)):
        mean, most = differences(batch[k], rendering.render_tensor(image, sample, {}))
        assert mean <= 0.5 and most <= 1, (k, mean, most)


def test_views_of_different_sizes_are_refused() -> None:
    array, data = decoded(120, 90, 1, 0)
    images, samples = [], []
    for transform in (T.Resize((20, 20)), T.Resize((30, 20))):
        image, sample = planned(transform, array, data, 0, regions=False)
        images.append(image)
        samples.append(sample)
    with pytest.raises(ValueError, match=r"views of different sizes \[\(20, 20\), \(30, 20\)\]"):
        rendering.render_batch(images, samples, {})


class Counter(TorchDispatchMode):
    """Counts the torch operations dispatched (each a kernel launch on a GPU, at most)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_operations_a_batch_dispatches_barely_grow_with_the_batch() -> None:
    """One copy a sample (and the view it writes through), the rest once a bucket; and no
    value is read back from the device (a wait on the GPU) on the way."""
    counts = {}
    for n in (16, 64):
        images, samples = batch_of("crop", n, regions=True)
        with Counter() as counter:
            rendering.render_batch(images, samples, {})
        counts[n] = len(counter.names)
        assert "aten._local_scalar_dense.default" not in counter.names
    assert (counts[64] - counts[16]) / 48 <= 2.0, counts
