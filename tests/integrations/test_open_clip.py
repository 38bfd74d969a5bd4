"""OpenCLIP's real training entry point (open_clip_torch's ``open_clip_train.main``, its own
model configs, tokenizer and preprocess, nothing downloaded) with fastload serving its
webdataset loader: one short epoch in one process and on two gloo ranks, and the ``DataInfo``
contract its training loop reads."""

from __future__ import annotations

import io
import itertools
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image
from ranks import run_ranks

import fastload
from fastload.integrations import open_clip as swap

SHARDS, PER_SHARD = 4, 24


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Image-text shards written by webdataset's TarWriter; caption ``k`` is ``"photo k"``,
    and one sample has no caption (OpenCLIP's own filter drops it)."""
    folder = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    for s in range(SHARDS):
        with wds.TarWriter(str(folder / f"pairs-{s:02d}.tar")) as writer:
            for k in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                out = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (72, 90, 3), dtype=np.uint8)).save(out, "JPEG")
                sample = {"__key__": f"{k:05d}", "jpg": out.getvalue()}
                if k != 5:
                    sample["txt"] = f"photo {k}"
                writer.write(sample)
    return str(folder / "pairs-{00..03}.tar")


ARGS = [
    "--dataset-type", "webdataset", "--model", "ViT-S-32-alt", "--force-image-size", "64",
    "--batch-size", "16", "--epochs", "1", "--workers", "2", "--precision", "fp32",
    "--device", "cpu", "--save-frequency", "0", "--report-to", "",
]  # fmt: skip


def _losses(log: str) -> list[float]:
    return [float(x) for x in re.findall(r" Loss: ([-\d.naninf]+) ", log)]


_RANK = """
import sys
from fastload.integrations import open_clip
open_clip.main(sys.argv[1:])
"""


def _args(shards: str, **changes: object) -> SimpleNamespace:
    fields = {"train_data": shards, "train_num_samples": None, "batch_size": 8, "workers": 0}
    return SimpleNamespace(**{**fields, "seed": 3, "world_size": 1, "rank": 0, **changes})


def _keys(info: object) -> list[str]:
    """The keys a DataInfo's epoch reads, through its sampler."""
    loader = info.dataloader  # type: ignore[attr-defined]
    dataset = loader.loader.dataset
    order = list(loader.loader.sampler)[: loader.num_batches * loader.loader.batch_size]
    return [dataset.key(i) for i in order]


def test_the_data_info_contract_and_two_ranks_split(shards: str) -> None:
    from open_clip import get_tokenizer

    tokenizer = get_tokenizer("ViT-S-32-alt")
    preprocess = __import__("torchvision").transforms.Compose(
        [
            __import__("torchvision").transforms.Resize((32, 32)),
            __import__("torchvision").transforms.ToTensor(),
        ]
    )
    info = swap.get_wds_dataset(_args(shards), preprocess, True, tokenizer=tokenizer)
    loader = info.dataloader
    assert loader.num_batches == 95 // 8 and loader.num_samples == 11 * 8  # 95 have captions
    images, texts = next(iter(loader))
    assert images.shape == (8, 3, 32, 32) and texts.shape == (8, 77) and texts.dtype == torch.int64
    assert len(list(loader)) == 11
    first = _keys(info)
    info.set_epoch(1)
    second = _keys(info)
    assert second != first  # another order: each epoch's 88 samples, each once
    assert len(set(first)) == len(set(second)) == 88 and "00005" not in set(first) | set(second)
    ranks = [
        swap.get_wds_dataset(
            _args(shards, world_size=2, rank=r), preprocess, True, tokenizer=tokenizer
        )
        for r in range(2)
    ]
    a, b = (_keys(r) for r in ranks)
    assert len(a) == len(b) == ranks[0].dataloader.num_batches * 8 and set(a).isdisjoint(b)


