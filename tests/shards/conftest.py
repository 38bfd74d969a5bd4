"""What the remote-shard tests share: one S3 server on loopback per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fastload.loopback import S3Server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server
