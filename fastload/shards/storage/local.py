"""Reading a byte range of a shard: one positioned read, through a few open files.

Each thread keeps its own small least-recently-used set of open shards, so that a worker that
reads from thousands of shards holds at most :data:`OPEN_PER_THREAD` descriptors, and no thread
can close a descriptor another is reading through. A forked worker closes the copies it
inherited and opens its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict

__all__ = ["OPEN_PER_THREAD", "pread_all", "read_range"]

OPEN_PER_THREAD = 8


class _OpenFiles:
    """One thread's open shards, least recently used first."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.files: OrderedDict[str, int] = OrderedDict()

    def descriptor(self, path: str) -> int:
        fd = self.files.get(path)
        if fd is not None:
            self.files.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.files[path] = fd
        while len(self.files) > OPEN_PER_THREAD:
            _, old = self.files.popitem(last=False)
            os.close(old)
        return fd

    def __del__(self) -> None:
        # in a forked child, these are the inherited copies: closing them there is harmless
        for fd in self.files.values():
            with contextlib.suppress(OSError):
                os.close(fd)


_LOCAL = threading.local()


def _files() -> _OpenFiles:
    files = getattr(_LOCAL, "files", None)
    if files is None or files.pid != os.getpid():
        files = _LOCAL.files = _OpenFiles()
    return files


def read_range(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of the file at ``path`` from ``offset`` (fewer where the file ends first).

    Raises:
        OSError: The file cannot be opened or read.
    """
    return pread_all(_files().descriptor(path), size, offset)


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of the open file ``fd`` from ``offset`` (fewer where the file ends
    first), however many reads it takes."""
    data = os.pread(fd, size, offset)
    while len(data) < size:  # a short read that is not the end of the file
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data
