"""transformers' ``Trainer`` on fastload's loader: ``fastload.integrations.transformers``, with
the real transformers, datasets and a tiny ViT made from its config (nothing downloaded); a
script of the shape of transformers' image-classification example run unchanged under
``python -m fastload.integrations.transformers``, trained, evaluated and resumed mid-epoch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import torchvision.transforms as v1
import transformers
from images import jpeg_bytes, photo

import fastload
from fastload.integrations import transformers as swap

SCRIPT = Path(__file__).with_name("hf_image_classification.py")
SIZE = 32


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three class folders of eight real JPEGs each, of several sizes."""
    root = tmp_path_factory.mktemp("hf_classes")
    for c in range(3):
        (root / f"class_{c}").mkdir()
        for k in range(8):
            image = photo(60 + 4 * k, 48 + 2 * c, seed=10 * c + k)
            (root / f"class_{c}" / f"img_{k}.jpg").write_bytes(jpeg_bytes(image))
    return root


def _model() -> transformers.PreTrainedModel:
    config = transformers.ViTConfig(
        image_size=SIZE,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
    )
    return transformers.ViTForImageClassification(config)


def collate_fn(examples):
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example["label"] for example in examples])
    return {"pixel_values": pixel_values, "labels": labels}


def _trainer(kind, folder: Path, out: Path, *, workers: int) -> transformers.Trainer:
    train = datasets.load_dataset("imagefolder", data_dir=str(folder), split="train")
    pipeline = v1.Compose(
        [
            v1.RandomResizedCrop(SIZE),
            v1.RandomHorizontalFlip(),
            v1.ToTensor(),
            v1.Normalize([0.5] * 3, [0.5] * 3),
        ]
    )

    def train_transforms(example_batch):
        example_batch["pixel_values"] = [
            pipeline(image.convert("RGB")) for image in example_batch["image"]
        ]
        return example_batch

    train.set_transform(train_transforms)
    args = transformers.TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=3,
        remove_unused_columns=False,  # the transform reads the image column
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        dataloader_num_workers=workers,
        seed=7,
    )
    return kind(model=_model(), args=args, train_dataset=train, data_collator=collate_fn)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_trainers_loader_is_fastloads_with_the_batches_of_transformers_own(
    folder: Path, tmp_path: Path, workers: int
) -> None:
    """The same trainer arguments: transformers' loader and fastload's give the same samples
    in the same order, the same crops within the resampling tolerance, and train."""
    theirs = _trainer(transformers.Trainer, folder, tmp_path / "theirs", workers=workers)
    ours = _trainer(swap.TransformersTrainer, folder, tmp_path / "ours", workers=workers)
    loader = ours.get_train_dataloader()
    assert isinstance(loader, fastload.DataLoader)
    assert loader.acceleration.accelerated, loader.acceleration
    assert "on the batch's 'pixel_values', which your collate_fn stacks" in (
        loader.acceleration.batch
    )
    stock = theirs.get_train_dataloader()
    torch.manual_seed(11)  # the crops' draws; the order is the trainer's seed's
    want = list(stock)
    torch.manual_seed(11)
    got = list(loader)
    assert len(got) == len(want) == 6
    for w, g in zip(want, got, strict=True):
        assert torch.equal(w["labels"], g["labels"])
        assert g["pixel_values"].dtype == torch.float32
        per_image = (w["pixel_values"] - g["pixel_values"]).abs().mean(dim=(1, 2, 3)) * 127.5
        assert per_image.mean() < 1.0 and per_image.max() < 2.5, per_image
    result = ours.train()
    assert result.global_step == 3 and math.isfinite(result.training_loss)


def test_the_trainers_evaluation_loaders_are_fastloads_and_not_kept(
    folder: Path, tmp_path: Path
) -> None:
    trainer = _trainer(swap.TransformersTrainer, folder, tmp_path, workers=0)
    evaluation = trainer.get_eval_dataloader(trainer.train_dataset)
    assert isinstance(evaluation, fastload.DataLoader) and evaluation.acceleration.accelerated
    # nothing registered with the accelerator: a loader made at each evaluation is let go
    assert trainer.accelerator._custom_objects == []
    # transformers' own name is back once the loader is built
    assert transformers.trainer.DataLoader is torch.utils.data.DataLoader


def _run(folder: Path, out: Path, *extra: str) -> str:
    command = [
        sys.executable,
        "-m",
        "fastload.integrations.transformers",
        str(SCRIPT),
        "--train_dir",
        str(folder),
        "--output_dir",
        str(out),
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "4",
        "--remove_unused_columns",
        "False",
        "--report_to",
        "none",
        "--use_cpu",
        "--logging_steps",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--dataloader_num_workers",
        "2",
        *extra,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def test_the_examples_script_trains_evaluates_and_resumes_unchanged(
    folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = _run(folder, out, "--max_steps", "2")
    # the train loader and the evaluation loader, each fastload's, each accelerated whole
    assert first.count("accelerate: Dataset: accelerated (images delivered as float32)") == 2
    assert "on the batch's 'pixel_values', which your collate_fn stacks" in first
    assert (out / "checkpoint-2").is_dir()
    # mid-epoch (18 training images, 5 batches an epoch): the first 2 batches passed over
    resumed = _run(
        folder, out, "--max_steps", "4", "--resume_from_checkpoint", str(out / "checkpoint-2")
    )
    assert resumed.count("accelerate: Dataset: accelerated") == 2
    train = json.loads((out / "train_results.json").read_text())
    evaluation = json.loads((out / "eval_results.json").read_text())
    assert train["epoch"] == pytest.approx(0.8)
    assert math.isfinite(train["train_loss"]) and math.isfinite(evaluation["eval_loss"])


def test_the_runner_says_how_to_use_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fastload.integrations.transformers"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "usage: python -m fastload.integrations.transformers path/to/script.py" in (proc.stderr)
