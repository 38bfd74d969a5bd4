"""Exact, elastic resume through Ray Train: an epoch stopped under one number of training
workers, its state taken on rank 0, and the rest of it run under another number, on Ray
Data, every sample once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import fastload
from fastload import transforms as T
from fastload.synthetic import make_image_folder

SAMPLES = 42  # after 3 batches of 2 a rank, the rest splits evenly under 1 or 2 workers
STEPS = 3


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards whose every sample's label is its number."""
    root = tmp_path_factory.mktemp("elastic")
    photos = make_image_folder(root / "set", images=SAMPLES, classes=3)
    paths = sorted(str(p) for p in photos.rglob("*.jpg"))
    fastload.pack(
        fastload.ImageList(paths, list(range(len(paths)))), root / "shards", shard_size=16 * 1024
    )
    return root / "shards"


def _train_loop(config: dict[str, Any]) -> None:
    """Each training worker: a ShardSampler taking its rank from torch.distributed (Ray
    Train set it up), the epoch on Ray Data; "first" stops after a few steps and rank 0 saves
    the loader's state, "rest" loads it and runs the epoch to its end."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    dataset = fastload.ImageShards(config["shards"], T.CenterCrop(16))
    sampler = fastload.ShardSampler(dataset, window=2, seed=11)
    loader = fastload.DataLoader(dataset, batch_size=2, sampler=sampler)
    if config["phase"] == "rest":
        loader.load_state_dict(torch.load(config["state"], weights_only=True))
    seen: list[int] = []
    for step, (_, labels) in enumerate(
        fastload.ray.batches(fastload.ray.epoch_dataset(loader), loader)
    ):
        seen += labels.tolist()
        if config["phase"] == "first" and step + 1 == STEPS:
            break
    if config["phase"] == "first" and rank == 0:
        torch.save(loader.state_dict(), config["state"])
    Path(config["out"], f"{config['phase']}{rank}.json").write_text(json.dumps(seen))


def _fit(workers: int, phase: str, numbered: Path, out: Path) -> list[list[int]]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    config = {"shards": str(numbered), "out": str(out), "phase": phase}
    config["state"] = str(out / "state.pt")
    TorchTrainer(
        _train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"trainer": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=str(out / "runs")),
    ).fit()
    return [json.loads((out / f"{phase}{r}.json").read_text()) for r in range(workers)]


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_the_rest_of_an_epoch_under_another_number_of_training_workers(
    local_ray: Any, numbered: Path, tmp_path: Path, before: int, after: int
) -> None:
    first = _fit(before, "first", numbered, tmp_path)
    taken = [label for rank in first for label in rank]
    assert len(taken) == STEPS * 2 * before and len(set(taken)) == len(taken)
    rest = _fit(after, "rest", numbered, tmp_path)
    assert len({len(rank) for rank in rest}) == 1  # every worker the same number
    resumed = [label for rank in rest for label in rank]
    assert sorted(taken + resumed) == list(range(SAMPLES))  # each sample once, none replayed
