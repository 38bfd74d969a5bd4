"""Ranged GETs with the standard library's ``http.client``, read straight into a file.

Downloading a whole shard through fsspec's asynchronous clients costs about four times the CPU
of a plain blocking socket read into a reused buffer (their event loop handles each chunk in
Python). On a training node every core spent there is one less for decoding, so
:meth:`fastload.shards.remote.Remote.download` uses this path where a URL can be fetched with a
plain GET: ``http(s)://`` shards with no storage options, and S3 objects through a presigned URL
(made locally by s3fs from the credentials it found). Everything else, and any request this
path is refused (an object that needs headers a presigned URL cannot carry), goes through fsspec.
"""

from __future__ import annotations

import http.client
import os
import urllib.parse

__all__ = ["CHUNK", "RangeStatusError", "Refused", "get_into", "write_all"]

CHUNK = 2**20


class RangeStatusError(OSError):
    """The server answered a ranged GET with another status; ``status`` holds it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Refused(Exception):
    """The server refused a plain GET (400, 401, 403): the request needs fsspec's client."""


def get_into(url: str, start: int, end: int, fd: int, *, timeout: float) -> int:
    """GET bytes ``start`` to ``end`` of ``url`` and write them at the same offsets of ``fd``.

    ``timeout`` bounds each wait on the socket: a transfer that stalls fails instead of
    hanging.

    Returns:
        The bytes written (fewer than asked when the object ends first).

    Raises:
        Refused: A 400, 401 or 403.
        FileNotFoundError: A 404.
        RangeStatusError: Any other status but 206 (a 5xx, a 429, a server without ranges).
        OSError: The connection failed or timed out.
    """
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", target, headers={"Range": f"bytes={start}-{end - 1}"})
        response = connection.getresponse()
        if response.status in (400, 401, 403):
            raise Refused(f"{response.status} {response.reason}")
        if response.status == 404:
            raise FileNotFoundError(url)
        if response.status != 206:
            raise RangeStatusError(
                response.status, f"a ranged GET got {response.status} {response.reason}"
            )
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
    finally:
        connection.close()


def write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of the open file ``fd``, however many writes it
    takes."""
    view = memoryview(data)
    while view:
        view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]
