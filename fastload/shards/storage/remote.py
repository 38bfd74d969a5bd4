"""Shards on remote storage (S3, GCS, Azure, HTTP, any fsspec URL): requests that survive faults.

Every request goes through fsspec (s3fs for ``s3://``, gcsfs, adlfs, aiohttp for ``http(s)://``),
configured the fsspec way: ``storage_options``, and the environment variables and config files
those libraries read (``AWS_ENDPOINT_URL``, ``~/.aws/credentials``, ...).

A request that fails for a reason that may pass (a reset or refused connection, an HTTP 5xx,
408 or 429, S3's throttling) is retried after :data:`RETRY_DELAYS`, counted in
:attr:`Remote.counters` and logged once (a warning of the ``fastload`` logger, with its cause);
one that cannot succeed (not found, forbidden) fails at once. A request that takes longer than
``timeout`` seconds (a stalled transfer, a server that accepts connections and never answers)
is cancelled: on the asynchronous filesystems (S3, GCS, Azure, HTTP) fsspec cancels it, a
synchronous one (SFTP, ...) relies on its own timeouts. A stall costs a whole ``timeout``, so
stalls have a budget of their own: :data:`STALLS` stalled requests for one object (a shard's
download, all its parts together; a size; a ranged read) and it fails, instead of ``timeout``
times every retry. After the last try, :class:`RemoteError` names the URL, the tries and the
time they took.

A server that answers a ranged request with the whole object (200 instead of 206: Python's
``http.server`` and many simple servers) is remembered, per host and process: each shard is
then downloaded whole with one GET (the answer that taught it is used, not thrown away), a
ranged read takes its part of the whole object, and the cache downloads a shard whole rather
than read it a sample at a time.

So that one policy applies, and every retry is counted, the S3 filesystem fastload makes (an
instance of its own, not fsspec's shared one) has s3fs's and botocore's own retries turned off,
unless ``storage_options`` sets ``config_kwargs`` itself.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastload._optional import MissingDependencyError
from fastload.shards.storage.ranged import RangesIgnored, Refused, get_into, get_whole, write_all

__all__ = [
    "CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "INSTALL",
    "PART",
    "RETRY_DELAYS",
    "STALLS",
    "Counters",
    "Remote",
    "RemoteError",
    "Stalls",
    "is_remote",
    "protocol_of",
    "stalled",
    "transient",
]

INSTALL = 'pip install "fastload[remote]"'
RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # seconds before each retry: ~16 s of outage
DEFAULT_TIMEOUT = 60.0
STALLS = 2  # requests for one object that may time out before it fails: ~2 x timeout
PART = 8 * 2**20  # bytes per ranged GET when a shard is downloaded
CONNECTIONS = 8  # ranged GETs in flight per shard

_LOG = logging.getLogger("fastload")
_T = TypeVar("_T")


class RemoteError(OSError):
    """A remote object that cannot be read or written; the message names its URL."""


def is_remote(text: str) -> bool:
    """Whether ``text`` is a URL of remote storage (``s3://``, ``https://``; not ``file://``)."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme != "file" and scheme.replace("+", "").isalnum()


def transient(exc: BaseException) -> bool:
    """Whether a failed request may succeed when tried again."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, RemoteError)):
        return False
    status = getattr(exc, "status", None)  # aiohttp's ClientResponseError
    if isinstance(status, int):
        return status >= 500 or status in (408, 429)
    if stalled(exc) or isinstance(exc, ConnectionError):
        return True
    if isinstance(exc, OSError):
        # s3fs turns S3's error codes into OSErrors; the ones that will not pass carry these
        return exc.errno not in (errno.EINVAL, errno.ENAMETOOLONG, errno.EACCES, errno.ENOENT)
    module = type(exc).__module__.split(".")[0]
    return module in ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "http")


def stalled(exc: BaseException) -> bool:
    """Whether a failed request timed out (a stalled transfer, a server that never answers)."""
    # socket.timeout, fsspec's and aiohttp's timeouts (asyncio's TimeoutError: its own class
    # before Python 3.11)
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError))


class Stalls:
    """The stalled requests of one object's requests (a shard's download: all its parts),
    counted against :data:`STALLS`."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> int:
        """Count one more stall; the count now."""
        with self._lock:
            self.count += 1
            return self.count


