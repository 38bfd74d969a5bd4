"""Faults inside the batch executors' batches (``fastload/backends/executor/epoch.py``): every
kind of file the contract suite covers, mixed among good JPEGs, through DALI and nvImageCodec,
in their CPU modes and (GPU-marked) decoded on the device.

Readable kinds that are no baseline JPEG (CMYK, progressive, greyscale, PNG, EXIF-rotated) must
come out as Pillow shows them; each unreadable kind costs its own file only: ``on_error="skip"``
keeps every good sample of the batch and names the file in ``bad_files``, ``"raise"`` raises one
error naming it. On the device, an epoch of such faults must not leave memory behind.
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from images import READABLE, UNREADABLE, fault_files, jpeg_bytes, photo, pillow_reference

import fastload
from fastload import transforms as T

BACKENDS = ["dali", "nvimgcodec"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SIZE = 48
GOOD = 7  # plain JPEGs, before the fault kinds


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Good JPEGs, then one file of each readable kind, then one of each unreadable kind."""
    folder = tmp_path_factory.mktemp("mixed")
    kinds = fault_files(folder / "kinds")
    good = []
    for i in range(GOOD):
        path = folder / f"plain_{i}.jpg"
        path.write_bytes(jpeg_bytes(photo(120 + 8 * i, 96, seed=i)))
        good.append(path)
    return good + [kinds[k] for k in READABLE] + [kinds[k] for k in UNREADABLE]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, require_backend) -> str:
    require_backend(request.param)
    return request.param


def resize() -> T.Compose:
    return T.Compose([T.Resize(SIZE), T.CenterCrop(SIZE)])


def loader(paths: list[Path], backend: str, device: str, **options) -> fastload.DataLoader:
    ds = fastload.ImageList(paths, list(range(len(paths))), resize(), **options)
    return fastload.DataLoader(ds, batch_size=5, shuffle=True, backend=backend, device=device)


def reference(path: Path) -> torch.Tensor:
    """What Pillow shows for the file, through the same transform on torch."""
    image = torch.from_numpy(np.array(pillow_reference(path))).permute(2, 0, 1)
    return resize()(image)


def epoch(loader: fastload.DataLoader) -> tuple[dict[int, torch.Tensor], list[str]]:
    """One pass: label -> image, and the warnings it gave."""
    device = torch.device(loader.device).type
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = {}
        for images, labels in loader:
            assert images.device.type == labels.device.type == device
            for image, label in zip(images.cpu(), labels.tolist(), strict=True):
                seen[label] = image
    return seen, [str(w.message) for w in caught if w.category is fastload.UnreadableImageWarning]


@pytest.mark.parametrize("device", DEVICES)
def test_every_readable_kind_among_jpegs_is_decoded_as_pillow_shows_it(
    files: list[Path], backend: str, device: str
) -> None:
    readable = files[: GOOD + len(READABLE)]
    seen, warned = epoch(loader(readable, backend, device))
    assert sorted(seen) == list(range(len(readable))) and warned == []
    for label, path in enumerate(readable):
        if path.name == "png16.png":  # Pillow saturates 16-bit values; fastload scales them
            continue
        difference = (seen[label].float() - reference(path).float()).abs().mean().item()
        assert difference <= 3.0, f"{path.name}: {difference:.2f} grey levels from Pillow"


@pytest.mark.parametrize("device", DEVICES)
def test_skip_keeps_every_good_sample_and_names_each_bad_file(
    files: list[Path], backend: str, device: str
) -> None:
    mixed = loader(files, backend, device, on_error="skip")
    seen, warned = epoch(mixed)
    readable = GOOD + len(READABLE)
    assert sorted(seen) == list(range(readable))
    assert warned == [
        f"skipped {len(UNREADABLE)} unreadable image(s) this epoch; "
        "see the dataset's bad_files for the paths and reasons"
    ]
    assert sorted(mixed.dataset.bad_files) == sorted(str(p) for p in files[readable:])
    assert all(mixed.dataset.bad_files.values())  # each with its reason


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", UNREADABLE)
def test_raise_names_the_one_bad_file(
    files: list[Path], backend: str, device: str, kind: str
) -> None:
    bad = next(p for p in files if p.stem == kind)
    with pytest.raises(fastload.ImageDecodeError) as info:
        epoch(loader([*files[:GOOD], bad], backend, device))
    assert repr(str(bad)) in str(info.value) and f"{backend} backend" in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_epochs_of_faults_leave_no_device_memory_behind(
    files: list[Path], backend_name: str, require_backend
) -> None:
    """The device memory after the second epoch of faults is what it is after the fifth: each
    discarded graph and re-decoded batch gives back what it took."""
    require_backend(backend_name)
    mixed = loader(files, backend_name, "cuda", on_error="skip")

    def settled() -> tuple[int, int]:
        gc.collect()
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated(), torch.cuda.mem_get_info()[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastload.UnreadableImageWarning)
        for _ in range(2):
            assert len(epoch(mixed)[0]) == GOOD + len(READABLE)
        allocated, free = settled()
        for _ in range(3):
            assert len(epoch(mixed)[0]) == GOOD + len(READABLE)
        after_allocated, after_free = settled()
    assert after_allocated <= allocated
    # the libraries' own pools are outside torch's allocator: they may round up, not grow
    assert free - after_free <= 64 << 20, f"{(free - after_free) >> 20} MiB more in use"
