"""Remote shards through the public API, against real servers on loopback: moto's S3 server and
``http.server``; the bytes of every sample against the same pack read locally."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import torch
from remotes import new_bucket, upload, uploaded
from shardsets import class_folder
from test_sampler import numbered_shards

import fastload
from fastload import transforms as T
from fastload.shards.storage.cache import ShardCache
from fastload.shards.storage.remote import Remote
from fastload.testing import FaultProxy, HTTPServer, S3Server


@pytest.fixture(scope="module")
def s3() -> Any:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("remote")
    source = class_folder(root / "photos", classes=3, per_class=10, size=96)
    fastload.pack(source, root / "pack", shard_size=120_000, progress=False)
    return root / "pack"


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("numbered")
    numbered_shards(folder, [7, 9, 6, 8, 5, 7])  # 42 samples, label = position
    return folder


def _same_samples(remote: fastload.ImageShards, local: fastload.ImageShards) -> None:
    assert len(remote) == len(local) > 0
    for i in range(len(local)):
        assert remote.read_sample(i) == local.read_sample(i)


def test_a_pack_uploaded_to_s3_reads_as_the_local_one(
    s3: S3Server, pack: Path, tmp_path: Path
) -> None:
    url = f"s3://{new_bucket(s3)}/train"
    fastload.pack(
        pack.parent / "photos",
        url,
        shard_size=120_000,
        storage_options=s3.storage_options(),
        progress=False,
    )
    remote = fastload.ImageShards(
        url, T.CenterCrop(32), storage_options=s3.storage_options(), cache_dir=tmp_path / "cache"
    )
    local = fastload.ImageShards(pack, T.CenterCrop(32))
    assert remote.classes == local.classes and remote.manifest == local.manifest
    _same_samples(remote, local)
    image, label = remote[5]
    assert torch.equal(image, local[5][0]) and label == local[5][1]
    # the manifest went up last, beside every shard and index it lists
    fs = fsspec.filesystem("s3", **s3.storage_options())
    names = {p.rsplit("/", 1)[1] for p in fs.ls(url)}
    assert names == set(os.listdir(pack))
    with pytest.raises(FileExistsError, match="already holds a complete pack"):
        fastload.pack(pack.parent / "photos", url, storage_options=s3.storage_options())


def test_the_manifest_url_a_prefix_without_one_and_a_list_of_urls(
    s3: S3Server, numbered: Path, tmp_path: Path
) -> None:
    options = s3.storage_options()
    bucket = new_bucket(s3)
    upload(numbered, f"s3://{bucket}/plain", options)
    local = fastload.ImageShards(numbered)
    listed = fastload.ImageShards(
        f"s3://{bucket}/plain", storage_options=options, cache_dir=tmp_path / "a"
    )
    _same_samples(listed, local)  # no index up there: each shard scanned once, in the cache
    urls = [f"s3://{bucket}/plain/n{k:03d}.tar" for k in range(6)]
    from_list = fastload.ImageShards(urls, storage_options=options, cache_dir=tmp_path / "a")
    assert from_list.labels.tolist() == list(range(42))


def test_http_brace_pattern_reads_as_local(numbered: Path, tmp_path: Path) -> None:
    with HTTPServer(numbered) as server:
        url = server.url + "/n{000..005}.tar"
        remote = fastload.ImageShards(url, cache_dir=tmp_path / "cache")
        _same_samples(remote, fastload.ImageShards(numbered))


@contextlib.contextmanager
def plain_http_server(folder: Path) -> Iterator[str]:
    """Python's own ``http.server`` file handler, unchanged (it ignores ``Range`` and answers
    200 with the whole file), on loopback; its URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_without_ranges_serves_a_pack_each_shard_downloaded_once(
    pack: Path, tmp_path: Path
) -> None:
    local = fastload.ImageShards(pack)
    with plain_http_server(pack) as url:
        remote = fastload.ImageShards(url + "/", T.CenterCrop(16), cache_dir=tmp_path / "cache")
        _same_samples(remote, local)
        assert remote.cache is not None
        counters = remote.cache.remote.counters
        assert remote.cache.remote.ignores_ranges(url + "/shard-000000.tar")
        loader = fastload.DataLoader(remote, batch_size=4, num_workers=2)
        assert len(_epoch(loader)) == len(local)  # workers read the cached shards
    # no error, no retry: the manifest, each index and each shard crossed the link once
    assert counters.retries == 0 and counters.failures == 0
    assert counters.bytes == sum(f.stat().st_size for f in pack.iterdir())


