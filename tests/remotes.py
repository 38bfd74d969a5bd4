"""Remote shards for the tests: packs uploaded to a real S3 server (moto) or served over HTTP,
both on loopback, started by the tests themselves."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import fsspec

from fastload.testing import S3Server

_BUCKETS = itertools.count()


def new_bucket(s3: S3Server) -> str:
    """A bucket of its own for one test (moto keeps its buckets for the server's life)."""
    name = f"test-{next(_BUCKETS):04d}"
    s3.make_bucket(name)
    return name


def upload(folder: Path, url: str, options: dict[str, Any]) -> None:
    """Put every file of ``folder`` under the prefix ``url``, as any S3 client would."""
    fs, path = fsspec.core.url_to_fs(url, **options)
    for file in sorted(folder.iterdir()):
        if file.is_file():
            fs.put_file(str(file), f"{path}/{file.name}")


def uploaded(s3: S3Server, folder: Path) -> str:
    """``folder``'s files under a prefix of a new bucket; the prefix's URL."""
    url = f"s3://{new_bucket(s3)}/n"
    upload(folder, url, s3.storage_options())
    return url
