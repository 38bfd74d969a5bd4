"""Helpers for testing code that reads data with fastload, as ``torch.testing`` is torch's.

Servers on 127.0.0.1 that stand in for a cloud, each started and stopped by a ``with`` block:
:class:`S3Server` (moto's S3 server; ``pip install "moto[server]"``, in fastload's ``dev`` extra),
:class:`HTTPServer` (a folder over HTTP with ``Range`` requests) and :class:`FaultProxy` (a TCP
proxy that throttles, delays, resets, refuses or stalls connections). fastload's own tests and
``benchmarks/storage/remote.py`` use them. ``import fastload`` does not import this package.
"""

from __future__ import annotations

from fastload.testing.servers import FaultProxy, HTTPServer, S3Server, free_port

__all__ = ["FaultProxy", "HTTPServer", "S3Server", "free_port"]
