"""The contract every registered decoding backend keeps, checked on real files made here.

Parametrised over ``backends.names()``: a backend is tested the moment it registers.
"""

from __future__ import annotations

import io
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from images import (
    READABLE,
    UNREADABLE,
    fault_files,
    jpeg_bytes,
    photo,
    pillow_reference,
    png16,
    with_orientation,
)
from PIL import Image

import fastload
from fastload import backends
from fastload.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

BACKENDS = backends.names()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return fault_files(tmp_path_factory.mktemp("faults"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, require_backend) -> backends.Backend:
    require_backend(request.param)
    return backends.create(request.param)


def mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_the_three_cpu_backends_are_registered() -> None:
    assert {"pillow", "opencv", "turbojpeg"} <= set(BACKENDS)


@pytest.mark.parametrize("kind", READABLE)
def test_output_convention_and_agreement_with_pillow(
    backend: backends.Backend, files: dict[str, Path], kind: str
) -> None:
    """RGB uint8, H x W x 3, EXIF applied; within 2 grey levels of Pillow's decode."""
    out = backend.decode(files[kind].read_bytes())
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3
    if kind == "png16":  # Pillow's own convert("RGB") saturates 16-bit values; fastload scales
        np.testing.assert_array_equal(out, png16()[1])
        return
    reference = pillow_reference(files[kind])
    assert out.shape == reference.shape
    assert mad(out, reference) <= 2.0


def test_exif_rotation_swaps_the_sides(backend: backends.Backend, files: dict[str, Path]) -> None:
    assert backend.decode(files["exif_rotated"].read_bytes()).shape == (320, 240, 3)


@pytest.mark.parametrize("kind", UNREADABLE)
def test_unreadable_files_raise(
    backend: backends.Backend, files: dict[str, Path], kind: str
) -> None:
    with pytest.raises(Exception) as info:
        backend.decode(files[kind].read_bytes())
    assert str(info.value)  # a reason, never a silent grey image


def test_oversized_header_is_refused_before_decoding(
    backend: backends.Backend, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_decode(*args: object) -> None:
        raise AssertionError("decoded an image whose header is over the limit")

    monkeypatch.setattr(backend, "decode_jpeg", must_not_decode)
    monkeypatch.setattr(backend, "decode_jpeg_region", must_not_decode)
    with pytest.raises(ValueError, match="over max_pixels=89,478,485"):
        backend.decode(files["oversized_header"].read_bytes())
    good = files["good"].read_bytes()
    with pytest.raises(ValueError, match="320 x 240 = 76,800 pixels is over max_pixels=1,000"):
        backend.decode(good, max_pixels=1000)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["good", "exif_rotated", "png_named_jpg"])
def test_fused_crop_equals_crop_after_full_decode(
    backend: backends.Backend, files: dict[str, Path], kind: str, seed: int
) -> None:
    """Planning the crop before decoding changes nothing but the speed (same draws, same box)."""
    data = files[kind].read_bytes()
    transform = Compose([RandomResizedCrop(96), RandomHorizontalFlip()])
    torch.manual_seed(seed)
    fused = backend.decode(data, plan=transform.plan, render=transform.render_options)
    full = torch.from_numpy(backend.decode(data)).permute(2, 0, 1)
    torch.manual_seed(seed)
    after = transform(full).permute(1, 2, 0).numpy()
    assert fused.shape == after.shape == (96, 96, 3)
    assert mad(fused, after) <= 1.0


@pytest.mark.parametrize("kind", ["good", "exif_rotated", "png_named_jpg"])
def test_an_images_own_interpolation_is_the_one_rendered(
    backend: backends.Backend, files: dict[str, Path], kind: str
) -> None:
    """A view that carries its interpolation (an op that draws it per image: timm's
    ``interpolation="random"``) renders with it, whatever the pipeline's."""
    data = files[kind].read_bytes()

    def crop(view):
        return view.crop(10, 20, view.height // 2, view.width // 2).resize(48, 40)

    def own(view):
        return crop(view).resampled("bicubic")

    drawn = backend.decode(data, plan=own, render={"interpolation": "bilinear"})
    bicubic = backend.decode(data, plan=crop, render={"interpolation": "bicubic"})
    bilinear = backend.decode(data, plan=crop, render={"interpolation": "bilinear"})
    assert np.array_equal(drawn, bicubic)
    assert not np.array_equal(drawn, bilinear)


def test_dct_reduced_decoding_stays_close(backend: backends.Backend) -> None:
    """A crop at least twice the output is decoded at 1/2..1/8 scale: still the same picture."""
    big = photo(1600, 1200, seed=7)
    data = jpeg_bytes(big, quality=95)
    val = Compose([Resize(224), CenterCrop(224)])  # 1200 -> 224: 1/4 scale, then 1.34x
    out = backend.decode(data, plan=val.plan, render=val.render_options)
    reference = val(torch.from_numpy(big).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    assert out.shape == (224, 224, 3)
    assert mad(out, reference) <= 3.0


def test_reduced_decode_sizes(backend: backends.Backend) -> None:
    data = jpeg_bytes(photo(401, 203, seed=2))
    for reduce in (1, 2, 4, 8):
        out = backend.decode_jpeg(data, reduce)
        assert out.shape == (math.ceil(203 / reduce), math.ceil(401 / reduce), 3)


def test_same_shapes_on_every_backend(files: dict[str, Path], require_backend) -> None:
    for name in BACKENDS:
        require_backend(name)
    for kind in READABLE:
        shapes = {
            name: backends.create(name).decode(files[kind].read_bytes()).shape for name in BACKENDS
        }
        assert len(set(shapes.values())) == 1, (kind, shapes)


# ---------------------------------------------------------------- through the dataset


@pytest.mark.parametrize("name", BACKENDS)
def test_error_policy_raise_names_file_backend_and_reason(
    name: str, files: dict[str, Path], require_backend
) -> None:
    require_backend(name)
    ds = fastload.ImageList([files["truncated"]], [0], backend=name)
    with pytest.raises(fastload.ImageDecodeError) as info:
        ds[0]
    message = str(info.value)
    assert str(files["truncated"]) in message and name in message and "truncated" in message


@pytest.mark.parametrize("name", BACKENDS)
def test_error_policy_skip_returns_markers_and_records(
    name: str, files: dict[str, Path], require_backend
) -> None:
    require_backend(name)
    paths = [files[k] for k in READABLE + UNREADABLE]
    ds = fastload.ImageList(paths, list(range(len(paths))), backend=name, on_error="skip")
    results = [ds[i] for i in range(len(ds))]
    for kind, result in zip(READABLE + UNREADABLE, results, strict=True):
        if kind in UNREADABLE:
            assert isinstance(result, fastload.Skipped) and result.reason
        else:
            image, _ = result
            assert image.dtype == torch.uint8 and image.shape[0] == 3
    assert sorted(ds.bad_files) == sorted(str(files[k]) for k in UNREADABLE)


def test_unknown_backend_lists_the_valid_names() -> None:
    with pytest.raises(
        ValueError,
        match="backend='jpeg2000' is not valid; valid: "
        + re.escape(", ".join(repr(n) for n in backends.choices()))
        + "$",
    ):
        backends.create("jpeg2000")


def test_auto_picks_the_fastest_usable(require_backend) -> None:
    for name in ("region", "turbojpeg", "opencv", "pillow"):
        require_backend(name)
    assert backends.auto_order()[:4] == ["region", "turbojpeg", "opencv", "pillow"]
    assert "dali" not in backends.auto_order()  # its per-sample path is slow: never chosen
    assert backends.resolve("auto") == "region"


def test_auto_passes_over_unusable_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastload.backends._jpegregion", None)  # not built
    assert backends.resolve("auto") == "turbojpeg"
    monkeypatch.setenv("FASTLOAD_TURBOJPEG_LIB", "/nowhere/libturbojpeg.so")
    assert backends.resolve("auto") == "opencv"


def test_auto_order_is_deprecated_but_still_answers() -> None:
    with pytest.warns(DeprecationWarning, match="auto_order"):
        assert list(backends.AUTO_ORDER) == backends.auto_order()


def test_missing_library_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTLOAD_TURBOJPEG_LIB", "/nowhere/libturbojpeg.so")
    with pytest.raises(fastload.MissingDependencyError, match="apt-get install libturbojpeg0"):
        backends.create("turbojpeg")
    with pytest.raises(fastload.MissingDependencyError, match="apt-get install libturbojpeg0"):
        fastload.ImageList([], [], backend="turbojpeg")


def test_register_refuses_bad_and_duplicate_names() -> None:
    class Nameless(backends.Backend):
        def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
            raise NotImplementedError

    with pytest.raises(ValueError, match="needs a name"):
        backends.register(Nameless)

    class Impostor(Nameless):
        name = "pillow"

    with pytest.raises(ValueError, match="registered already"):
        backends.register(Impostor)


def test_16bit_png_is_scaled_not_saturated() -> None:
    data, expected = png16()
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode.startswith("I")
    np.testing.assert_array_equal(backends.decode_with_pillow(data), expected)


def test_files_are_read_whole_whatever_their_size_says(tmp_path: Path) -> None:
    from fastload.backends.files import read_file

    photo_file = tmp_path / "a.jpg"
    photo_file.write_bytes(jpeg_bytes(photo(64, 48)))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert read_file(str(photo_file)) == photo_file.read_bytes()
    assert read_file(str(empty)) == b""
    # a size the system does not know (0 in /proc): read to the end all the same
    if sys.platform == "linux":
        status = read_file("/proc/self/status")
        assert status.startswith(b"Name:") and b"VmRSS" in status
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "missing.jpg"))


def test_the_header_says_which_files_the_jpeg_path_decodes() -> None:
    from fastload.backends.headers import read_header

    oriented = with_orientation(photo(64, 48), 6)
    info, jpeg = read_header(oriented, max_pixels=10**6, exif_orientation=True)
    assert jpeg and info.orientation == 6 and info.shown_size == (48, 64)
    info, jpeg = read_header(oriented, max_pixels=10**6, exif_orientation=False)
    assert jpeg and info.orientation == 1  # the stored pixels, as torchvision's loader keeps
    cmyk = io.BytesIO()
    Image.new("CMYK", (8, 8)).save(cmyk, format="JPEG")
    assert read_header(cmyk.getvalue(), max_pixels=10**6, exif_orientation=True)[1] is False
    png = png16()[0]
    assert read_header(png, max_pixels=10**6, exif_orientation=True)[1] is False
    with pytest.raises(ValueError, match="max_pixels"):
        read_header(oriented, max_pixels=100, exif_orientation=True)
