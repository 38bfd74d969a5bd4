"""Image sets and tar shards for the shard tests, made on the spot with real JPEG files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from images import jpeg_bytes, photo


def class_folder(root: Path, classes: int = 3, per_class: int = 6, size: int = 64) -> Path:
    """``root/cNN/NNN.jpg``: JPEGs of a few sizes around ``size``, each one different."""
    for c in range(classes):
        folder = root / f"c{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            seed = c * 1000 + i
            width, height = size + 7 * (i % 4), size - 5 * (i % 3)
            (folder / f"{i:03d}.jpg").write_bytes(jpeg_bytes(photo(width, height, seed=seed)))
    return root


def tar_of(
    path: Path, members: list[tuple[str, bytes]], *, fmt: int = tarfile.USTAR_FORMAT
) -> Path:
    """A tar written by Python's ``tarfile``, members in the order given."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def samples(count: int, *, start: int = 0, size: int = 48) -> list[tuple[str, bytes]]:
    """``count`` samples as tar members: ``KEY.cls`` then ``KEY.jpg`` (webdataset's sorted
    order), labels ``k % 3``."""
    members = []
    for k in range(start, start + count):
        members.append((f"s{k:04d}.cls", str(k % 3).encode()))
        members.append((f"s{k:04d}.jpg", jpeg_bytes(photo(size + k % 5, size, seed=k))))
    return members