@dataclass
class Counters:
    """What this process's requests did (read by benchmarks, ``explain`` and tests).

    Attributes:
        requests: Requests that succeeded.
        retries: Requests tried again after a transient failure.
        failures: Requests that failed for good (not counting objects not found).
        bytes: Bytes read.
    """

    requests: int = 0
    retries: int = 0
    failures: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)


class Remote:
    """Requests to one kind of remote storage, retried (see the module's notes).

    Picklable: a worker process makes its own filesystem object from the same options.

    Args:
        protocol: The URL scheme (``"s3"``, ``"https"``, ...).
        storage_options: Passed to ``fsspec.filesystem``.
        timeout: Seconds one request may take before it is cancelled and retried.
        plain_gets: Download whole objects with plain ranged GETs where the URL allows it
            (see :mod:`fastload.shards.storage.ranged`); ``False``: always through fsspec.
    """

    def __init__(
        self,
        protocol: str,
        storage_options: dict[str, Any] | None,
        timeout: float,
        *,
        plain_gets: bool = True,
    ) -> None:
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        self.timeout = timeout
        self.counters = Counters()
        self._fs: Any = None
        self._pid = -1
        # plain GETs for downloads (see fastload.shards.storage.ranged): where a URL allows them
        self.plain_gets = plain_gets
        self._plain = protocol in ("http", "https") and not storage_options
        self._plain = plain_gets and (self._plain or protocol in ("s3", "s3a"))
        # hosts seen answering a ranged request with its range, and with the whole object
        self._ranged: set[str] = set()
        self._whole_only: set[str] = set()
        # object stores serve ranges by their API: only a web server's habit is learned
        self._probes = protocol in ("http", "https")

    def __getstate__(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "options": self.storage_options,
            "timeout": self.timeout,
            "plain_gets": self.plain_gets,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["protocol"], state["options"], state["timeout"], plain_gets=state["plain_gets"]
        )

    @property
    def fs(self) -> Any:
        """This process's fsspec filesystem."""
        if self._fs is None or self._pid != os.getpid():
            try:
                import fsspec
            except ImportError as exc:
                raise MissingDependencyError(
                    f"reading {self.protocol}:// shards needs fsspec ({exc}); install it with: "
                    f"{INSTALL}"
                ) from exc
            options = self.storage_options
            s3 = self.protocol in ("s3", "s3a")
            if s3 and "config_kwargs" not in options:
                options = {**options, "config_kwargs": {"retries": {"max_attempts": 1}}}
            try:
                self._fs = fsspec.filesystem(self.protocol, skip_instance_cache=s3, **options)
            except ImportError as exc:  # fsspec names the package the protocol needs
                raise MissingDependencyError(
                    f"reading {self.protocol}:// shards needs a library that is not installed "
                    f"({exc}); install it with: {INSTALL}, or the one named"
                ) from exc
            if s3 and "config_kwargs" not in self.storage_options:
                self._fs.retries = 1  # s3fs's attempts per request
            self._pid = os.getpid()
            self.counters = Counters()
        return self._fs

    def _asynchronous(self) -> bool:
        return bool(getattr(self.fs, "async_impl", False))

    def call(
        self,
        what: str,
        url: str,
        request: Callable[..., _T],
        *args: Any,
        stalls: Stalls | None = None,
        span: int = 0,
        **kwargs: Any,
    ) -> _T:
        """``request(*args, **kwargs)`` with retries; ``what`` says what it is in errors and
        logs, ``stalls`` counts the stalls of the object's requests (a new count by default).
        fsspec bounds a whole request, not each wait on its socket: one that moves ``span``
        bytes (a whole shard up or down) gets ``timeout`` for each :data:`PART` of them.

        Raises:
            RemoteError: It failed for good: a lasting error, the tries or the stalls spent.
            FileNotFoundError: No object is at ``url``.
            Refused, RangesIgnored: As the plain GETs raise them, at once.
        """
        if self._asynchronous() and _owner(request) is self._fs:
            # fsspec's sync wrapper cancels the request then
            kwargs["timeout"] = self.timeout * max(1, -(-span // PART))
        stalls = stalls if stalls is not None else Stalls()
        started = time.monotonic()
        for attempt in range(len(RETRY_DELAYS) + 1):
            try:
                result = request(*args, **kwargs)
            except (Refused, RangesIgnored):
                raise
            except Exception as exc:
                spent = stalled(exc) and stalls.add() >= STALLS
                if not transient(exc) or spent or attempt == len(RETRY_DELAYS):
                    if isinstance(exc, FileNotFoundError):
                        raise FileNotFoundError(f"no such object: {url!r}") from exc
                    self.counters.add(failures=1)
                    raise self._failure(what, url, exc, attempt + 1, started, stalls) from exc
                self.counters.add(retries=1)
                delay = RETRY_DELAYS[attempt]
                _LOG.warning(
                    "retrying the %s of %r (try %d of %d) in %.2f s: %s",
                    what,
                    url,
                    attempt + 2,
                    len(RETRY_DELAYS) + 1,
                    delay,
                    self._cause(exc),
                )
                time.sleep(delay)
            else:
                self.counters.add(requests=1)
                return result
        raise AssertionError("unreachable")

    def _cause(self, exc: BaseException) -> str:
        if stalled(exc):
            return f"no answer within timeout={self.timeout:g} s ({type(exc).__name__})"
        return f"{type(exc).__name__}: {exc}"

    def _failure(
        self, what: str, url: str, exc: BaseException, tries: int, started: float, stalls: Stalls
    ) -> RemoteError:
        spent = time.monotonic() - started
        tried = f" after {tries} tries over {spent:.1f} s" if tries > 1 else ""
        budget = (
            f"; {stalls.count} requests for it stalled, and {STALLS} stalls fail it"
            if stalled(exc) and stalls.count >= STALLS
            else ""
        )
        return RemoteError(f"cannot {what} {url!r}{tried}: {self._cause(exc)}{budget}")

    # ------------------------------------------------------------ requests

    def size(self, url: str) -> int:
        """The size of the object at ``url``."""
        info = self.call("look up", url, self.fs.info, url)
        return int(info["size"])

    def exists(self, url: str) -> bool:
        """Whether an object is at ``url``."""
        try:
            self.size(url)
        except FileNotFoundError:
            return False
        return True

    def ignores_ranges(self, url: str) -> bool:
        """Whether the server of ``url`` was seen answering a ranged request with the whole
        object (then reading a shard whole costs what one ranged read does)."""
        return _host(url) in self._whole_only

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the object at ``url`` (fewer if it ends first); from
        the whole object when the server ignores ranges.

        Raises:
            RemoteError: The request failed for good.
            FileNotFoundError: No object is at ``url``.
        """
        data = self.call("read", url, self.fs.cat_file, url, start=start, end=end)
        self.counters.add(bytes=len(data))
        if len(data) > end - start:  # a 200 to a ranged request: the whole object
            self._whole_only.add(_host(url))
            return bytes(memoryview(data)[start:end])
        return data

    def read_all(self, url: str) -> bytes:
        """The whole object at ``url``."""
        data = self.call("read", url, self.fs.cat_file, url)
        self.counters.add(bytes=len(data))
        return data

    def download(self, url: str, fd: int, size: int) -> None:
        """Write the object's ``size`` bytes into the open file ``fd``, with up to
        :data:`CONNECTIONS` ranged GETs of :data:`PART` bytes in flight. The first download
        from a web server asks for its first part alone, to learn whether it serves ranges:
        one that answers with the whole object has it written whole, then and from then on
        (one GET a shard).

        Raises:
            RemoteError: A part failed for good, or the object is not ``size`` bytes long.
            OSError: The file cannot be written (a full disk: ``ENOSPC``).
        """
        host, stalls = _host(url), Stalls()
        if host in self._whole_only:
            self._download_whole(url, fd, size, stalls)
            return
        starts = list(range(0, size, PART))
        probe = self._probes and host not in self._ranged and starts
        if probe and not self._part(url, fd, starts.pop(0), size, stalls):
            return  # the answer was the whole object
        if len(starts) <= 1:
            for start in starts:
                self._part(url, fd, start, size, stalls)
            return
        with ThreadPoolExecutor(min(CONNECTIONS, len(starts))) as pool:
            for done in [pool.submit(self._part, url, fd, s, size, stalls) for s in starts]:
                done.result()

    def _part(self, url: str, fd: int, start: int, size: int, stalls: Stalls) -> bool:
        """Download one part of ``url`` into ``fd``; ``False`` when the server sent the whole
        object instead (it is then written whole)."""
        end = min(start + PART, size)
        plain = self._plain_url(url)
        got = -1
        if plain is not None:
            try:
                got, whole = self.call(
                    "read",
                    url,
                    get_into,
                    plain,
                    start,
                    end,
                    fd,
                    timeout=self.timeout,
                    size=size,
                    stalls=stalls,
                )
            except Refused:
                self._plain = False  # this store wants fsspec's client: from now on
            except RangesIgnored:  # asked past byte 0: the whole object, one more GET
                self._whole_only.add(_host(url))
                self._download_whole(url, fd, size, stalls)
                return False
            else:
                self.counters.add(bytes=min(got, size))
                if whole:
                    self._whole_only.add(_host(url))
                    _check_size(url, got, size)
                    return False
        if got < 0:
            data = self.call(
                "read", url, self.fs.cat_file, url, start=start, end=end, stalls=stalls
            )
            self.counters.add(bytes=len(data))
            if len(data) > end - start:  # a 200 to a ranged request: the whole object
                self._whole_only.add(_host(url))
                self._write_whole(url, fd, data, size)
                return False
            write_all(fd, data, start)
            got = len(data)
        self._ranged.add(_host(url))
        if got < end - start:
            raise RemoteError(
                f"{url!r} ends at byte {start + got}, before the {size} bytes expected"
            )
        return True

    def _download_whole(self, url: str, fd: int, size: int, stalls: Stalls) -> None:
        """The whole object in one GET, from a server that does not serve ranges."""
        plain = self._plain_url(url)
        if plain is not None:
            try:
                got = self.call(
                    "read", url, get_whole, plain, fd, size, timeout=self.timeout, stalls=stalls
                )
            except Refused:
                self._plain = False
            else:
                self.counters.add(bytes=min(got, size))
                _check_size(url, got, size)
                return
        data = self.call("read", url, self.fs.cat_file, url, stalls=stalls, span=size)
        self.counters.add(bytes=len(data))
        self._write_whole(url, fd, data, size)

    def _write_whole(self, url: str, fd: int, data: bytes, size: int) -> None:
        _check_size(url, len(data), size)
        write_all(fd, data, 0)

    def _plain_url(self, url: str) -> str | None:
        """A URL a plain GET can fetch the object at ``url`` from, if there is one."""
        if not self._plain:
            return None
        if self.protocol in ("http", "https"):
            return url
        try:  # signed here, from the credentials s3fs found; no request is made
            return str(self.fs.url(url.split("://", 1)[1], expires=3600))
        except Exception:
            return None

    def listing(self, url: str) -> list[tuple[str, int | None]]:
        """The objects directly under ``url``, as ``(url, size)``, sorted; the size is ``None``
        where the listing does not give it (an HTTP server's index page)."""
        entries = self.call("list", url, self.fs.ls, url, detail=True)
        prefix = f"{self.protocol}://"
        found = []
        for entry in entries:
            if entry.get("type") == "directory":
                continue
            name = entry["name"]
            size = entry.get("size")
            found.append(
                (name if "://" in name else prefix + name, None if size is None else int(size))
            )
        return sorted(found)

    def put(self, url: str, data: bytes) -> None:
        """Write ``data`` as the object at ``url``."""
        self.call("write", url, self.fs.pipe_file, url, data)

    def put_file(self, path: str, url: str) -> None:
        """Upload the local file at ``path`` as the object at ``url``."""
        self.call("upload to", url, self.fs.put_file, path, url, span=os.path.getsize(path))


def protocol_of(url: str) -> str:
    """The scheme of a URL."""
    return url.partition("://")[0]


def _host(url: str) -> str:
    """The scheme and host of a URL (for S3: the bucket), which servers' habits are kept by."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _owner(request: Callable[..., Any]) -> Any:
    """The object whose method ``request`` is: fsspec's blocking methods wrap the asynchronous
    ones, which know their filesystem."""
    return getattr(request, "__self__", None) or getattr(
        getattr(request, "__wrapped__", None), "__self__", None
    )


def _check_size(url: str, got: int, size: int) -> None:
    if got < size:
        raise RemoteError(f"{url!r} ends at byte {got}, before the {size} bytes expected")
    if got > size:
        raise RemoteError(
            f"{url!r} is longer than the {size} bytes expected (it changed since it was listed)"
        )
