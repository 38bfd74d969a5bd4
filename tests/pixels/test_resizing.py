"""fastload's resize kernel (``resizing.c``): torch's antialiased uint8 resize, pixel for pixel,
and the resampling through it, in the main thread and in worker threads."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fastload.pixels.resampling import RESIZE_KERNEL, resample
from fastload.sampling import drawing

kernel = importlib.import_module(RESIZE_KERNEL)  # CI builds it: a missing build fails here


def _torch(region: np.ndarray, width: int, height: int, mode: str) -> np.ndarray:
    image = torch.from_numpy(region.copy()).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(
        image, size=(height, width), mode=mode, antialias=True, align_corners=False
    )
    return out[0].numpy()


def _kernel(
    array: np.ndarray, box: tuple[int, int, int, int], width: int, height: int, **options: Any
) -> np.ndarray:
    channels = array.shape[2]
    planes = kernel.resize(
        array,
        array.strides[0],
        channels,
        box,
        width,
        height,
        options.get("cubic", False),
        options.get("mirror", False),
    )
    return np.frombuffer(planes, np.uint8).reshape(channels, height, width)


def _image(rng: np.random.Generator, rows: int, cols: int, channels: int) -> np.ndarray:
    noise = rng.integers(0, 256, (rows, cols, channels), dtype=np.uint8)
    # half of them smooth, as photos are: sums that land near the rounding's halves
    return noise if rng.random() < 0.5 else np.cumsum(noise, axis=1, dtype=np.uint8)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_the_kernel_gives_torchs_pixels_for_any_box_and_size(mode: str) -> None:
    rng = np.random.default_rng(7 if mode == "bilinear" else 8)
    for _ in range(400):
        channels = int(rng.integers(1, 5))
        rows, cols = (int(v) for v in rng.integers(1, 400, 2))
        array = _image(rng, rows, cols, channels)
        x0, y0 = int(rng.integers(0, cols)), int(rng.integers(0, rows))
        x1, y1 = int(rng.integers(x0 + 1, cols + 1)), int(rng.integers(y0 + 1, rows + 1))
        # shrinking, enlarging, one of each, and sizes kept on one axis
        width = int(rng.choice([rng.integers(1, 300), x1 - x0]))
        height = int(rng.choice([rng.integers(1, 300), y1 - y0]))
        mirror = bool(rng.integers(0, 2))
        want = _torch(array[y0:y1, x0:x1], width, height, mode)
        got = _kernel(
            array, (x0, y0, x1, y1), width, height, cubic=mode == "bicubic", mirror=mirror
        )
        np.testing.assert_array_equal(got[:, :, ::-1] if mirror else got, want)


def test_the_kernel_reads_a_read_only_array_to_its_last_byte() -> None:
    # the last row's last pixels are read by the vector path's neighbours' rule, not past it
    array = np.random.default_rng(3).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    array.setflags(write=False)
    want = _torch(array, 20, 11, "bilinear")
    np.testing.assert_array_equal(_kernel(array, (0, 0, 53, 37), 20, 11), want)


@pytest.mark.parametrize(
    ("box", "width", "height", "channels", "words"),
    [
        ((0, 0, 60, 40), 10, 10, 5, "5 channels (1 to 4)"),
        ((10, 0, 10, 40), 10, 10, 3, "box (10, 0, 10, 40)"),
        ((0, 0, 60, 40), 0, 10, 3, "output 0 x 10"),
        ((0, 0, 70, 40), 10, 10, 3, "rows 180 bytes apart"),
        ((0, 0, 60, 41), 10, 10, 3, "reaches past the 7200 source bytes"),
    ],
)
def test_the_kernel_refuses_what_it_cannot_read_naming_it(
    box: tuple[int, int, int, int], width: int, height: int, channels: int, words: str
) -> None:
    array = np.zeros((40, 60, 3), np.uint8)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        kernel.resize(array, 180, channels, box, width, height, False, False)


def _in_worker_thread(function: Callable[[], Any]) -> Any:
    got: list[Any] = []

    def run() -> None:
        drawing.worker_thread()
        got.append(function())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return got[0]


@pytest.mark.parametrize("mirror", [False, True])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_a_worker_threads_resample_is_the_main_threads(mirror: bool, interpolation: str) -> None:
    array = np.random.default_rng(5).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    options: dict[str, Any] = {"interpolation": interpolation, "mirror": mirror}
    cases = [
        ((13.0, 20.0, 313.0, 251.0), 224, 224, {}),  # a crop, shrunk: the kernel
        ((0.0, 0.0, 400.0, 300.0), 64, 300, {}),  # one axis kept
        ((1.0, 1.0, 101.0, 91.0), 50, 45, {"scale": (0.5, 0.5)}),  # a DCT-reduced decode
        ((2.5, 3.0, 90.0, 77.0), 32, 32, {}),  # off the pixel grid: the warp
        ((-20.0, -10.0, 200.0, 150.0), 44, 32, {}),  # padded
        ((10.0, 10.0, 40.0, 30.0), 60, 40, {}),  # enlarged
    ]
    for box, width, height, more in cases:
        main = resample(array, box, width, height, **options, **more)
        args = (array, box, width, height)
        threaded = _in_worker_thread(
            lambda args=args, more=more: resample(*args, **options, **more)
        )
        np.testing.assert_array_equal(threaded, main)
        unmirrored = resample(array, box, width, height, interpolation=interpolation, **more)
        np.testing.assert_array_equal(main, unmirrored[:, ::-1] if mirror else unmirrored)
        torch.from_numpy(threaded)  # a tensor can be made from it: no negative strides


def test_resample_resizes_with_the_kernel_where_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, int]] = []
    real = kernel.resize

    class Counting:
        @staticmethod
        def resize(*args: Any) -> Any:
            calls.append((args[4], args[5]))
            return real(*args)

    array = np.random.default_rng(6).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    box = (0.0, 0.0, 160.0, 120.0)
    want = _torch(array, 40, 30, "bilinear").transpose(1, 2, 0)
    monkeypatch.setitem(sys.modules, RESIZE_KERNEL, Counting)
    np.testing.assert_array_equal(resample(array, box, 40, 30), want)
    np.testing.assert_array_equal(_in_worker_thread(lambda: resample(array, box, 40, 30)), want)
    assert calls == [(40, 30), (40, 30)]
    # enlarging too, torch's antialiased numbers (torchvision's resize of a tensor)
    enlarged = _torch(array, 320, 240, "bilinear").transpose(1, 2, 0)
    np.testing.assert_array_equal(resample(array, box, 320, 240), enlarged)
    assert calls[-1] == (320, 240)
    resample(array[:, :, :1].repeat(5, axis=2), box, 40, 30)  # 5 channels: torch's
    resample(array, box, 320, 240, antialias=False)  # OpenCV's
    assert len(calls) == 3


def test_an_unbuilt_kernel_leaves_the_resize_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    array = np.random.default_rng(9).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    want = resample(array, (3.0, 4.0, 123.0, 104.0), 40, 30, mirror=True)
    monkeypatch.setitem(sys.modules, RESIZE_KERNEL, None)  # its import fails, as unbuilt
    got = _in_worker_thread(lambda: resample(array, (3.0, 4.0, 123.0, 104.0), 40, 30, mirror=True))
    np.testing.assert_array_equal(got, want)
