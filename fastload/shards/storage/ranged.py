"""Plain GETs with the standard library's ``http.client``, read straight into a file.

Downloading a whole shard through fsspec's asynchronous clients costs about four times the CPU
of a plain blocking socket read into a reused buffer (their event loop handles each chunk in
Python). On a training node every core spent there is one less for decoding, so
:meth:`fastload.shards.storage.remote.Remote.download` uses this path where a URL can be fetched
with a plain GET: ``http(s)://`` shards with no storage options, and S3 objects through a
presigned URL (made locally by s3fs from the credentials it found). Everything else, and any
request this path is refused (an object that needs headers a presigned URL cannot carry), goes
through fsspec.

A server may ignore ``Range`` and answer 200 with the whole object, as RFC 9110 allows (Python's
own ``http.server`` does). To a request from byte 0 that answer is used: the whole object is
written (the caller learns that the server sends whole objects); to any other,
:func:`get_into` raises :class:`RangesIgnored` without reading the body.
"""

from __future__ import annotations

import http.client
import os
import urllib.parse
from typing import Any

__all__ = [
    "CHUNK",
    "RangeStatusError",
    "RangesIgnored",
    "Refused",
    "get_into",
    "get_whole",
    "write_all",
]

CHUNK = 2**20


class RangeStatusError(OSError):
    """The server answered a ranged GET with another status; ``status`` holds it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RangesIgnored(RangeStatusError):
    """The server answered a ranged GET with 200 and the whole object: it does not serve
    ranges."""


class Refused(Exception):
    """The server refused a plain GET (400, 401, 403): the request needs fsspec's client."""


def get_into(
    url: str, start: int, end: int, fd: int, *, timeout: float, size: int
) -> tuple[int, bool]:
    """GET bytes ``start`` to ``end`` of ``url`` and write them at the same offsets of ``fd``.

    ``timeout`` bounds each wait on the socket: a transfer that stalls fails instead of
    hanging.

    Args:
        url: The object.
        start, end: The range.
        fd: An open file, the object's size long.
        timeout: Seconds any wait on the socket may take.
        size: The object's size: what a 200 from byte 0 writes at most.

    Returns:
        The bytes written, and whether the server sent the whole object (a 200 to a request
        from byte 0): then the count is of the whole object's bytes written, ``size + 1``
        when the object is longer than ``size`` (the byte past it is not written).

    Raises:
        Refused: A 400, 401 or 403.
        FileNotFoundError: A 404.
        RangesIgnored: A 200 to a request past byte 0 (nothing is written).
        RangeStatusError: Any other status but 206 (a 5xx, a 429).
        OSError: The connection failed or timed out.
    """
    connection, response = _get(url, {"Range": f"bytes={start}-{end - 1}"}, timeout)
    try:
        if response.status == 200 and start == 0:
            return _whole(response, fd, size), True
        if response.status == 200:
            raise RangesIgnored(200, "a ranged GET got 200 OK: the server sends whole objects")
        if response.status != 206:
            raise RangeStatusError(
                response.status, f"a ranged GET got {response.status} {response.reason}"
            )
        return _stream(response, fd, start, end), False
    finally:
        connection.close()


def get_whole(url: str, fd: int, size: int, *, timeout: float) -> int:
    """GET the whole object at ``url`` (no ``Range``) and write its first ``size`` bytes at the
    start of ``fd``.

    Returns:
        The bytes written: fewer than ``size`` when the object is shorter, ``size + 1`` when it
        is longer (the byte past ``size`` is not written).

    Raises:
        Refused, FileNotFoundError, RangeStatusError, OSError: As :func:`get_into` (any status
        but 200 is a :class:`RangeStatusError`).
    """
    connection, response = _get(url, {}, timeout)
    try:
        if response.status != 200:
            raise RangeStatusError(
                response.status, f"a GET got {response.status} {response.reason}"
            )
        return _whole(response, fd, size)
    finally:
        connection.close()


def _whole(response: Any, fd: int, size: int) -> int:
    got = _stream(response, fd, 0, size)
    return got + 1 if got == size and response.read(1) else got


def _get(url: str, headers: dict[str, str], timeout: float) -> tuple[Any, Any]:
    """A GET's connection and response, its refusals raised (the connection then closed)."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        if response.status in (400, 401, 403):
            raise Refused(f"{response.status} {response.reason}")
        if response.status == 404:
            raise FileNotFoundError(url)
    except BaseException:
        connection.close()
        raise
    return connection, response


def _stream(response: Any, fd: int, start: int, end: int) -> int:
    """Read the response's body into ``fd`` from ``start`` up to ``end`` at most; the bytes
    written."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    at = start
    while at < end:
        got = response.readinto(view[: min(CHUNK, end - at)])
        if not got:
            break
        write_all(fd, view[:got], at)
        at += got
    return at - start


def write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of the open file ``fd``, however many writes it
    takes."""
    view = memoryview(data)
    while view:
        view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
