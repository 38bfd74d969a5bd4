"""Packing to remote storage: ``fastload.pack(source, "s3://bucket/pack")``.

The pack is written (resumably, see :mod:`fastload.shards.pack`) into a staging folder of
fastload's cache folder, named after the destination, then uploaded through fsspec: each shard
and its index, skipping those already there at their size (a stopped upload continues), and the
manifest last, so that a reader never sees a manifest whose shards are missing. The staging
folder is deleted once the manifest is up; it needs as much disk as the pack.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastload.shards.format import manifest as manifests
from fastload.shards.storage.remote import DEFAULT_TIMEOUT, Remote, protocol_of
from fastload.system import cache_dir

__all__ = ["UPLOADS", "staging_folder", "upload"]

UPLOADS = 4  # files uploaded at once


def staging_folder(url: str) -> Path:
    """Where a pack bound for ``url`` is written first."""
    return cache_dir() / "pack-staging" / hashlib.sha1(url.encode()).hexdigest()[:24]


def check_destination(url: str, storage_options: dict[str, Any] | None) -> Remote:
    """How to reach ``url``, once it is known to hold no complete pack.

    Raises:
        FileExistsError: A manifest is already there.
    """
    remote = Remote(protocol_of(url), storage_options, DEFAULT_TIMEOUT)
    if remote.exists(f"{url.rstrip('/')}/{manifests.MANIFEST}"):
        raise FileExistsError(
            f"{url!r} already holds a complete pack ({manifests.MANIFEST}); choose another "
            "prefix, or delete it to pack again"
        )
    return remote


def upload(
    staged: Path,
    url: str,
    remote: Remote,
    manifest: manifests.Manifest,
    bar: Callable[..., None],
) -> None:
    """Upload a pack written in ``staged`` to ``url`` (see the module's notes), then delete
    ``staged``."""
    url = url.rstrip("/")
    names = [name for entry in manifest.shards for name in (entry.name, entry.index)]
    total = sum(os.path.getsize(staged / name) for name in names)
    sent = 0

    def one(name: str) -> int:
        size = os.path.getsize(staged / name)
        try:
            there = remote.size(f"{url}/{name}")
        except FileNotFoundError:
            there = -1
        if there != size:
            remote.put_file(str(staged / name), f"{url}/{name}")
        return size

    with ThreadPoolExecutor(UPLOADS, thread_name_prefix="fastload-upload") as pool:
        for size in pool.map(one, names):
            sent += size
            bar(sent, total, "uploaded")
    remote.put(f"{url}/{manifests.MANIFEST}", manifests.encode(manifest))
    shutil.rmtree(staged, ignore_errors=True)
