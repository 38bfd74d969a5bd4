"""Raw pixels as binary PPMs (fastload.pixels.raw_pixels): written and read as every image reader
reads them, and decoded by every per-sample backend as a view of their bytes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fastload import backends
from fastload import transforms as fl
from fastload.pixels.image import probe
from fastload.pixels.raw_pixels import encode_ppm, ppm_pixels
from fastload.pixels.resampling import View, resample


def pixels(width: int = 37, height: int = 23, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_pillow_reads_ours_and_we_read_pillows() -> None:
    array = pixels()
    ours = encode_ppm(array)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(ours))), array)
    theirs = io.BytesIO()
    Image.fromarray(array).save(theirs, "PPM")
    assert np.array_equal(ppm_pixels(theirs.getvalue()), array)
    info = probe(ours)
    assert (info.format, info.width, info.height, info.components) == ("ppm", 37, 23, 3)


def test_a_header_with_comments_and_other_spacing() -> None:
    array = pixels(4, 3)
    data = b"P6 # made by hand\n4\t3\r\n# the largest value\n255\n" + array.tobytes()
    assert np.array_equal(ppm_pixels(data), array)


def test_what_is_not_an_8_bit_ppm_is_left_to_decoders() -> None:
    assert ppm_pixels(b"\xff\xd8\xff\xe0") is None
    assert ppm_pixels(b"P6\n2 2\n65535\n" + bytes(24)) is None  # 16-bit
    assert ppm_pixels(b"P6\n2 x\n255\n" + bytes(12)) is None
    assert ppm_pixels(b"P5\n2 2\n255\n" + bytes(4)) is None  # grey


def test_a_short_ppm_says_what_it_lacks() -> None:
    data = encode_ppm(pixels(5, 7))
    with pytest.raises(ValueError, match=r"5 x 7 RGB \(105 bytes of pixels\), 100 follow"):
        ppm_pixels(data[:-5])


def test_only_rgb_uint8_is_written() -> None:
    with pytest.raises(ValueError, match=r"H x W x 3 uint8, got \(4, 4\) uint8"):
        encode_ppm(np.zeros((4, 4), np.uint8))


@pytest.mark.parametrize("name", backends.names("decoder"))
def test_every_backend_renders_a_ppm_from_its_bytes(name: str) -> None:
    """The planned view resampled from the PPM's own pixels: what resampling the decoded
    array gives, on every per-sample backend."""
    array = pixels(120, 90, seed=3)
    data = encode_ppm(array)
    backend = backends.create(name)
    op = fl.Compose([fl.RandomResizedCrop(48), fl.RandomHorizontalFlip(1.0)])
    view = op.plan(View.full(120, 90))
    expected = resample(array, view.box, view.width, view.height)[:, ::-1]
    out = backend.decode(data, plan=lambda _: view)
    assert out.flags.writeable and np.array_equal(out, expected)