def test_a_server_without_ranges_through_fsspecs_client_and_a_small_cache(
    pack: Path, tmp_path: Path
) -> None:
    local = fastload.ImageShards(pack)
    shard = pack / "shard-000001.tar"
    with plain_http_server(pack) as url:
        # a whole shard through fsspec's client: the ranged answer was the whole object
        cache = ShardCache(tmp_path / "a", None, Remote("http", None, 60, plain_gets=False))
        cache.fetch(f"{url}/{shard.name}", shard.stat().st_size)
        assert Path(cache.path(f"{url}/{shard.name}")).read_bytes() == shard.read_bytes()
        # a cache smaller than the pack and an order that is not shard-aware: the first sample
        # is a ranged read that got the whole shard (its part taken), then shards come whole
        small = fastload.ImageShards(url, cache_dir=tmp_path / "b", cache_limit=1)
        assert "each sample not cached is one ranged request" in small.reading()
        _same_samples(small, local)
        assert small.cache is not None and small.cache.remote.counters.retries == 0


def test_a_folder_of_shards_on_a_plain_server_is_sized_by_one_request_each(
    numbered: Path, tmp_path: Path
) -> None:
    with plain_http_server(numbered) as url:  # its index page lists names, no sizes
        remote = fastload.ImageShards(url, cache_dir=tmp_path / "cache")
        _same_samples(remote, fastload.ImageShards(numbered))
    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / "n000.tgz").write_bytes(gzip.compress((numbered / "n000.tar").read_bytes()))
    with (
        plain_http_server(packed) as url,
        pytest.raises(ValueError, match=r"n000\.tgz' is not a \.tar shard: .*decompress"),
    ):
        fastload.ImageShards(f"{url}/n000.tgz", cache_dir=tmp_path / "cache")


def test_remote_options_on_local_shards_are_refused(numbered: Path) -> None:
    with pytest.raises(ValueError, match="cache_limit apply to remote shards"):
        fastload.ImageShards(numbered, cache_limit=10)
    with pytest.raises(ValueError, match="must all be in one place"):
        fastload.ImageShards([str(numbered / "n000.tar"), "s3://b/x.tar"])


def _epoch(loader: fastload.DataLoader) -> list[int]:
    return [y for _, labels in loader for y in labels.tolist()]


def test_later_epochs_read_from_the_cache_with_the_server_gone(
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
        sampler = fastload.ShardSampler(dataset, window=2, seed=1)
        loader = fastload.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2)
        assert "ahead of ShardSampler's order" in fastload.explain(loader)
        assert sorted(_epoch(loader)) == list(range(42))
        proxy.refuse(3600)  # nothing reaches the server any more
        sampler.set_epoch(1)
        assert sorted(_epoch(loader)) == list(range(42))


def _usage_during(loader: fastload.DataLoader, cache: ShardCache) -> tuple[list[int], int]:
    seen, most = [], 0
    for _, labels in loader:
        seen += labels.tolist()
        most = max(most, cache.usage())
    return seen, most


def test_the_cache_stays_within_its_limit_plus_one_shard(
    s3: S3Server, numbered: Path, tmp_path: Path
) -> None:
    url = uploaded(s3, numbered)
    sizes = [p.stat().st_size for p in sorted(numbered.glob("*.tar"))]
    limit = int(2.5 * max(sizes))
    dataset = fastload.ImageShards(
        url,
        T.CenterCrop(16),
        storage_options=s3.storage_options(),
        cache_dir=tmp_path / "cache",
        cache_limit=limit,
    )
    assert dataset.cache is not None
    sampler = fastload.ShardSampler(dataset, window=1, seed=3)
    loader = fastload.DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=2)
    assert "within the limit" in fastload.explain(loader)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen, most = _usage_during(loader, dataset.cache)
        assert sorted(seen) == list(range(42))
        assert most <= limit + max(sizes)
    # a random order is not shard-aware: samples not cached are ranged reads, nothing is added
    random = fastload.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2)
    assert "one ranged request" in fastload.explain(random)
    seen, most = _usage_during(random, dataset.cache)
    assert sorted(seen) == list(range(42)) and most <= limit


