"""fastload's file reader (``files.c``) through ``read_file``: the file's bytes, the errors
``os`` raises, and the files it hands back to ``os`` (no size to trust)."""

from __future__ import annotations

import importlib
import os
import resource
import sys
from pathlib import Path

import numpy as np
import pytest

from fastload.backends.files import FILES_KERNEL, read_file, read_files

files = importlib.import_module(FILES_KERNEL)  # CI builds it: a missing build fails here


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 110_000, 3 << 20])
def test_it_reads_a_files_bytes(tmp_path: Path, size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.jpg"
    path.write_bytes(data)
    assert files.read(str(path)) == data
    assert files.read(path) == data  # a PathLike, as os.open takes
    assert files.read(os.fsencode(path)) == data
    assert read_file(str(path)) == data


def test_a_missing_file_raises_what_os_raises_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.jpg")
    with pytest.raises(FileNotFoundError) as raised:
        files.read(path)
    assert raised.value.filename == path and raised.value.errno == 2
    with pytest.raises(FileNotFoundError, match=r"missing\.jpg"):
        read_file(path)


def test_what_has_no_size_to_trust_is_read_by_os(tmp_path: Path) -> None:
    # /proc's files say size 0 and hold more: the reader sees the byte past the size
    assert files.read("/proc/self/status") is None
    assert b"VmRSS" in read_file("/proc/self/status")
    # a folder is no regular file: os raises as it did before
    assert files.read(str(tmp_path)) is None
    with pytest.raises(IsADirectoryError):
        read_file(str(tmp_path))


def test_an_unbuilt_reader_leaves_the_reading_to_os(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"\xff\xd8 bytes \xff\xd9")
    monkeypatch.setitem(sys.modules, FILES_KERNEL, None)  # its import fails, as unbuilt
    assert read_file(str(path)) == b"\xff\xd8 bytes \xff\xd9"


def test_many_files_are_read_at_once_and_the_failures_left_to_read_file(tmp_path: Path) -> None:
    sizes = [0, 1, 4096, 110_000]
    paths = []
    for size in sizes:
        path = tmp_path / f"{size}.jpg"
        path.write_bytes(np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes())
        paths.append(str(path))
    odd = [str(tmp_path / "missing.jpg"), str(tmp_path), "/proc/self/status"]
    found = files.read_many([*paths, *odd, paths[2]])
    assert found[: len(sizes)] == [Path(p).read_bytes() for p in paths]
    assert found[len(sizes) : -1] == [None, None, None]  # read alone: read_file says why
    assert found[-1] == Path(paths[2]).read_bytes()  # a file twice
    assert files.read_many([]) == []
    with pytest.raises(TypeError):
        files.read_many([paths[0], 3])
    assert read_files([paths[1], odd[0]]) == [Path(paths[1]).read_bytes(), None]


def test_an_unbuilt_reader_reads_many_with_os(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"some bytes")
    monkeypatch.setitem(sys.modules, FILES_KERNEL, None)
    assert read_files([str(path), str(tmp_path / "missing")]) == [b"some bytes", None]


def test_a_batch_larger_than_the_descriptors_left_is_read_whole(tmp_path: Path) -> None:
    paths = []
    for k in range(300):
        path = tmp_path / f"{k}.jpg"
        path.write_bytes(k.to_bytes(2, "little") * 50)
        paths.append(str(path))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 80, hard))  # room for 64, not 300
    try:
        found = files.read_many(paths)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert found == [k.to_bytes(2, "little") * 50 for k in range(300)]
