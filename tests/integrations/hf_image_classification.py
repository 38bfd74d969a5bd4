"""A training script of the shape of transformers' image-classification example, for
tests/integrations/test_transformers.py to run unchanged under ``python -m
fastload.integrations.transformers``: its arguments parsed by ``HfArgumentParser`` into
dataclasses, ``load_dataset("imagefolder")``, the torchvision pipelines given with
``set_transform`` through a function that reads the column from its arguments, the collate
function building ``{"pixel_values", "labels"}``, and transformers' ``Trainer`` (imported from
transformers, as the example imports it). The model is a tiny ViT made from its config, so
nothing is downloaded."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

import torch
from datasets import load_dataset
from torchvision.transforms import (
    CenterCrop,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToTensor,
)
from transformers import (
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
)

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    train_dir: str = field(metadata={"help": "a folder of class folders"})
    image_column_name: str = field(default="image")
    label_column_name: str = field(default="label")
    size: int = field(default=32)


def main() -> None:
    parser = HfArgumentParser((DataTrainingArguments, TrainingArguments))
    data_args, training_args = parser.parse_args_into_dataclasses()
    logging.basicConfig(
        format="%(name)s - %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    logging.getLogger().setLevel(logging.INFO)

    dataset = load_dataset("imagefolder", data_dir=data_args.train_dir)
    split = dataset["train"].train_test_split(0.25, seed=training_args.seed)
    labels = dataset["train"].features[data_args.label_column_name].names

    def collate_fn(examples):
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example[data_args.label_column_name] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    config = ViTConfig(
        image_size=data_args.size,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=len(labels),
    )
    model = ViTForImageClassification(config)
    normalize = Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
    _train_transforms = Compose(
        [RandomResizedCrop(data_args.size), RandomHorizontalFlip(), ToTensor(), normalize]
    )
    _val_transforms = Compose(
        [Resize(data_args.size), CenterCrop(data_args.size), ToTensor(), normalize]
    )

    def train_transforms(example_batch):
        """Apply _train_transforms across a batch."""
        example_batch["pixel_values"] = [
            _train_transforms(pil_img.convert("RGB"))
            for pil_img in example_batch[data_args.image_column_name]
        ]
        return example_batch

    def val_transforms(example_batch):
        """Apply _val_transforms across a batch."""
        example_batch["pixel_values"] = [
            _val_transforms(pil_img.convert("RGB"))
            for pil_img in example_batch[data_args.image_column_name]
        ]
        return example_batch

    split["train"].set_transform(train_transforms)
    split["test"].set_transform(val_transforms)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=split["train"],
        eval_dataset=split["test"],
        data_collator=collate_fn,
    )
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