# ------------------------------------------------------- --dataset-type csv, --imagenet-val


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TSV table as OpenCLIP's ``CsvDataset`` reads it (its default separator): 40 photos,
    captions with non-ASCII text, and a column OpenCLIP does not read."""
    folder = tmp_path_factory.mktemp("table")
    rng = np.random.default_rng(1)
    lines = ["filepath\ttitle\tsource"]
    for k in range(40):
        path = folder / f"p{k:02d}.jpg"
        Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(path, "JPEG")
        lines.append(f"{path}\tphoto {k} über café\tweb")
    (folder / "pairs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "pairs.tsv"


def _csv_args(table: Path, **changes: object) -> SimpleNamespace:
    fields = {"train_data": str(table), "val_data": str(table), "batch_size": 8, "workers": 0}
    fields |= {"csv_img_key": "filepath", "csv_caption_key": "title", "csv_separator": "\t"}
    return SimpleNamespace(**{**fields, "distributed": False, **changes})


def _val_preprocess() -> object:
    import open_clip

    return open_clip.image_transform(32, is_train=False)


def test_csv_rows_reach_openclips_loop_as_its_own_loader_serves_them(table: Path) -> None:
    from open_clip import get_tokenizer
    from open_clip_train import data

    tokenizer = get_tokenizer("ViT-S-32-alt")
    preprocess = _val_preprocess()
    ours = swap.get_csv_dataset(_csv_args(table), preprocess, False, tokenizer=tokenizer)
    theirs = data.get_csv_dataset(_csv_args(table), preprocess, False, tokenizer=tokenizer)
    assert isinstance(ours.dataloader, fastload.DataLoader)
    assert (ours.dataloader.num_samples, ours.dataloader.num_batches) == (40, 5)
    assert (theirs.dataloader.num_samples, theirs.dataloader.num_batches) == (40, 5)
    for (a, ta), (b, tb) in zip(ours.dataloader, theirs.dataloader, strict=True):
        assert torch.equal(ta, tb)  # the same rows in the same order, tokenized the same
        assert a.shape == b.shape == (8, 3, 32, 32)
        assert (a - b).abs().mean() < 0.05  # decoders and resampling differ, not the pixels

    train = swap.get_csv_dataset(
        _csv_args(table, batch_size=16), preprocess, True, tokenizer=tokenizer
    )
    assert (train.dataloader.num_samples, train.dataloader.num_batches) == (40, 2)  # drop_last
    epoch = [tokens for _, tokens in train.dataloader]
    assert [len(t) for t in epoch] == [16, 16] and train.sampler is None  # shuffled, no sampler


def test_open_clips_main_trains_on_a_csv_table_through_fastload(
    table: Path, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "fastload.integrations.open_clip", "--train-data", str(table)]
    command += ["--csv-img-key", "filepath", "--csv-caption-key", "title"]
    command += ["--logs", str(tmp_path / "logs"), *ARGS]
    command[command.index("webdataset")] = "csv"
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "Train Epoch: 0 [32/40 (100%)]" in log  # as OpenCLIP counts its csv: 2 batches of 16
    assert all(np.isfinite(_losses(log)))


def test_imagenet_val_is_read_by_fastload_in_openclips_order(tmp_path: Path) -> None:
    import torchvision
    from open_clip_train import data

    rng = np.random.default_rng(2)
    for c in range(3):
        (tmp_path / f"n{c:08d}").mkdir()
        for k in range(5):
            image = rng.integers(0, 255, (50, 70, 3), dtype=np.uint8)
            Image.fromarray(image).save(tmp_path / f"n{c:08d}" / f"{k}.JPEG", "JPEG")
    args = SimpleNamespace(imagenet_val=str(tmp_path), batch_size=4, workers=0)
    preprocess = _val_preprocess()
    ours = swap.get_imagenet(args, (None, preprocess), "val")
    theirs = data.get_imagenet(args, (None, preprocess), "val")
    assert isinstance(ours.dataloader, fastload.DataLoader) and ours.sampler is None
    assert isinstance(ours.dataloader.dataset, torchvision.datasets.ImageFolder)
    for (a, la), (b, lb) in zip(ours.dataloader, theirs.dataloader, strict=True):
        assert torch.equal(la, lb)
        assert a.shape == b.shape and (a - b).abs().mean() < 0.05
    plan = fastload.explain(ours.dataloader)
    assert "fused with decoding" in plan and "CenterCrop" in plan, plan


# ------------------------------------------------------------- mid-epoch checkpoints, resume

MID = [*ARGS, "--warmup", "0"]  # a cosine schedule from step 0: a shifted step shows at once


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _main(args: list[str], cwd: Path) -> str:
    command = [sys.executable, "-m", "fastload.integrations.open_clip", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    return log


def test_a_mid_epoch_checkpoint_resumes_to_the_uninterrupted_runs_weights(
    shards: str, tmp_path: Path
) -> None:
    """OpenCLIP's own main trains an epoch through fastload, checkpointing mid-way; a second run
    resumes from that checkpoint to the first run's weights."""
    common = ["--train-data", shards, "--train-num-samples", "64", "--logs", str(tmp_path), *MID]
    log = _main([*common, "--name", "whole", "--fastload-save-steps", "2"], tmp_path)
    assert "Train Epoch: 0 [64/64 (100%)]" in log  # the samples OpenCLIP counts per epoch
    assert _losses(log) and all(np.isfinite(_losses(log))), log[-2000:]
    whole = tmp_path / "whole" / "checkpoints"
    assert sorted(p.name for p in whole.iterdir()) == ["epoch_0_step_2.pt", "epoch_1.pt"]
    mid = torch.load(whole / "epoch_0_step_2.pt", map_location="cpu", weights_only=True)
    assert mid["epoch"] == 0 and mid["fastload"]["step"] == 2 and mid["fastload"]["samples"] == 32

    log = _main(
        [*common, "--name", "resumed", "--resume", str(whole / "epoch_0_step_2.pt")], tmp_path
    )
    assert "epoch 0 continues after step 2 (2 batches)" in log
    # the rest of the epoch's samples, in its order, at its learning rates: the same weights
    resumed = _weights(tmp_path / "resumed" / "checkpoints" / "epoch_1.pt")
    for name, tensor in _weights(whole / "epoch_1.pt").items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_two_ranks_checkpoint_mid_epoch_and_one_rank_takes_the_rest(
    shards: str, tmp_path: Path
) -> None:
    """Two gloo ranks train with DDP on the CPU through OpenCLIP's own main, checkpointing
    mid-epoch; one rank resumes and takes the rest. OpenCLIP's main three times: about a minute
    on 2 cores, the time of the trainer's processes, not of the data."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    common = ["--train-data", shards, "--train-num-samples", "64", "--logs", str(tmp_path), *MID]
    two = [*common, "--name", "two", "--batch-size", "8", "--fastload-save-steps", "2"]
    errs = run_ranks(script, lambda rank: two, timeout=600)
    log = "".join(errs) + "".join(p.read_text() for p in (tmp_path / "two").rglob("*.log"))
    assert "Train Epoch: 0 [64/64 (100%)]" in log, log[-3000:]  # 4 steps of 2 ranks x 8
    assert all(np.isfinite(_losses(log)))
    checkpoint = tmp_path / "two" / "checkpoints" / "epoch_0_step_2.pt"
    mid = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert mid["fastload"]["samples"] == 32  # 2 steps of 2 ranks x 8

    one = [*common, "--name", "one", "--batch-size", "8", "--resume", str(checkpoint)]
    log = _main(one, tmp_path)
    assert "epoch 0 continues after step 4 (4 batches)" in log  # 32 samples: 4 steps of 8
    assert all(np.isfinite(_losses(log))) and (tmp_path / "one/checkpoints/epoch_1.pt").exists()


def _number(texts: str | list[str]) -> list[torch.Tensor]:
    """A tokenizer that gives caption ``photo k`` the token ``k``: batches name their keys."""
    texts = [texts] if isinstance(texts, str) else texts
    return [torch.tensor(int(text.split()[1])) for text in texts]


def _read(batches: object, count: int | None = None) -> list[int]:
    keys = []
    for _, tokens in itertools.islice(batches, count):  # type: ignore[call-overload]
        keys += tokens.tolist()
    return keys


def test_the_rest_of_an_epoch_under_another_world_size(shards: str) -> None:
    from torchvision.transforms import v2

    preprocess = v2.Compose([v2.Resize((16, 16)), v2.ToImage()])

    def epoch(world: int, rank: int, batch: int) -> object:
        args = _args(shards, world_size=world, rank=rank, batch_size=batch)
        return swap.get_wds_dataset(args, preprocess, True, tokenizer=_number).dataloader

    whole = [_read(epoch(2, rank, 8)) for rank in range(2)]
    two = [epoch(2, rank, 8) for rank in range(2)]
    passes = [iter(b) for b in two]
    before = [_read(p, 2) for p in passes]  # 2 steps of 2 ranks x 8
    position = two[0].position()
    assert position["samples"] == 32

    one = epoch(1, 0, 8)  # the batch per rank stays; the global batch halves
    assert one.resume(position) == 4  # 32 samples: 4 of this run's steps
    after = _read(one)
    assert len(after) == one.num_samples - 32  # the rest of the epoch, as long as one rank's
    seen = before[0] + before[1] + after
    assert len(seen) == len(set(seen)) and set(whole[0] + whole[1]) <= set(seen)


def test_a_csv_epoch_resumes_in_its_shuffled_order(table: Path) -> None:
    preprocess = _val_preprocess()

    def epoch() -> object:
        args = _csv_args(table, world_size=1)
        return swap.get_csv_dataset(args, preprocess, True, tokenizer=_number).dataloader

    torch.manual_seed(0)
    whole = _read(epoch())
    torch.manual_seed(0)
    first = epoch()
    before = _read(iter(first), 2)
    position = first.position()
    torch.manual_seed(1)  # the order comes from the state, not from the global generator
    rest = epoch()
    assert rest.resume(position) == 2
    assert before + _read(rest) == whole and sorted(whole) == list(range(40))


def test_a_bad_step_count_is_refused_in_one_line(shards: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "fastload.integrations.open_clip", "--train-data", shards]
    done = subprocess.run(
        [*command, *ARGS, "--fastload-save-steps", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--fastload-save-steps: '0' is not a whole number of steps of at least 1" in done.stderr
