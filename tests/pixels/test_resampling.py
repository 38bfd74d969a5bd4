"""The resampling kernel on read-only arrays (Pillow's): torch's result, no warning machinery."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

from fastload.pixels.resampling import View, render, resample


@pytest.mark.parametrize("region", [np.s_[:, :], np.s_[5:40, 7:61]])
def test_a_read_only_array_resamples_as_a_writable_copy_of_it(region: tuple[slice, ...]) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    read_only = pixels.copy()
    read_only.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on a read-only array
        before = list(warnings.filters)
        got = resample(read_only[region], (1.0, 2.0, 30.0, 27.0), 20, 16)
        assert list(warnings.filters) == before
    want = resample(pixels[region].copy(), (1.0, 2.0, 30.0, 27.0), 20, 16)
    np.testing.assert_array_equal(got, want)
    assert read_only.flags.writeable is False


def test_the_shrink_is_torchs_antialiased_kernel() -> None:
    pixels = np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    pixels.setflags(write=False)
    got = resample(pixels, (0.0, 0.0, 50.0, 40.0), 25, 20)
    image = torch.from_numpy(pixels.copy()).permute(2, 0, 1)[None]
    want = torch.nn.functional.interpolate(
        image, size=(20, 25), mode="bilinear", antialias=True, align_corners=False
    )
    np.testing.assert_array_equal(got, want[0].permute(1, 2, 0).numpy())


def test_threads_resampling_read_only_arrays_leave_the_filters_as_they_were() -> None:
    # silencing torch's warning with warnings.catch_warnings in each call would let two
    # threads' saves and restores interleave, and leave one's filter behind for good
    pixels = np.random.default_rng(2).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    pixels.setflags(write=False)
    with warnings.catch_warnings():
        before = list(warnings.filters)

        def work() -> None:
            for _ in range(400):
                resample(pixels, (0.0, 0.0, 80.0, 60.0), 40, 30)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert list(warnings.filters) == before


@pytest.mark.parametrize("size", [(33, 24), (16, 12)], ids=["sliced", "shrunk by torch"])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_a_mirrored_view_is_the_mirror_of_the_unmirrored_one(
    channels: int, size: tuple[int, int]
) -> None:
    """In the unmirrored one's layout: C-contiguous, or the channels-first memory torch's
    shrinking kernel leaves (which a batch stacks without a transpose)."""
    pixels = np.random.default_rng(3).integers(0, 256, (30, 41, channels), dtype=np.uint8)
    box = (2.0, 3.0, 35.0, 27.0)
    plain = render(pixels, View(box, *size))
    mirrored = render(pixels, View(box, *size, mirror=True))
    assert mirrored.shape == plain.shape
    np.testing.assert_array_equal(mirrored, plain[:, ::-1])
    planar = plain.transpose(2, 0, 1).flags.c_contiguous and channels > 1
    assert (mirrored.transpose(2, 0, 1) if planar else mirrored).flags.c_contiguous
    assert planar == (size == (16, 12) and channels > 1)
