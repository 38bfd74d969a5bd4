"""Servers on 127.0.0.1 for trying remote shards without a cloud: S3, HTTP, and a fault proxy.

- :class:`S3Server`: moto's S3 server (``pip install "moto[server]"``), the one s3fs's own tests
  run against, in this process's threads or in a process of its own.
- :class:`HTTPServer`: a folder served by the standard library's ``http.server``, with the
  ``Range`` requests that reading shards needs.
- :class:`FaultProxy`: a TCP proxy in front of either, which can throttle the link, add
  latency, reset every connection, refuse connections (a server gone for a while), or stall
  transfers without closing them.

The tests of remote shards and ``benchmarks/storage/remote.py`` use them; every one binds loopback
only and stops with its ``with`` block.
"""

from __future__ import annotations

import collections
import contextlib
import http.server
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["FaultProxy", "HTTPServer", "S3Server", "free_port"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class _Server:
    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class S3Server(_Server):
    """moto's S3 server on loopback.

    Args:
        process: Run it in a process of its own (benchmarks: it then competes with the loader
            for cores, not for this process's GIL) instead of this process's threads.
    """

    KEY, SECRET, REGION = "testing", "testing", "us-east-1"

    def __init__(self, *, process: bool = False) -> None:
        self.port = free_port()
        self.process = process
        self._server: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process, when it runs in one of its own."""
        return self._server.pid if isinstance(self._server, subprocess.Popen) else None

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """s3fs's options for this server (or for ``endpoint``, a proxy in front of it)."""
        return {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {
                "endpoint_url": endpoint or self.endpoint,
                "region_name": self.REGION,
            },
        }

    def start(self) -> None:
        if self.process:
            code = (
                "import logging, sys, time; logging.disable(logging.CRITICAL);"
                "from moto.server import ThreadedMotoServer as S;"
                f"S(ip_address={HOST!r}, port={self.port}, verbose=False).start();"
                "sys.stdin.read()"
            )
            self._server = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            _wait_for_port(self.port)
            return
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address=HOST, port=self.port, verbose=False)
        self._server.start()
        _wait_for_port(self.port)

    def stop(self) -> None:
        if isinstance(self._server, subprocess.Popen):
            self._server.kill()
            self._server.wait()
        elif self._server is not None:
            self._server.stop()
        self._server = None

    def make_bucket(self, name: str) -> None:
        """Create a bucket (a valid S3 name: 3 to 63 lowercase letters, digits, dots, dashes)."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET,
            region_name=self.REGION,
        )
        client.create_bucket(Bucket=name)


def _wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no server came up on {HOST}:{port} in {timeout:.0f} s"
                ) from None
            time.sleep(0.05)


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """``http.server``'s file handler, with single ``Range: bytes=a-b`` requests (206)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def copyfile(self, source: Any, outputfile: Any) -> None:
        while data := source.read(64 * 1024):
            outputfile.write(data)
            self.server.count(self.path, len(data))  # type: ignore[attr-defined]

    def send_head(self) -> Any:
        match = _RANGE.match(self.headers.get("Range", "").strip())
        path = self.translate_path(self.path)
        if match is None or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        first, last = match.groups()
        if first:
            start, end = int(first), min(int(last) + 1 if last else size, size)
        else:
            start, end = max(size - int(last or 0), 0), size
        if start >= size or start >= end:
            self.send_error(416, "Requested Range Not Satisfiable")
            return None
        file = open(path, "rb")  # noqa: SIM115 - the base class closes what send_head returns
        file.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return _Limited(file, end - start)


class _Limited:
    """A file that reads at most ``left`` more bytes (what ``copyfile`` copies)."""

    def __init__(self, file: Any, left: int) -> None:
        self.file, self.left = file, left

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.file.read(size)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.file.close()


