"""Shards on remote storage (S3, GCS, Azure, HTTP, any fsspec URL): requests that survive faults.

Every request goes through fsspec (s3fs for ``s3://``, gcsfs, adlfs, aiohttp for ``http(s)://``),
configured the fsspec way: ``storage_options``, and the environment variables and config files
those libraries read (``AWS_ENDPOINT_URL``, ``~/.aws/credentials``, ...).

A request that fails for a reason that may pass (a reset or refused connection, a timeout, an
HTTP 5xx, 408 or 429, S3's throttling) is retried after :data:`RETRY_DELAYS`, and counted in
:attr:`Remote.counters`; one that cannot succeed (not found, forbidden) fails at once. A request
that takes longer than ``timeout`` seconds (a stalled transfer) is cancelled and retried: on the
asynchronous filesystems (S3, GCS, Azure, HTTP) fsspec cancels it; a synchronous one (SFTP, ...)
relies on its own timeouts. After the last retry, :class:`RemoteError` names the URL.

So that one policy applies, and every retry is counted, the S3 filesystem fastload makes (an
instance of its own, not fsspec's shared one) has s3fs's and botocore's own retries turned off,
unless ``storage_options`` sets ``config_kwargs`` itself.
"""

from __future__ import annotations

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
from fastload.shards.ranged import Refused, get_into, write_all

__all__ = [
    "CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "INSTALL",
    "PART",
    "RETRY_DELAYS",
    "Counters",
    "Remote",
    "RemoteError",
    "is_remote",
    "protocol_of",
    "transient",
]

INSTALL = 'pip install "fastload[remote]"'
RETRY_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # seconds before each retry: ~16 s of outage
DEFAULT_TIMEOUT = 60.0
PART = 8 * 2**20  # bytes per ranged GET when a shard is downloaded
CONNECTIONS = 8  # ranged GETs in flight per shard

_LOG = logging.getLogger("fastload.shards")
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
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError):
        # s3fs turns S3's error codes into OSErrors; the ones that will not pass carry these
        return exc.errno not in (errno.EINVAL, errno.ENAMETOOLONG, errno.EACCES, errno.ENOENT)
    module = type(exc).__module__.split(".")[0]
    return module in ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "http")


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
            (see :mod:`fastload.shards.ranged`); ``False``: always through fsspec.
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
        # plain GETs for downloads (see fastload.shards.ranged): where a URL allows them
        self.plain_gets = plain_gets
        self._plain = protocol in ("http", "https") and not storage_options
        self._plain = plain_gets and (self._plain or protocol in ("s3", "s3a"))

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
        self, what: str, url: str, request: Callable[..., _T], *args: Any, **kwargs: Any
    ) -> _T:
        """``request(*args, **kwargs)`` with retries; ``what`` says what it is in errors."""
        if getattr(request, "__self__", None) is self._fs and self._asynchronous():
            kwargs["timeout"] = self.timeout
        for attempt in range(len(RETRY_DELAYS) + 1):
            try:
                result = request(*args, **kwargs)
            except Refused:
                raise
            except Exception as exc:
                if not transient(exc) or attempt == len(RETRY_DELAYS):
                    if isinstance(exc, FileNotFoundError):
                        raise FileNotFoundError(f"no such object: {url!r}") from exc
                    self.counters.add(failures=1)
                    tries = f" after {attempt + 1} tries" if attempt else ""
                    raise RemoteError(
                        f"cannot {what} {url!r}{tries}: {type(exc).__name__}: {exc}"
                    ) from exc
                self.counters.add(retries=1)
                _LOG.info("retrying %s of %s in %.2f s: %r", what, url, RETRY_DELAYS[attempt], exc)
                time.sleep(RETRY_DELAYS[attempt])
            else:
                self.counters.add(requests=1)
                return result
        raise AssertionError("unreachable")

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

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the object at ``url`` (fewer if it ends first).

        Raises:
            RemoteError: The request failed for good, or the server sent another range.
            FileNotFoundError: No object is at ``url``.
        """
        data = self.call("read", url, self.fs.cat_file, url, start=start, end=end)
        if len(data) > end - start:
            raise RemoteError(
                f"{url!r}: asked for bytes {start}-{end}, the server sent {len(data)} bytes "
                "(it ignores Range requests; fastload needs them)"
            )
        self.counters.add(bytes=len(data))
        return data

    def read_all(self, url: str) -> bytes:
        """The whole object at ``url``."""
        data = self.call("read", url, self.fs.cat_file, url)
        self.counters.add(bytes=len(data))
        return data

    def download(self, url: str, fd: int, size: int) -> None:
        """Write the object's ``size`` bytes into the open file ``fd``, with up to
        :data:`CONNECTIONS` ranged GETs of :data:`PART` bytes in flight.

        Raises:
            RemoteError: A part failed for good, or the object is shorter than ``size``.
            OSError: The file cannot be written (a full disk: ``ENOSPC``).
        """

        plain = self._plain_url(url)

        def part(start: int) -> None:
            end = min(start + PART, size)
            got = -1
            if plain is not None:
                try:
                    got = self.call(
                        "read", url, get_into, plain, start, end, fd, timeout=self.timeout
                    )
                except Refused:
                    self._plain = False  # this store wants fsspec's client: from now on
                else:
                    self.counters.add(bytes=got)
            if got < 0:
                data = self.read(url, start, end)
                write_all(fd, data, start)
                got = len(data)
            if got < end - start:
                raise RemoteError(
                    f"{url!r} ends at byte {start + got}, before the {size} bytes expected"
                )

        starts = range(0, size, PART)
        if len(starts) <= 1:
            for start in starts:
                part(start)
            return
        with ThreadPoolExecutor(min(CONNECTIONS, len(starts))) as pool:
            for done in [pool.submit(part, start) for start in starts]:
                done.result()

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

    def listing(self, url: str) -> list[tuple[str, int]]:
        """The objects directly under ``url``, as ``(url, size)``, sorted."""
        entries = self.call("list", url, self.fs.ls, url, detail=True)
        prefix = f"{self.protocol}://"
        found = []
        for entry in entries:
            if entry.get("type") == "directory":
                continue
            name = entry["name"]
            found.append((name if "://" in name else prefix + name, int(entry.get("size") or 0)))
        return sorted(found)

    def put(self, url: str, data: bytes) -> None:
        """Write ``data`` as the object at ``url``."""
        self.call("write", url, self.fs.pipe_file, url, data)

    def put_file(self, path: str, url: str) -> None:
        """Upload the local file at ``path`` as the object at ``url``."""
        self.call("upload to", url, self.fs.put_file, path, url)


def protocol_of(url: str) -> str:
    """The scheme of a URL."""
    return url.partition("://")[0]
