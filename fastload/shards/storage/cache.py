"""The local shard cache: whole remote shards kept in one folder of bounded size.

What the folder holds, ``NAME`` being a digest of a shard's URL (two URLs never share a file):

- ``NAME.tar``: a whole shard. It was downloaded as ``NAME.part-...`` (its full size reserved
  on disk first, so that a full disk fails at once), checked against the size and SHA-256 the
  manifest gives, then renamed: a process killed mid-download leaves only a part file, which
  nothing reads and the next reservation deletes.
- ``NAME.idx``: the shard's index, made or downloaded once.
- ``NAME.lock``: locked (exclusively) by whoever downloads ``NAME``: the workers of a process,
  the processes and the ranks of a machine never download a shard twice at once; the others
  wait for it and read the result.
- ``.lock``: locked while space is reserved: the size of the shards plus the parts in progress
  stays within ``limit``, evicting the least recently read shards that no one holds.

Every lock is a ``flock(2)`` lock on a file of the folder, which the kernel lets go when a
process dies: a killed job leaves nothing held, and no shared memory behind. A reader holds a
shared lock on a shard while it reads it, and the read-ahead
(:mod:`fastload.shards.storage.readahead`) holds the shards it fetched until its rank has read
past them; neither kind is evicted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from fastload.shards.format import index as indexes
from fastload.shards.storage.local import pread_all
from fastload.shards.storage.remote import Remote, RemoteError

__all__ = ["CacheFullError", "ShardCache", "free_lock", "held_lock", "release"]

_HASH_CHUNK = 4 * 2**20
_TOUCH_EVERY = 1.0  # seconds between two updates of a shard's last-read time by a process
_FAILED_FOR = 60.0  # seconds a process answers for a shard with its last failure, at once

_OURS: set[int] = set()  # lock descriptors this process opened: a forked child closes its copies


def _close_inherited() -> None:
    # a child's copy of a descriptor would keep the parent's flock alive until the child exits
    for fd in list(_OURS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OURS.clear()


os.register_at_fork(after_in_child=_close_inherited)


def held_lock(path: str | Path) -> int:
    """Open ``path`` (made if missing) and wait for an exclusive flock on it; let it go with
    :func:`release`."""
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        release(fd)
        raise
    return fd


def free_lock(path: str | Path) -> int | None:
    """:func:`held_lock` if no one holds ``path``, else ``None`` at once."""
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        release(fd)
        return None
    except BaseException:
        release(fd)
        raise
    return fd


def _open_lock(path: str | Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    _OURS.add(fd)
    return fd


def release(fd: int) -> None:
    """Close a descriptor from :func:`held_lock` (which lets its lock go)."""
    _OURS.discard(fd)
    os.close(fd)


class CacheFullError(OSError):
    """The disk that holds the shard cache is full."""


class ShardCache:
    """A folder of whole shards downloaded from remote storage (see the module's notes).

    Picklable: worker processes share the folder, not the object.

    Args:
        folder: The folder (made if missing).
        limit: The most bytes its shards may take, or ``None`` for no bound.
        remote: How to reach the shards.
    """

    def __init__(self, folder: str | os.PathLike[str], limit: int | None, remote: Remote) -> None:
        self.folder = Path(folder)
        self.limit = limit
        self.remote = remote
        self.folder.mkdir(parents=True, exist_ok=True)
        self._pid = os.getpid()
        self._touched: dict[str, float] = {}
        self._failed: dict[str, tuple[BaseException, float]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "limit": self.limit, "remote": self.remote}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"], state["limit"], state["remote"])  # type: ignore[misc]

    def _mine(self) -> None:
        if self._pid != os.getpid():  # a forked worker: its own memory of this process's events
            self._pid, self._touched, self._failed = os.getpid(), {}, {}
            self._lock = threading.Lock()

    def name(self, url: str) -> str:
        """The file name stem of a URL's shard in the folder."""
        return hashlib.sha1(url.encode()).hexdigest()[:24]

    def path(self, url: str) -> str:
        """Where the shard at ``url`` is (or will be) kept."""
        return str(self.folder / f"{self.name(url)}.tar")

    # ------------------------------------------------------------ reading

    def read(
        self, url: str, offset: int, size: int, *, shard_size: int, sha256: str | None, whole: bool
    ) -> bytes:
        """``size`` bytes of the shard at ``url`` from ``offset``: from the cached shard, which
        is downloaded first when ``whole``; otherwise, when it is not cached (nor being
        downloaded), with one ranged request.

        Raises:
            RemoteError: The shard cannot be downloaded or read (the error of its first
                failure, at once, for every later read in this process).
            FileNotFoundError: No shard is at ``url``.
            CacheFullError: The cache's disk is full.
        """
        self._mine()
        self._raise_if_failed(url)
        path = self.path(url)
        # from a server that sends whole objects, one ranged read costs the whole shard
        whole = whole or self.remote.ignores_ranges(url)
        for _ in range(3):  # a shard evicted between its download and its read is fetched again
            data = self._read_cached(path, offset, size)
            if data is not None:
                return data
            if whole:
                self.fetch(url, shard_size, sha256)
            elif not self._wait_for_download(url):
                break
        return self._remember(url, lambda: self.remote.read(url, offset, offset + size))

    def _read_cached(self, path: str, offset: int, size: int) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # not evicted while it is read
            data = pread_all(fd, size, offset)
            now = time.monotonic()
            if now - self._touched.get(path, -_TOUCH_EVERY) >= _TOUCH_EVERY:
                self._touched[path] = now
                os.utime(fd)  # its last-read time orders eviction
            return data
        finally:
            os.close(fd)

    def _wait_for_download(self, url: str) -> bool:
        """Wait for a download of ``url`` in progress; ``False`` when none is."""
        lock_path = self.folder / f"{self.name(url)}.lock"
        fd = free_lock(lock_path)
        if fd is not None:
            release(fd)
            return False
        release(held_lock(lock_path))
        return True

    def _remember(self, url: str, request: Any) -> Any:
        try:
            return request()
        except (RemoteError, FileNotFoundError) as exc:
            with self._lock:
                self._failed[url] = exc, time.monotonic()
            raise

    def _raise_if_failed(self, url: str) -> None:
        """A shard that failed for good (retries spent) fails again at once for a while,
        instead of costing each of its samples the retries again."""
        failed = self._failed.get(url)
        if failed is not None and time.monotonic() - failed[1] < _FAILED_FOR:
            raise type(failed[0])(*failed[0].args)

    # ------------------------------------------------------------ downloading

    def cached(self, url: str, shard_size: int) -> bool:
        """Whether the whole shard is in the folder."""
        try:
            return os.stat(self.path(url)).st_size == shard_size
        except FileNotFoundError:
            return False

    def fetch(
        self, url: str, shard_size: int, sha256: str | None = None, *, ahead: bool = False
    ) -> bool:
        """Download the shard at ``url`` into the folder, unless it is there.

        Args:
            url: The shard.
            shard_size: Its size.
            sha256: Its SHA-256 in hex, checked when given.
            ahead: Reading ahead: give up (return ``False``) rather than pass ``limit``. A
                read that needs the shard now passes it when every shard is held.

        Raises:
            RemoteError: The download failed for good, or the bytes are not the manifest's.
            CacheFullError: The disk is full.
        """
        self._mine()
        self._raise_if_failed(url)
        lock = held_lock(self.folder / f"{self.name(url)}.lock")
        try:
            if self.cached(url, shard_size):
                return True
            for left in self.folder.glob(f"{self.name(url)}.part-*"):  # a killed download's
                left.unlink(missing_ok=True)
            reserved = self._reserve(url, shard_size, ahead=ahead)
            if reserved is None:
                return False
            fd, part = reserved
            try:
                self._remember(url, lambda: self._download(url, fd, shard_size, sha256))
                os.replace(part, self.path(url))
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise self._full(url) from exc
                raise
            finally:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
        finally:
            release(lock)
        return True

    def _download(self, url: str, fd: int, size: int, sha256: str | None) -> None:
        self.remote.download(url, fd, size)
        if sha256 is None:
            return
        digest = hashlib.sha256()
        for start in range(0, size, _HASH_CHUNK):
            digest.update(os.pread(fd, _HASH_CHUNK, start))
        if digest.hexdigest() != sha256:
            raise RemoteError(
                f"{url!r}: its SHA-256 is {digest.hexdigest()}, its manifest says {sha256} "
                "(the shard changed since it was packed, or the transfer corrupted it)"
            )

    def _full(self, url: str) -> CacheFullError:
        return CacheFullError(
            errno.ENOSPC,
            f"the disk of the shard cache {str(self.folder)!r} is full (downloading {url!r}): "
            "free space there, or pass a smaller cache_limit or another cache_dir",
        )

    def _reserve(self, url: str, size: int, *, ahead: bool) -> tuple[int, str] | None:
        """A part file with ``size`` bytes allocated, once the folder has room (see
        :meth:`fetch`); ``None`` when reading ahead and it has none."""
        folder_lock = held_lock(self.folder / ".lock")
        try:
            used = self._make_room(size)
            if self.limit is not None and used + size > self.limit and ahead:
                return None
            part = str(self.folder / f"{self.name(url)}.part-{os.getpid()}-{threading.get_ident()}")
            fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                if size:
                    os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                os.close(fd)
                os.unlink(part)
                if exc.errno == errno.ENOSPC:
                    raise self._full(url) from exc
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                os.ftruncate(fd, size)
            return fd, part
        finally:
            release(folder_lock)

    def usage(self) -> int:
        """Bytes the folder's shards and downloads in progress take."""
        return sum(size for _, _, size in self._entries(parts=True))

    def _entries(self, *, parts: bool) -> list[tuple[float, str, int]]:
        """``(last read, path, size)`` of the shards (and the parts in progress)."""
        found = []
        with os.scandir(self.folder) as entries:
            for entry in entries:
                is_part = ".part-" in entry.name
                if not (entry.name.endswith(".tar") or (parts and is_part)):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                found.append((stat.st_mtime, entry.path, stat.st_size))
        return found

    def _make_room(self, size: int) -> int:
        """Delete the parts of downloads that no longer run, and evict what it takes (and can)
        to fit ``size`` more bytes within the limit; the bytes then used."""
        entries = self._entries(parts=True)
        used = 0
        for _, path, bytes_ in entries:
            if ".part-" in path and self._stale(path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            used += bytes_
        if self.limit is None:
            return used
        for _, path, bytes_ in sorted(e for e in entries if e[1].endswith(".tar")):
            if used + size <= self.limit:
                break
            if _evict(path):
                used -= bytes_
        return used

    def _stale(self, part: str) -> bool:
        """Whether a part file was left by a download that no longer runs."""
        lock_path = part.rsplit(".part-", 1)[0] + ".lock"
        fd = free_lock(lock_path)
        if fd is None:
            return False
        release(fd)
        return True

    # ------------------------------------------------------------ holding and indexes

    def hold(self, url: str) -> int | None:
        """A shared lock on the cached shard (it is not evicted until :func:`release`), or
        ``None`` when it is not in the folder."""
        try:
            fd = os.open(self.path(url), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        _OURS.add(fd)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def index(self, url: str, shard_size: int, index_url: str | None) -> indexes.ShardIndex:
        """The shard's index: kept in the folder, else downloaded from ``index_url``, else made
        by a scan of the whole shard (which is downloaded for it).

        Raises:
            RemoteError: What it takes cannot be downloaded.
            FileNotFoundError: No shard is at ``url``.
            TarError: The shard is not an uncompressed tar.
        """
        local = self.folder / f"{self.name(url)}.idx"
        samples = _read_index(local, shard_size)
        if samples is not None:
            return indexes.ShardIndex(samples, size=shard_size, index=str(local))
        if index_url is not None:
            try:
                text = self.remote.read_all(index_url)
            except FileNotFoundError:
                pass
            else:
                _write_atomic(local, text)
                samples = _read_index(local, shard_size)
                if samples is not None:
                    return indexes.ShardIndex(samples, size=shard_size, index=str(local))
        self.fetch(url, shard_size)
        return indexes.load(self.path(url))  # which writes NAME.idx beside the cached shard


def _read_index(path: Path, size: int) -> indexes.Samples | None:
    try:
        samples = indexes.read_index(path)
    except (OSError, ValueError):
        return None
    return samples if indexes.fits(samples, size) else None


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _evict(path: str) -> bool:
    """Delete a cached shard unless someone holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.unlink(path)  # while the lock is ours: no reader can start on it meanwhile
        return True
    finally:
        os.close(fd)