class HTTPServer(_Server):
    """A folder served over HTTP on loopback, with ``Range`` requests.

    Args:
        folder: What to serve.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._server: _CountingServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://{HOST}:{self._server.server_address[1]}"

    @property
    def served(self) -> dict[str, int]:
        """Bytes of file content sent so far, by request path."""
        assert self._server is not None, "start the server first"
        return dict(self._server.served)

    def start(self) -> None:
        self._server = _CountingServer((HOST, 0), _handler_for(self.folder))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _CountingServer(http.server.ThreadingHTTPServer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.served: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def count(self, path: str, size: int) -> None:
        with self._lock:
            self.served[path] += size


def _handler_for(folder: Path) -> type[_RangeHandler]:
    class Handler(_RangeHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

    return Handler


class FaultProxy(_Server):
    """A TCP proxy on loopback in front of ``upstream``, with faults on demand.

    Args:
        upstream: The server's ``http://host:port`` (or ``(host, port)``).
        rate: The link's bytes per second, shared by every connection (``None``: no bound).
        latency: Seconds each chunk sent to the server waits (a request's added delay).
        process: Run it in a process of its own (benchmarks: its threads then take no GIL
            from the loader's process); its faults cannot be changed then.
    """

    CHUNK = 64 * 1024

    def __init__(
        self,
        upstream: str | tuple[str, int],
        *,
        rate: float | None = None,
        latency: float = 0.0,
        process: bool = False,
    ) -> None:
        self.process: subprocess.Popen[str] | None = None
        self._in_process = process
        self._url = ""
        if isinstance(upstream, str):
            host, _, port = upstream.split("://", 1)[-1].partition(":")
            upstream = (host, int(port.rstrip("/")))
        self.upstream = upstream
        self.rate, self.latency = rate, latency
        self.connections = 0
        self.forwarded = 0  # bytes sent from the server to the clients
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._refuse_until = 0.0
        self._flowing = threading.Event()
        self._flowing.set()
        self._sent_at = time.monotonic()  # the link's clock: when what was sent will have left

    @property
    def url(self) -> str:
        if self.process is not None:
            return self._url
        assert self._listener is not None, "start the proxy first"
        return f"http://{HOST}:{self._listener.getsockname()[1]}"

    def start(self) -> None:
        if self._in_process:
            code = (
                "import sys; from fastload.testing.servers import FaultProxy;"
                f"p = FaultProxy({self.upstream!r}, rate={self.rate!r}, latency={self.latency!r});"
                "p.start(); print(p.url, flush=True); sys.stdin.read()"
            )
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self.process.stdout is not None
            self._url = self.process.stdout.readline().strip()
            return
        self._listener = socket.create_server((HOST, 0))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.reset()
        self._flowing.set()

    # ------------------------------------------------------------ faults

    def reset(self) -> None:
        """Close every open connection now (the clients see them reset)."""
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                # linger on, 0 s: the close sends a reset
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    def refuse(self, seconds: float) -> None:
        """Reset every connection, and close each new one at once, for ``seconds``."""
        self._refuse_until = time.monotonic() + seconds
        self.reset()

    def stall(self) -> None:
        """Stop forwarding bytes, keeping the connections open, until :meth:`resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward bytes again after :meth:`stall`."""
        self._flowing.set()

    # ------------------------------------------------------------ forwarding

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if time.monotonic() < self._refuse_until:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, server}
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, request: bool) -> None:
        try:
            while True:
                data = source.recv(self.CHUNK)
                if not data:
                    break
                self._flowing.wait()
                if request and self.latency:
                    time.sleep(self.latency)
                elif not request and self.rate:
                    self._throttle(len(data))
                sink.sendall(data)
                if not request:
                    with self._lock:
                        self.forwarded += len(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with self._lock:
                    self._sockets.discard(sock)

    def _throttle(self, size: int) -> None:
        assert self.rate is not None
        with self._lock:
            now = time.monotonic()
            self._sent_at = max(self._sent_at, now) + size / self.rate
            wait = self._sent_at - now
        if wait > 0:
            time.sleep(wait)
