"""Real gloo ranks read shards through fastload.DataLoader and ShardSampler: disjoint equal
shares, and a state taken on rank 0 mid-epoch that another world size resumes exactly."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from ranks import run_ranks
from test_sampler import numbered_shards

SAMPLES = [7, 8, 6, 9, 7, 5]  # 42: the rest after 3 batches of 2 per rank splits evenly below

_RANK = textwrap.dedent(
    """
    import json, os, sys

    import torch
    import torch.distributed as dist

    import fastload
    from fastload import transforms as T

    shards, out, phase, state_file, steps = sys.argv[1:6]
    world = int(os.environ["WORLD_SIZE"])
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    dataset = fastload.ImageShards(shards, T.CenterCrop(16))
    sampler = fastload.ShardSampler(dataset, window=2, seed=11)  # ranks from torch.distributed
    if phase == "ddp":  # torch's own DistributedSampler on the shards
        sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=3)
    loader = fastload.DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=1)
    seen = []
    if phase == "ddp":
        seen = [y for _, labels in loader for y in labels.tolist()]
    elif phase == "first":
        for step, (_, labels) in enumerate(loader):
            seen += labels.tolist()
            if step + 1 == int(steps):
                break
        if rank == 0:
            torch.save(loader.state_dict(), state_file)
    else:
        loader.load_state_dict(torch.load(state_file, weights_only=True))
        sampler.set_epoch(0)
        seen = [y for _, labels in loader for y in labels.tolist()]
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump({"seen": seen, "len": len(sampler)}, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("numbered")
    numbered_shards(folder, SAMPLES)
    return folder


def _run(script: Path, shards: Path, out: Path, phase: str, state: Path, *, world: int) -> list:
    steps = 3
    run_ranks(script, lambda r: [str(shards), str(out), phase, str(state), str(steps)], world=world)
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3)])
def test_another_world_size_resumes_the_rest_of_the_epoch(
    shards: Path, tmp_path: Path, before: int, after: int
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    state = tmp_path / "state.pt"
    first = _run(script, shards, tmp_path / "first", "first", state, world=before)
    taken = [y for r in first for y in r["seen"]]
    assert len(taken) == 3 * 2 * before and len(set(taken)) == len(taken)
    if before > 1:
        assert set(first[0]["seen"]).isdisjoint(first[1]["seen"])
        assert first[0]["len"] == first[1]["len"] == sum(SAMPLES) // before
    rest = _run(script, shards, tmp_path / "rest", "rest", state, world=after)
    resumed = [y for r in rest for y in r["seen"]]
    assert len({len(r["seen"]) for r in rest}) == 1  # every rank the same number
    assert sorted(taken + resumed) == list(range(sum(SAMPLES)))  # each sample exactly once


def test_distributed_sampler_splits_the_shards_as_for_any_dataset(
    shards: Path, tmp_path: Path
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    ranks = _run(script, shards, tmp_path / "ddp", "ddp", tmp_path / "unused", world=2)
    a, b = (r["seen"] for r in ranks)
    assert len(a) == len(b) == sum(SAMPLES) // 2
    assert set(a).isdisjoint(b) and sorted(a + b) == list(range(sum(SAMPLES)))
