"""Header probing and orientation, checked against Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from images import claim_size, jpeg_bytes, photo, png16, png_bytes, with_orientation
from PIL import Image, ImageOps

from fastload.pixels.image import orient, orientation_ops, probe, sniff


def test_jpeg_header() -> None:
    info = probe(jpeg_bytes(photo(123, 45)))
    assert (info.format, info.width, info.height, info.components, info.bit_depth) == (
        "jpeg",
        123,
        45,
        3,
        8,
    )
    assert probe(jpeg_bytes(photo(10, 20).mean(axis=2).astype(np.uint8))).components == 1


def test_progressive_jpeg_header() -> None:
    info = probe(jpeg_bytes(photo(64, 32), progressive=True))
    assert (info.width, info.height) == (64, 32)


def test_png_header() -> None:
    data, _ = png16(30, 20)
    info = probe(data)
    assert (info.format, info.width, info.height, info.bit_depth) == ("png", 30, 20, 16)


@pytest.mark.parametrize(
    "data, fmt",
    [
        (b"GIF89a....", "gif"),
        (b"RIFF\0\0\0\0WEBPVP8 ", "webp"),
        (b"BM....", "bmp"),
        (b"II*\x00....", "tiff"),
        (b"hello", "unknown"),
        (b"", "unknown"),
    ],
)
def test_sniff(data: bytes, fmt: str) -> None:
    assert sniff(data) == fmt


def test_a_claimed_size_is_read_without_decoding() -> None:
    info = probe(claim_size(jpeg_bytes(photo(32, 32)), 60000, 50000))
    assert info.pixels == 3_000_000_000


def test_garbage_after_the_magic_gives_no_size() -> None:
    assert probe(b"\xff\xd8\xff\xe0" + b"\x00" * 50).pixels is None


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_matches_pillows_exif_transpose(orientation: int) -> None:
    pixels = photo(40, 30, seed=orientation)
    data = with_orientation(pixels, orientation)
    info = probe(data)
    assert info.orientation == orientation
    with Image.open(io.BytesIO(data)) as image:
        stored = np.asarray(image.convert("RGB"))
        shown = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    out = orient(stored, *orientation_ops(orientation))
    np.testing.assert_array_equal(out, shown)
    assert info.shown_size == (shown.shape[1], shown.shape[0])


def test_no_exif_means_upright() -> None:
    assert probe(png_bytes(Image.new("RGB", (4, 4)))).orientation == 1
    assert probe(jpeg_bytes(photo(8, 8))).orientation == 1


@pytest.mark.parametrize("shape", [(5, 7, 3), (224, 224, 3), (6, 4, 1), (3, 9, 4)])
def test_orient_is_the_transpose_then_the_mirrors(shape: tuple[int, int, int]) -> None:
    """Every combination, on contiguous, strided, read-only and channels-first arrays (what
    torch's resize leaves): the mirrored view's values, as a copy in the array's own layout
    (mirrors alone are copied by torch, the rest by numpy)."""
    import itertools

    from fastload.pixels.image import orient

    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=shape, dtype=np.uint8)
    read_only = base.copy()
    read_only.flags.writeable = False
    planar = np.ascontiguousarray(base.transpose(2, 0, 1)).transpose(1, 2, 0)
    for array in (base, base[:, ::2], read_only, planar):
        for transpose, lr, tb in itertools.product([False, True], repeat=3):
            want = array.transpose(1, 0, 2) if transpose else array
            want = want[:, ::-1] if lr else want
            want = want[::-1] if tb else want
            got = orient(array, transpose, lr, tb)
            assert np.array_equal(got, want)
            if not (transpose or lr or tb):  # nothing to do hands the array back
                continue
            planes = got.transpose(2, 0, 1)
            kept_planar = array is planar and not transpose and shape[2] > 1
            assert planes.flags.c_contiguous if kept_planar else got.flags.c_contiguous
