"""Two real gloo ranks read the same S3 shards through one shared cache folder: each sample once
per epoch, each shard downloaded once for both, and a state taken mid-epoch resumed exactly."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from images import jpeg_bytes, photo
from ranks import run_ranks
from remotes import new_bucket, upload
from shardsets import tar_of

import fastload
from fastload.testing import FaultProxy, S3Server

SAMPLES = [7, 8, 6, 9, 7, 5]  # 42

_RANK = textwrap.dedent(
    """
    import json, os, sys

    import torch
    import torch.distributed as dist

    import fastload
    from fastload import transforms as T

    url, options, cache, out, phase, state_file = sys.argv[1:7]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = fastload.ImageShards(
        url, T.CenterCrop(16), storage_options=json.loads(options), cache_dir=cache
    )
    # one span for the epoch: both ranks read every shard (the most a cache can share)
    sampler = fastload.ShardSampler(
        dataset, window=2, seed=5, partitions=1 if phase == "epoch" else None
    )
    loader = fastload.DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=2)
    seen = []
    if phase == "epoch":
        seen = [y for _, labels in loader for y in labels.tolist()]
    elif phase == "first":
        for step, (_, labels) in enumerate(loader):
            seen += labels.tolist()
            if step + 1 == 4:
                break
        if rank == 0:
            torch.save(loader.state_dict(), state_file)
    else:
        loader.load_state_dict(torch.load(state_file, weights_only=True))
        seen = [y for _, labels in loader for y in labels.tolist()]
    counters = dataset.cache.remote.counters
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"seen": seen, "bytes": counters.bytes}, f)
    dist.barrier()
    dist.destroy_process_group()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


def _shards(folder: Path) -> None:
    """Like ``numbered_shards``, with photos large enough that a shard outweighs every
    request's headers together."""
    number = 0
    for k, size in enumerate(SAMPLES):
        members = []
        for _ in range(size):
            photo_ = jpeg_bytes(photo(160, 120, seed=number))
            members += [(f"{number:05d}.cls", str(number).encode()), (f"{number:05d}.jpg", photo_)]
            number += 1
        tar_of(folder / f"n{k:03d}.tar", members)


@pytest.fixture(scope="module")
def bucket_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("numbered")
    _shards(folder)
    fastload.ImageShards(folder)  # the indexes, uploaded beside the shards
    with S3Server() as s3, FaultProxy(s3.endpoint) as proxy:
        url = f"s3://{new_bucket(s3)}/n"
        upload(folder, url, s3.storage_options())
        yield (
            url,
            s3.storage_options(proxy.url),
            proxy,
            sorted(p.stat().st_size for p in folder.glob("*.tar")),
        )


def _run(tmp_path: Path, bucket_url: Any, phase: str, cache: Path) -> list[dict]:
    url, options, _, _ = bucket_url
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    out, state = tmp_path / phase, tmp_path / "state.pt"
    args = [url, json.dumps(options), str(cache), str(out), phase, str(state)]
    run_ranks(script, lambda rank: args)
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(2)]


def test_two_ranks_share_one_cache_and_read_each_sample_once(
    tmp_path: Path, bucket_url: Any
) -> None:
    _, _, proxy, sizes = bucket_url
    before = proxy.forwarded
    ranks = _run(tmp_path, bucket_url, "epoch", tmp_path / "cache")
    a, b = (r["seen"] for r in ranks)
    assert len(a) == len(b) == 21 and set(a).isdisjoint(b)
    assert sorted(a + b) == list(range(42))
    # every byte the server sent, headers and indexes included: less than one more shard
    sent = proxy.forwarded - before
    assert sum(sizes) <= sent < sum(sizes) + sizes[0], (sent, sizes)


def test_two_ranks_resume_mid_epoch_exactly(tmp_path: Path, bucket_url: Any) -> None:
    first = _run(tmp_path, bucket_url, "first", tmp_path / "cache")
    taken = [y for r in first for y in r["seen"]]
    assert len(taken) == 2 * 4 * 2 and len(set(taken)) == len(taken)
    rest = _run(tmp_path, bucket_url, "rest", tmp_path / "cache")
    resumed = [y for r in rest for y in r["seen"]]
    assert len(rest[0]["seen"]) == len(rest[1]["seen"])
    assert sorted(taken + resumed) == list(range(42))
