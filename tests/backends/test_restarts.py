"""Restart markers: ``add_restarts`` rewrites a JPEG without changing a pixel, and the region
decoder cuts such a JPEG at its markers, so that a crop is the whole decode's crop while only
the intervals around it are entropy-decoded; damage and odd streams fall back to the ordinary
decode, which reports them as before."""

from __future__ import annotations

import io
import struct
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
from images import jpeg_bytes, photo
from PIL import Image
from regions import LIMIT, assert_crops_match, cv_jpeg, windows

from fastload import backends
from fastload.backends import region
from fastload.pixels.image import probe


@pytest.fixture(autouse=True)
def _usable(require_backend) -> None:
    require_backend("region")
    require_backend("turbojpeg")  # the reference: a whole decode by the same library


@pytest.fixture
def decoder() -> region.RegionBackend:
    return backends.create("region")  # type: ignore[return-value]


@pytest.fixture(scope="module")
def whole() -> backends.Backend:
    return backends.create("turbojpeg")


def segments(data: bytes) -> dict[int, bytes]:
    """The header segments of a JPEG up to its first scan, by marker (the last of each)."""
    found, at = {}, 2
    while data[at + 1] != 0xDA:
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        found[data[at + 1]] = data[at + 4 : at + 2 + length]
        at += 2 + length
    return found


RGB = photo(333, 251, seed=3)  # sides that are no multiple of any iMCU
GREY = RGB.mean(axis=2).astype(np.uint8)
SOURCES = {
    "4:2:0": jpeg_bytes(RGB),
    "4:2:2": jpeg_bytes(RGB, subsampling=1),
    "4:4:4": jpeg_bytes(RGB, subsampling=0),
    "4:4:0": cv_jpeg(RGB, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440),
    "grey": jpeg_bytes(GREY),
    "progressive": jpeg_bytes(RGB, progressive=True),
    "wide": jpeg_bytes(photo(1024, 96, seed=4)),  # 64 MCUs a row: 4 an interval
}
MCU_WIDTH = {"4:4:4": 8, "4:4:0": 8, "grey": 8}  # the others: 16
# Files with restart markers of their own, as encoders write them: a grid the cut uses (OpenCV's
# interval of 3 MCUs tiles the 21-MCU rows; a row an interval), and one it does not (5 MCUs).
OWN_MARKERS = {
    "every 3 MCUs": cv_jpeg(RGB, cv2.IMWRITE_JPEG_RST_INTERVAL, 3),
    "every row": jpeg_bytes(RGB, restart_marker_rows=1),
}


