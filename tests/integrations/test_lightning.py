"""fastload loaders inside PyTorch Lightning: what Lightning rebuilds stays fastload's.

Each case runs ``lightning_run.py`` as a user's script would run (two gloo ranks on the CPU
where the case is distributed) and checks what each rank saw: its shard, the value range of
its batches and the loader's options after Lightning rebuilt it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import SAMPLES, read_ranks, run_script

pytest.importorskip("lightning", reason='pip install "fastload[dev]" installs lightning')

CONFIGS = ("plain", "batch_ops", "accelerate", "nvimgcodec", "dali")
# the value range each configuration delivers: uint8 pixels, or normalized once
# ((x / 255 - 0.5) / 0.25 lies in [-2, 2]; normalized twice it would lie near -2)
RANGES = {
    "plain": (0, 255),
    "batch_ops": (-2.0, 2.0),
    "accelerate": (-2.0, 2.0),
    "nvimgcodec": (0, 255),
    "dali": (0, 255),
}


def labels(seen: dict) -> list[int]:
    return [label for batch in seen["labels"] for label in batch]


def check_rank(seen: dict, config: str) -> None:
    low, high = RANGES[config]
    assert low <= seen["min"] and seen["max"] <= high, (seen["min"], seen["max"])
    assert seen["max"] - seen["min"] > (high - low) / 4  # spread over the range, not squashed
    loader = seen["loader"]
    assert loader["class"] == "DataLoader" and loader["sampler"] == "DistributedSampler"
    assert loader["len"] == 4  # this rank's 15 samples in batches of 4
    if config == "batch_ops":
        assert loader["batch_transforms"] == "Normalize"
    if config == "accelerate":
        assert loader["accelerate"] is True and loader["accelerated"]
    if config in ("nvimgcodec", "dali"):
        assert loader["backend"] == config and loader["plan"] == "ExecutorPlan"
        assert loader["device"] == "cpu"


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("mode", ["lazy", "eager", "fit", "spawn"])
def test_ddp_reads_each_rank_its_shard_once(
    indexed: Path, tmp_path: Path, mode: str, config: str
) -> None:
    """lazy: the loader class created inside Lightning's hook; eager: before it; fit: a loader
    built before ``trainer.fit(model, loader)``; spawn: the same, under ``ddp_spawn``."""
    out = tmp_path / "seen"
    run_script("lightning_run.py", str(indexed), str(out), mode, config)
    ranks = read_ranks(out, 2)
    shards = [labels(seen) for seen in ranks]
    assert [len(s) for s in shards] == [SAMPLES // 2] * 2  # no rank reads the whole set
    assert sorted(shards[0] + shards[1]) == list(range(SAMPLES))  # and together, all of it
    for seen in ranks:
        check_rank(seen, config)


def test_predict_through_lightnings_index_wrapper(indexed: Path, tmp_path: Path) -> None:
    # Lightning wraps the batch sampler to record each batch's indices for predictions
    out = tmp_path / "seen"
    run_script("lightning_run.py", str(indexed), str(out), "predict", "plain")
    (seen,) = read_ranks(out, 1)
    assert labels(seen) == list(range(SAMPLES))


@pytest.mark.parametrize("config", ["plain", "generator"])
def test_a_checkpoint_mid_epoch_resumes_the_loader_exactly(
    indexed: Path, tmp_path: Path, config: str
) -> None:
    out = tmp_path / "run"
    run_script("lightning_run.py", str(indexed), f"{out}.save", "save", config)
    run_script("lightning_run.py", str(indexed), f"{out}.resume", "resume", config)
    whole = read_ranks(Path(f"{out}.save"), 1)[0]["labels"]
    resumed = read_ranks(Path(f"{out}.resume"), 1)[0]["labels"]
    epoch = len(whole) // 2
    # saved after the first epoch's third batch: the rest of that epoch, exactly
    assert resumed[: epoch - 3] == whole[3:epoch]
    if config == "generator":
        # the loader's own stream is in its state, so the next epochs are the same too;
        # torch's global stream is the script's (Lightning does not restore it)
        assert resumed == whole[3:]