def test_processes_sharing_a_cache_download_each_shard_once(numbered: Path, tmp_path: Path) -> None:
    script = tmp_path / "read.py"
    script.write_text(
        "import sys, fastload\n"
        "ds = fastload.ImageShards(sys.argv[1], cache_dir=sys.argv[2])\n"
        "loader = fastload.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2)\n"
        "print(sorted(y for _, b in loader for y in b.tolist()) == list(range(42)))\n"
    )
    with HTTPServer(numbered) as server:
        url = server.url + "/n{000..005}.tar"
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), url, str(tmp_path / "cache")],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [p.communicate(timeout=300)[0].strip() for p in procs]
        served = dict(server.served)
    assert outputs == ["True", "True"]
    for shard in sorted(numbered.glob("*.tar")):  # 2 processes x 2 workers, one download each
        assert served[f"/{shard.name}"] == shard.stat().st_size


def test_a_download_killed_midway_is_never_taken_for_whole(numbered: Path, tmp_path: Path) -> None:
    shard = numbered / "n001.tar"
    with HTTPServer(numbered) as server, FaultProxy(server.url, rate=20_000) as proxy:
        url = f"{proxy.url}/{shard.name}"
        code = (
            "import sys; from fastload.shards.storage.cache import ShardCache;"
            "from fastload.shards.storage.remote import Remote;"
            f"ShardCache({str(tmp_path / 'cache')!r}, None, Remote('http', None, 60))"
            f".fetch({url!r}, {shard.stat().st_size})"
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            _wait_for(lambda: any(".part-" in n for n in _names(tmp_path / "cache")))
        finally:
            child.kill()
            child.wait()
        cache = ShardCache(tmp_path / "cache", None, Remote("http", None, 60))
        assert not cache.cached(url, shard.stat().st_size)
        proxy.rate = None
        cache.fetch(url, shard.stat().st_size)
    assert Path(cache.path(url)).read_bytes() == shard.read_bytes()
    assert not [n for n in _names(tmp_path / "cache") if ".part-" in n]


def _names(folder: Path) -> list[str]:
    return os.listdir(folder) if folder.exists() else []


def _wait_for(condition: Any, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.02)


def test_a_full_disk_is_one_clear_error(numbered: Path, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)], capture_output=True
        ).returncode
    ):
        pytest.skip("a small file system needs root to mount (CI runs as root)")
    try:
        big = max(numbered.glob("*.tar"), key=lambda p: p.stat().st_size)
        assert big.stat().st_size > 16 * 1024
        with HTTPServer(numbered) as server:
            cache = ShardCache(small, None, Remote("http", None, 60))
            with pytest.raises(OSError, match=r"disk of the shard cache .* is full"):
                cache.fetch(f"{server.url}/{big.name}", big.stat().st_size)
        assert not [n for n in os.listdir(small) if ".part-" in n]
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_fastload_pack_uploads_from_the_command_line(
    s3: S3Server, pack: Path, tmp_path: Path
) -> None:
    url = f"s3://{new_bucket(s3)}/cli"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastload",
            "pack",
            str(pack.parent / "photos"),
            url,
            "--shard-size",
            "120000",
            "--storage-options",
            json.dumps(s3.storage_options()),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    remote = fastload.ImageShards(
        url, storage_options=s3.storage_options(), cache_dir=tmp_path / "c"
    )
    assert np.array_equal(remote.labels, fastload.ImageShards(pack).labels)


def test_a_missing_remote_library_names_the_install_command(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"  # as if it were not installed
        "import fastload\n"
        "try:\n"
        "    fastload.ImageShards('s3://bucket/pack', cache_dir=sys.argv[1])\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert 'install it with: pip install "fastload[remote]"' in done.stdout, done.stderr
    assert "s3://" in done.stdout
