"""Faults of remote storage, made by a real proxy on loopback in front of real servers: a
server gone for a while, a stalled transfer, a shard gone for good, a shard whose bytes are not
the manifest's. Nothing here waits on a clock to decide: each fault is set before the request
it hits, and let go once the retry it causes has been counted."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from remotes import new_bucket, uploaded
from test_sampler import numbered_shards

import fastload
from fastload import transforms as T
from fastload.errors import ImageDecodeError, UnreadableImageWarning
from fastload.shards.storage import remote as remotes
from fastload.shards.storage.remote import RemoteError
from fastload.testing import FaultProxy, HTTPServer, S3Server


@pytest.fixture(scope="module")
def s3() -> Any:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("numbered")
    numbered_shards(folder, [7, 9, 6, 8, 5, 7])  # 42 samples, label = position
    fastload.ImageShards(folder)  # which writes each shard's index beside it, uploaded with it
    return folder


def _when(condition: Any, then: Any) -> threading.Thread:
    """Run ``then`` once ``condition`` holds (polled), in a thread."""

    def wait() -> None:
        deadline = time.monotonic() + 120
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        then()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def _labels(dataset: fastload.ImageShards) -> list[int]:
    loader = fastload.DataLoader(dataset, batch_size=4, sampler=fastload.ShardSampler(dataset))
    return sorted(y for _, labels in loader for y in labels.tolist())


def test_a_server_gone_for_a_while_costs_nothing_once_it_is_back(
    s3: S3Server, numbered: Path, tmp_path: Path
) -> None:
    url = uploaded(s3, numbered)
    with FaultProxy(s3.endpoint) as proxy:
        dataset = fastload.ImageShards(
            url,
            T.CenterCrop(16),
            storage_options=s3.storage_options(proxy.url),
            cache_dir=tmp_path / "cache",
        )
        assert dataset.cache is not None
        counters = dataset.cache.remote.counters
        proxy.refuse(3600)  # gone: every connection reset, every new one closed
        _when(lambda: counters.retries >= 2, lambda: proxy.refuse(0))
        assert _labels(dataset) == list(range(42))  # workers=0: the counters are this process's
        assert counters.retries >= 2 and counters.failures == 0


def test_a_stalled_transfer_times_out_and_is_retried(numbered: Path, tmp_path: Path) -> None:
    with HTTPServer(numbered) as server, FaultProxy(server.url) as proxy:
        dataset = fastload.ImageShards(
            proxy.url + "/n{000..005}.tar", cache_dir=tmp_path / "cache", timeout=0.5
        )
        assert dataset.cache is not None
        counters = dataset.cache.remote.counters
        proxy.stall()  # connections stay open, no byte moves: only a timeout can end a request
        _when(lambda: counters.retries >= 1, proxy.resume)
        assert _labels(dataset) == list(range(42))
        assert counters.retries >= 1


def test_a_server_that_never_answers_costs_two_timeouts_a_shard_and_says_so(
    numbered: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with HTTPServer(numbered) as server, FaultProxy(server.url) as proxy:
        urls = [f"{proxy.url}/n{k:03d}.tar" for k in range(6)]
        proxy.stall()  # connections accepted, never answered: the HEADs that size the shards
        with (
            caplog.at_level(logging.WARNING, logger="fastload"),
            pytest.raises(RemoteError) as raised,
        ):
            fastload.ImageShards(urls, timeout=0.5, cache_dir=tmp_path / "a")
        message = str(raised.value)
        assert re.fullmatch(
            rf"cannot look up '{re.escape(proxy.url)}/n00\d\.tar' after 2 tries over [\d.]+ s: "
            r"no answer within timeout=0\.5 s \(\w+\); 2 requests for it stalled, and 2 stalls "
            r"fail it",
            message,
        ), message
        retried = [r.getMessage() for r in caplog.records if r.name == "fastload"]
        # each shard's one retry, logged once with its cause
        assert sorted(m.split("'")[1] for m in retried) == urls
        assert all("(try 2 of 7)" in m and "no answer within timeout=0.5 s" in m for m in retried)

        proxy.resume()
        dataset = fastload.ImageShards(urls, timeout=0.5, cache_dir=tmp_path / "b")
        proxy.stall()  # now the download of a shard stalls: two stalls, not seven tries
        with pytest.raises(ImageDecodeError) as raised:
            dataset[0]
        message = str(raised.value)
        assert message.startswith(f"cannot read '{urls[0]}:") and "from its storage: " in message
        assert "backend" not in message and "after 2 tries over" in message
        assert isinstance(raised.value.__cause__, RemoteError)
        proxy.resume()


def test_a_shard_that_stays_unreadable_is_one_error_naming_it(
    s3: S3Server, numbered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remotes, "RETRY_DELAYS", (0.01, 0.01))
    url = uploaded(s3, numbered)
    with FaultProxy(s3.endpoint) as proxy:
        dataset = fastload.ImageShards(
            url,
            storage_options=s3.storage_options(proxy.url),
            cache_dir=tmp_path / "cache",
        )
        proxy.refuse(3600)
        with pytest.raises(RemoteError, match=rf"cannot read '{url}/n00.\.tar' after 3 tries"):
            dataset.read_sample(0)
        with pytest.raises(RemoteError, match="after 3 tries"):  # remembered: fails at once
            dataset.read_sample(1)
        assert dataset.cache is not None and dataset.cache.remote.counters.failures == 1
        # through the decode path: worded as storage, never as decoding; the cause chained
        with pytest.raises(ImageDecodeError) as raised:
            dataset[2]
        assert re.fullmatch(
            rf"cannot read '{url}/n000\.tar:\w+\.jpg' from its storage: RemoteError: cannot "
            rf"read '{url}/n000\.tar' after 3 tries over [\d.]+ s: \w+: .*",
            str(raised.value),
        ), str(raised.value)
        assert isinstance(raised.value.__cause__, RemoteError)


def test_a_shard_deleted_after_the_listing_is_named_or_skipped(
    s3: S3Server, numbered: Path, tmp_path: Path
) -> None:
    options = s3.storage_options()
    prefix = uploaded(s3, numbered)
    made = {
        on_error: fastload.ImageShards(
            f"{prefix}/n{{000..005}}.tar",
            T.CenterCrop(16),
            storage_options=options,
            cache_dir=tmp_path / on_error,
            on_error=on_error,
        )
        for on_error in ("raise", "skip")
    }
    fsspec.filesystem("s3", **options).rm(f"{prefix}/n002.tar")  # samples 16 to 21
    with pytest.raises(ImageDecodeError) as raised:
        made["raise"][16]
    assert str(raised.value) == (
        f"cannot read {made['raise'].path(16)!r} from its storage: FileNotFoundError: no such "
        f"object: '{prefix}/n002.tar'"
    )
    assert isinstance(raised.value.__cause__, FileNotFoundError)
    with pytest.warns(UnreadableImageWarning):
        seen = _labels(made["skip"])
    assert seen == [y for y in range(42) if not 16 <= y < 22]
    assert sorted(made["skip"].bad_files) == [made["skip"].path(i) for i in range(16, 22)]


def test_bytes_that_are_not_the_manifests_are_refused(s3: S3Server, tmp_path: Path) -> None:
    from shardsets import class_folder

    options = s3.storage_options()
    url = f"s3://{new_bucket(s3)}/p"
    fastload.pack(
        class_folder(tmp_path / "photos"),
        url,
        shard_size=40_000,
        storage_options=options,
        progress=False,
    )
    fs = fsspec.filesystem("s3", **options)
    shard = url[len("s3://") :] + "/shard-000001.tar"
    data = bytearray(fs.cat_file(shard))
    data[-2000] ^= 0xFF  # same size, one byte changed (in the tar's end, read by no sample)
    fs.pipe_file(shard, bytes(data))
    dataset = fastload.ImageShards(url, storage_options=options, cache_dir=tmp_path / "cache")
    first = dataset.shard_sizes[0]
    with pytest.raises(RemoteError, match=r"its SHA-256 is .*, its manifest says"):
        dataset.read_sample(int(first))
    with pytest.raises(RemoteError, match="SHA-256"):  # remembered: no second download
        dataset.read_sample(int(first) + 1)
    assert not dataset.cache.cached(f"{url}/shard-000001.tar", len(data))


def test_which_failures_are_retried() -> None:
    import http.client

    import aiohttp

    from fastload.shards.storage.ranged import RangeStatusError

    def response_error(status: int) -> aiohttp.ClientResponseError:
        return aiohttp.ClientResponseError(None, (), status=status)  # type: ignore[arg-type]

    passing = [
        ConnectionResetError(),
        TimeoutError(),
        http.client.IncompleteRead(b""),
        response_error(503),
        response_error(429),
        RangeStatusError(500, "x"),
        OSError(5, "S3 said InternalError"),
    ]
    lasting = [
        FileNotFoundError(),
        PermissionError(),
        response_error(404),
        response_error(403),
        RangeStatusError(416, "x"),
        RemoteError("x"),
        ValueError(),
    ]
    assert [remotes.transient(e) for e in passing] == [True] * len(passing)
    assert [remotes.transient(e) for e in lasting] == [False] * len(lasting)