def assert_cut_crops_match(
    decoder: region.RegionBackend, whole: backends.Backend, data: bytes, reduce: int
) -> None:
    """25 windows, none from the top row across the whole width (which leaves nothing out)."""
    width, height = whole.decode_jpeg(data, reduce).shape[1::-1]
    edges = [(width - 1, height - 1, width, height), (0, 0, 1, 1), (0, height // 2, width, height)]
    assert_crops_match(decoder, whole, data, reduce, windows(width, height, 25, reduce, edges))


@pytest.mark.parametrize("source", SOURCES)
def test_add_restarts_keeps_every_pixel(whole: backends.Backend, source: str) -> None:
    data = SOURCES[source]
    rewritten = region.add_restarts(data, max_pixels=LIMIT)
    for reduce in (1, 2, 4, 8):
        np.testing.assert_array_equal(
            whole.decode_jpeg(rewritten, reduce), whole.decode_jpeg(data, reduce)
        )
    header = segments(rewritten)
    assert 0xC0 in header  # baseline, also from a progressive file
    interval = struct.unpack(">H", header[0xDD])[0]
    row = -(-probe(data).width // MCU_WIDTH.get(source, 16))  # MCUs in a row
    assert interval == max(i for i in (1, 2, 4) if row % i == 0)
    assert len(rewritten) < 1.1 * len(data)


def test_add_restarts_keeps_the_metadata() -> None:
    """EXIF (orientation) and the ICC profile stay; the JFIF segment is written once."""
    image = Image.fromarray(RGB)
    exif = image.getexif()
    exif[0x0112] = 6
    profile = b"\0" * 128 + b"a made-up ICC profile"
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, exif=exif, icc_profile=profile, comment=b"a comment")
    rewritten = region.add_restarts(out.getvalue(), max_pixels=LIMIT)
    assert probe(rewritten).orientation == 6
    with Image.open(io.BytesIO(rewritten)) as reopened:
        assert reopened.info["icc_profile"] == profile
        assert reopened.info["comment"] == b"a comment"
    assert rewritten.count(b"JFIF\0") == 1


def test_add_restarts_refuses_what_it_cannot_copy_whole() -> None:
    data = SOURCES["4:2:0"]
    with pytest.raises(ValueError, match="libjpeg-turbo: Not a JPEG file"):
        region.add_restarts(b"GIF89a" + data, max_pixels=LIMIT)
    with pytest.raises(ValueError, match="libjpeg-turbo: Premature end of JPEG file"):
        region.add_restarts(data[: len(data) // 2], max_pixels=LIMIT)
    with pytest.raises(ValueError, match=r"^image of 333 x 251 pixels is over max_pixels=1000$"):
        region.add_restarts(data, max_pixels=1000)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("reduce", [1, 2, 4, 8])
def test_a_crop_of_a_rewritten_jpeg_is_the_whole_decodes_crop(
    decoder: region.RegionBackend, whole: backends.Backend, source: str, reduce: int
) -> None:
    data = region.add_restarts(SOURCES[source], max_pixels=LIMIT)
    assert_cut_crops_match(decoder, whole, data, reduce)
    # every window above leaves intervals out: all were cut (the mode says so)
    assert decoder.counts == {"restarts": 25}


@pytest.mark.parametrize("source", OWN_MARKERS)
@pytest.mark.parametrize("reduce", [1, 2, 4, 8])
def test_an_encoders_own_markers_are_used(
    decoder: region.RegionBackend, whole: backends.Backend, source: str, reduce: int
) -> None:
    assert_cut_crops_match(decoder, whole, OWN_MARKERS[source], reduce)
    # intervals of whole rows leave nothing out for a window from the top row
    assert set(decoder.counts) <= {"restarts", "region"} and decoder.counts["restarts"] >= 20


def test_markers_off_the_row_grid_are_decoded_as_before(
    decoder: region.RegionBackend, whole: backends.Backend
) -> None:
    data = cv_jpeg(RGB, cv2.IMWRITE_JPEG_RST_INTERVAL, 5)  # 21 MCUs a row: no grid
    assert_cut_crops_match(decoder, whole, data, 1)
    assert decoder.counts == {"region": 25}


def test_the_whole_image_and_a_top_band_are_not_cut(decoder: region.RegionBackend) -> None:
    """Nothing to leave out: the ordinary decode, which stops after the last row."""
    data = region.add_restarts(SOURCES["4:2:0"], max_pixels=LIMIT)
    decoder.decode_jpeg(data, 1)
    decoder.decode_jpeg_region(data, 1, (0, 0, 333, 40), max_pixels=LIMIT)
    assert decoder.counts == {"whole": 1, "region": 1}


def restart_at(data: bytes, number: int) -> int:
    """The offset of the ``number``-th restart marker (0-based) in the scan."""
    at = data.index(b"\xff\xda")
    for _ in range(number + 1):
        at = next(
            i
            for i in range(at + 1, len(data) - 1)
            if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7
        )
    return at


def test_damage_is_met_where_the_ordinary_decode_meets_it(
    decoder: region.RegionBackend, whole: backends.Backend
) -> None:
    """A marker out of order, or a stream that ends early: a crop that needs the intervals
    past the damage fails as the ordinary region decode does; a crop above it decodes."""
    data = region.add_restarts(jpeg_bytes(photo(320, 480, seed=5)), max_pixels=LIMIT)
    per_row = 320 // 16 // 4  # 5 intervals of 4 MCUs a row
    at = restart_at(data, 15 * per_row + 2)  # in MCU row 15 (pixel rows 240-255)
    swapped = data[: at + 1] + bytes([0xD0 + (data[at + 1] - 0xD0 + 3) % 8]) + data[at + 2 :]
    cut_short = data[:at]
    for damaged in (swapped, cut_short):
        with pytest.raises(ValueError, match="libjpeg-turbo"):
            whole.decode_jpeg(damaged, 1)
        with pytest.raises(ValueError, match="libjpeg-turbo"):
            decoder.decode_jpeg_region(damaged, 1, (100, 300, 200, 400), max_pixels=LIMIT)
        above = decoder.decode_jpeg_region(damaged, 1, (100, 50, 200, 150), max_pixels=LIMIT)
        expected = whole.decode_jpeg(data, 1)[50:150, 100:200]
        left, top = above.origin or (0, 0)
        np.testing.assert_array_equal(
            above.pixels[50 - top : 150 - top, 100 - left : 200 - left], expected
        )
    assert decoder.counts["restarts"] == 2


def test_threads_cut_side_by_side(decoder: region.RegionBackend) -> None:
    """The cut runs with the GIL released too; nothing is shared between calls."""
    data = [region.add_restarts(SOURCES[s], max_pixels=LIMIT) for s in ("4:2:0", "grey", "wide")]
    jobs = [(data[i % 3], 1 + (i % 2), (i % 50, i % 40, 60 + i % 50, 90)) for i in range(48)]

    def run(job: tuple[bytes, int, tuple[int, int, int, int]]) -> np.ndarray:
        return decoder.decode_jpeg_region(job[0], job[1], job[2], max_pixels=LIMIT).pixels

    alone = [run(job) for job in jobs]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, jobs))
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_random_sizes_samplings_and_crops(decoder: region.RegionBackend) -> None:
    """Sizes down to one pixel, every sampling, narrow and wide crops at every scale: a crop of
    a rewritten JPEG is its whole decode's crop."""
    rng = np.random.default_rng(1)
    for i in range(60):
        width, height = rng.integers(1, 300, 2).tolist()
        rgb = photo(width, height, seed=i)
        data = [
            jpeg_bytes(rgb, subsampling=i % 3),
            jpeg_bytes(np.ascontiguousarray(rgb[..., 0])),
            cv_jpeg(rgb, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440),
        ][i % 3 if i % 2 else 0]
        data = region.add_restarts(data, max_pixels=LIMIT)
        for reduce in (1, 2, 4, 8):
            reference = decoder.decode_jpeg(data, reduce)
            height_at, width_at = reference.shape[:2]
            for _ in range(4):
                x0, y0 = int(rng.integers(0, width_at)), int(rng.integers(0, height_at))
                reach = 3 if rng.random() < 0.5 else width_at
                x1 = int(rng.integers(x0 + 1, min(width_at, x0 + reach) + 1))
                y1 = int(rng.integers(y0 + 1, height_at + 1))
                got = decoder.decode_jpeg_region(data, reduce, (x0, y0, x1, y1), max_pixels=LIMIT)
                left, top = got.origin or (0, 0)
                inside = got.pixels[y0 - top : y1 - top, x0 - left : x1 - left]
                np.testing.assert_array_equal(inside, reference[y0:y1, x0:x1])
    assert decoder.counts["restarts"] > 500
