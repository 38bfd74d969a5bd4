"""``accelerate=True`` on a Hugging Face ``datasets.Dataset`` whose ``with_transform`` is what
transformers' image-classification example writes: the same script, torch's loader against
fastload's, same batches for the same seed within the resampling tolerance; any other function
runs as written, and explain says why."""

from __future__ import annotations

import datasets
import pytest
import torch
import torchvision.transforms.v2 as v2
from images import jpeg_bytes, photo, with_orientation

import fastload
from fastload.accelerate.hf_datasets import rows_transform

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
image_column_name, label_column_name = "image", "label"  # as the example's arguments name them


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> datasets.Dataset:
    root = tmp_path_factory.mktemp("hf")
    rows = {"image": [], "label": []}
    for k in range(12):
        rows["image"].append({"bytes": jpeg_bytes(photo(96 + 8 * k, 80, seed=k)), "path": None})
        rows["label"].append(k % 3)
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])}
    )
    table = datasets.Dataset.from_dict(rows, features=features)
    table.save_to_disk(str(root / "saved"))
    return datasets.load_from_disk(str(root / "saved"))


def example_transforms(dataset: datasets.Dataset, size: int) -> datasets.Dataset:
    """transformers' run_image_classification.py: the pipeline in a closure, the column in a
    module name, the function given to with_transform."""
    _train_transforms = v2.Compose(
        [
            v2.RandomResizedCrop(size),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )

    def train_transforms(example_batch):
        """Apply _train_transforms across a batch."""
        example_batch["pixel_values"] = [
            _train_transforms(pil_img.convert("RGB"))
            for pil_img in example_batch[image_column_name]
        ]
        return example_batch

    return dataset.with_transform(train_transforms)


def collate_fn(examples):
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example[label_column_name] for example in examples])
    return {"pixel_values": pixel_values, "labels": labels}


@pytest.mark.parametrize("workers", [0, 2])
def test_the_examples_script_is_accelerated_with_its_draws(dataset, workers: int) -> None:
    train = example_transforms(dataset, 48)

    def epoch(loader) -> dict[str, torch.Tensor]:
        torch.manual_seed(5)
        batches = list(loader)
        return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}

    common = {"batch_size": 5, "shuffle": True, "num_workers": workers, "collate_fn": collate_fn}
    fast = fastload.DataLoader(train, accelerate=True, **common)
    assert fast.acceleration.accelerated, fast.acceleration
    assert fast.acceleration.fused[0].startswith("RandomResizedCrop")
    want = epoch(torch.utils.data.DataLoader(train, **common))
    got = epoch(fast)
    assert torch.equal(want["labels"], got["labels"])
    scale = torch.tensor(STD).view(1, 3, 1, 1) * 255
    per_image = ((want["pixel_values"] - got["pixel_values"]).abs() * scale).mean(dim=(1, 2, 3))
    assert per_image.mean() < 1.0 and per_image.max() < 2.5, per_image


def test_the_rows_keep_every_other_column_and_leave_the_image_out(dataset) -> None:
    """set_transform (in place) as with_transform; the rows as the function leaves them, but
    for the image column, which fastload decoded."""
    train = dataset.select(range(len(dataset)))
    train.set_transform(example_transforms(dataset, 32).format["format_kwargs"]["transform"])
    loader = fastload.DataLoader(train, batch_size=4, accelerate=True, collate_fn=lambda b: b)
    assert loader.acceleration.accelerated
    row = next(iter(loader))[0]
    assert set(row) == {"label", "pixel_values"} and row["pixel_values"].shape == (3, 32, 32)


def test_another_function_runs_as_written_and_explain_says_why(dataset) -> None:
    def transforms(batch):
        batch["pixel_values"] = [v2.ToImage()(img) for img in batch["image"]]
        batch["extra"] = [1] * len(batch["image"])
        return batch

    ds = dataset.with_transform(transforms)
    loader = fastload.DataLoader(ds, batch_size=4, accelerate=True, collate_fn=lambda b: b)
    assert not loader.acceleration.accelerated
    assert "not of the shape" in str(loader.acceleration)
    assert "fastload.ImageTable(dataset, transform)" in str(loader.acceleration)
    assert len(next(iter(loader))) == 4  # run as written
    with pytest.raises(fastload.accelerate.NotAccelerated, match="no with_transform"):
        rows_transform(dataset)
    work = rows_transform(example_transforms(dataset, 32))
    assert (work.image, work.key) == ("image", "pixel_values")


def test_an_exif_rotated_image_is_turned_as_datasets_turns_it() -> None:
    rotated = with_orientation(photo(60, 40, seed=1), 6)  # shown 40 wide, 60 high
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    rows = {"image": [{"bytes": rotated, "path": None}], "label": [0]}
    ds = datasets.Dataset.from_dict(rows, features=features)
    crop = v2.Compose([v2.CenterCrop((50, 30)), v2.ToImage()])

    def transforms(batch):
        batch["pixel_values"] = [crop(image.convert("RGB")) for image in batch["image"]]
        return batch

    ds = ds.with_transform(transforms)
    want = next(iter(torch.utils.data.DataLoader(ds, batch_size=1, collate_fn=collate_fn)))
    fast = fastload.DataLoader(ds, batch_size=1, collate_fn=collate_fn, accelerate=True)
    assert fast.acceleration.accelerated
    got = next(iter(fast))
    assert got["pixel_values"].shape == want["pixel_values"].shape == (1, 3, 50, 30)
    diff = (got["pixel_values"].float() - want["pixel_values"].float()).abs().mean()
    assert diff < 1.0
