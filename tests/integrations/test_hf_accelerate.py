"""fastload loaders under Hugging Face Accelerate: ``fastload.integrations.hf_accelerate``.

Each case runs ``accelerate_run.py`` as a user's script (two gloo ranks where the case is
distributed, started as ``accelerate launch`` / torchrun start them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import HERE, SAMPLES, read_ranks, run_script
from ranks import run_ranks

pytest.importorskip("accelerate", reason='pip install "fastload[dev]" installs accelerate')

CONFIGS = ("plain", "batch_ops", "accelerate", "nvimgcodec", "dali")
NORMALIZED = ("batch_ops", "accelerate")


def flat(record: dict) -> list[int]:
    return [label for batch in record["labels"] for label in batch]


@pytest.mark.parametrize("config", CONFIGS)
def test_prepare_keeps_the_loader_and_resumes_it_mid_epoch(
    indexed: Path, tmp_path: Path, config: str
) -> None:
    out = tmp_path / "seen"
    run_script("accelerate_run.py", str(indexed), str(out), "resume", config)
    (seen,) = read_ranks(out, 1)
    first, second = seen["epochs"]
    # prepared, the loader delivers what it delivers unprepared: same samples, same pixels
    assert first["labels"] == seen["reference"]["labels"]
    assert first["sums"] == seen["reference"]["sums"]
    assert sorted(flat(first)) == list(range(SAMPLES))
    if config in NORMALIZED:
        assert first["dtype"] == "torch.float32" and -2 <= first["min"] < first["max"] <= 2
    else:
        assert first["dtype"] == "torch.uint8" and first["max"] > 2
    if config == "accelerate":
        assert "accelerated" in seen["explain"]
    # save_state after three batches, load_state in fresh objects: the rest, exactly
    resumed_first, resumed_second = seen["resumed"]
    assert resumed_first["labels"] == first["labels"][3:]
    assert resumed_first["sums"] == first["sums"][3:]
    assert resumed_second["labels"] == second["labels"]
    assert resumed_second["sums"] == second["sums"]


@pytest.mark.parametrize("config", ["batch_ops", "dali"])
def test_accelerates_own_prepare_warns_what_it_loses(
    indexed: Path, tmp_path: Path, config: str
) -> None:
    out = tmp_path / "seen"
    run_script("accelerate_run.py", str(indexed), str(out), "plain", config)
    (seen,) = read_ranks(out, 1)
    assert seen["class"] == "DataLoaderShard"  # torch's loader, rebuilt by Accelerate
    (warning,) = seen["warnings"]
    lost = "the batch ops (Normalize" if config == "batch_ops" else "the dali executor"
    assert lost in warning and "fastload.integrations.hf_accelerate.prepare" in warning
    # which is why: what Accelerate's rebuild delivers is not what the loader delivers
    assert seen["epoch"]["dtype"] == "torch.uint8"


def test_prepare_shards_between_processes_and_reshuffles(indexed: Path, tmp_path: Path) -> None:
    out = tmp_path / "seen"
    run_ranks(
        HERE / "accelerate_run.py", lambda rank: [str(indexed), str(out), "shard", "batch_ops"]
    )
    ranks = read_ranks(out, 2)
    assert [seen["processes"] for seen in ranks] == [2, 2]
    assert [seen["len"] for seen in ranks] == [4, 4]
    for epoch in range(2):
        shards = [flat(seen["epochs"][epoch]) for seen in ranks]
        assert [len(s) for s in shards] == [SAMPLES // 2] * 2
        assert sorted(shards[0] + shards[1]) == list(range(SAMPLES))
    firsts = [flat(seen["epochs"][0]) for seen in ranks]
    seconds = [flat(seen["epochs"][1]) for seen in ranks]
    assert firsts != seconds  # the next epoch is another shuffle


def test_skip_first_batches_keeps_a_fastload_loader_and_gives_the_rest(indexed: Path) -> None:
    """Accelerate's skip_first_batches (what transformers' Trainer resumes mid-epoch with)
    on a fastload loader: a fastload loader of the same options, whose epoch is the rest of
    the original's, the first batches passed over unread."""
    import torch

    import fastload
    from fastload.integrations.hf_accelerate import skip_first_batches

    def loader() -> fastload.DataLoader:
        generator = torch.Generator().manual_seed(3)
        return fastload.DataLoader(
            fastload.ImageFolder(indexed, fastload.transforms.CenterCrop(32)),
            batch_size=4,
            shuffle=True,
            generator=generator,
            accelerate=True,
        )

    whole = [labels.tolist() for _, labels in loader()]
    skipped = skip_first_batches(loader(), 3)
    assert isinstance(skipped, fastload.DataLoader)
    assert len(skipped) == len(whole) - 3
    assert [labels.tolist() for _, labels in skipped] == whole[3:]
    with pytest.raises(ValueError, match="resume it with its state_dict"):
        skip_first_batches(fastload.DataLoader(skipped.dataset, batch_size=None), 1)


def test_a_seedable_accelerator_draws_the_order_accelerates_own_loader_draws(
    indexed: Path,
) -> None:
    """Accelerate's use_seedable_sampler (on in transformers' Trainer): a fastload loader
    prepared fastload's way shuffles in the order Accelerate's own prepared loader does,
    epoch after epoch, and set_epoch moves it as it moves theirs."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    import fastload
    from fastload.integrations.hf_accelerate import prepare

    torch.manual_seed(5)
    accelerator = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True)
    )
    dataset = fastload.ImageFolder(indexed, fastload.transforms.CenterCrop(32))
    theirs = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True))
    ours = prepare(accelerator, fastload.DataLoader(dataset, batch_size=8, shuffle=True))

    def epoch(loader) -> list[int]:
        return [label for _, labels in loader for label in labels.tolist()]

    assert [epoch(ours) for _ in range(2)] == [epoch(theirs) for _ in range(2)]
    theirs.set_epoch(7)
    ours.set_epoch(7)
    assert epoch(ours) == epoch(theirs)
