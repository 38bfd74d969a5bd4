"""Writing shards: a sample's members as one tar buffer (:func:`tar_sample`), and
:class:`ShardWriter`, which appends samples to one shard at a time and publishes each whole
(its index first, then the tar renamed from a hidden temporary name)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastload.shards.format import manifest as manifests
from fastload.shards.format.index import Part, write_index
from fastload.shards.format.tar import END, header, padding

__all__ = ["ShardWriter", "TarSample", "tar_sample"]


@dataclass(frozen=True)
class TarSample:
    """One sample as it goes into the tar: its members' headers, data and padding in one
    buffer (made in the reading thread or process), and each member's extension, data offset
    in the buffer and size."""

    key: str
    data: bytes
    members: tuple[tuple[str, int, int], ...]


def tar_sample(key: str, members: list[tuple[str, bytes]]) -> TarSample:
    pieces, where, at = [], [], 0
    for ext, data in members:
        head = header(f"{key}.{ext}", len(data))
        pieces += [head, data, b"\0" * padding(len(data))]
        where.append((ext, at + len(head), len(data)))
        at += len(head) + len(data) + padding(len(data))
    return TarSample(key, b"".join(pieces), tuple(where))


class ShardWriter:
    """Appends samples to one shard at a time, rolling over at ``shard_size`` bytes."""

    def __init__(self, out: Path, shard_size: int, number: int, on_done: Callable) -> None:
        self.out, self.shard_size, self.number, self.on_done = out, shard_size, number, on_done
        self.file: Any = None
        self.parts: list[tuple[str, tuple[Part, ...]]] = []
        self.written = 0
        self.first = 0
        # the checksum runs beside the writes (both let go of the GIL): one thread, in order
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="fastload-pack-sha256")
        self.hashing: deque[Any] = deque()
        self.digest: Any = None

    def add(self, item: TarSample, position: int) -> None:
        size = len(item.data)
        if self.file is not None and self.written + size + len(END) > self.shard_size:
            self.close()
        if self.file is None:
            self._open(position)
        parts = tuple(
            Part(ext, self.written + at, length, f"{item.key}.{ext}")
            for ext, at, length in item.members
        )
        self._write(item.data)
        self.parts.append((item.key, parts))

    def _open(self, position: int) -> None:
        self.file = open(self.out / f".{self._name('tar')}.partial", "wb")  # noqa: SIM115
        self.written, self.parts, self.first = 0, [], position
        self.digest = hashlib.sha256()

    def _name(self, ext: str) -> str:
        return f"shard-{self.number:06d}.{ext}"

    def _write(self, data: bytes) -> None:
        self.file.write(data)
        self.hashing.append(self.hasher.submit(self.digest.update, data))
        while len(self.hashing) > 64 or (self.hashing and self.hashing[0].done()):
            self.hashing.popleft().result()
        self.written += len(data)

    def close(self) -> None:
        """Finish the shard being written: end marker, index, rename, log."""
        if self.file is None:
            return
        self._write(END)
        self.file.close()
        self.file = None
        while self.hashing:
            self.hashing.popleft().result()
        write_index(self.out / self._name("idx"), self.parts)
        os.replace(self.out / f".{self._name('tar')}.partial", self.out / self._name("tar"))
        entry = manifests.ShardEntry(
            self._name("tar"),
            self._name("idx"),
            len(self.parts),
            self.written,
            self.digest.hexdigest(),
        )
        self.on_done(entry, self.first)
        self.number += 1

    def abandon(self) -> None:
        self.hasher.shutdown(wait=True, cancel_futures=True)
        if self.file is not None:
            self.file.close()
            self.file = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.out / f".{self._name('tar')}.partial")
