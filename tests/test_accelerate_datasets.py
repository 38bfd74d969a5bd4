"""``accelerate=True`` on a Hugging Face ``datasets.Dataset`` whose ``with_transform`` is what
transformers' image-classification example writes: the same script, torch's loader against
fastload's, same batches for the same seed within the resampling tolerance; any other function
runs as written, and explain says why."""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import pytest
import torch
import torchvision.transforms.v2 as v2
from images import jpeg_bytes, photo, with_orientation

import fastload
from fastload.accelerate.hf_datasets import rows_transform

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class DataTrainingArguments:
    """The example's data arguments, parsed by transformers' HfArgumentParser there."""

    image_column_name: str = "image"
    label_column_name: str = "label"


data_args = DataTrainingArguments()


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
    """transformers' run_image_classification.py: the pipeline in a closure, the column a
    field of its arguments, the function given to with_transform."""
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
            for pil_img in example_batch[data_args.image_column_name]
        ]
        return example_batch

    return dataset.with_transform(train_transforms)


def collate_fn(examples):
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example[data_args.label_column_name] for example in examples])
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
    # the collate function stacks the images and reads them nowhere else: the conversion and
    # Normalize run once on its batch's 'pixel_values', after it
    assert any(op.startswith("Normalize") for op in fast.acceleration.batch)
    assert "on the batch's 'pixel_values', which your collate_fn stacks" in fast.acceleration.batch
    assert not fast.acceleration.blockers
    want = epoch(torch.utils.data.DataLoader(train, **common))
    got = epoch(fast)
    assert torch.equal(want["labels"], got["labels"])
    scale = torch.tensor(STD).view(1, 3, 1, 1) * 255
    per_image = ((want["pixel_values"] - got["pixel_values"]).abs() * scale).mean(dim=(1, 2, 3))
    assert per_image.mean() < 1.0 and per_image.max() < 2.5, per_image


def erasing_transforms(dataset: datasets.Dataset, size: int) -> datasets.Dataset:
    """The example's shape with random erasing after Normalize: drawn per sample, applied on
    the stacked batch."""
    pipeline = v2.Compose(
        [
            v2.RandomResizedCrop(size),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
            v2.RandomErasing(1.0),
        ]
    )

    def train_transforms(example_batch):
        example_batch["pixel_values"] = [
            pipeline(image.convert("RGB")) for image in example_batch["image"]
        ]
        return example_batch

    return dataset.with_transform(train_transforms)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("workers", [0, 2])
def test_per_sample_draws_reach_the_stacked_batch_as_torchs_loader_draws_them(
    dataset, workers: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RandomErasing's draws are made per row where torch's loader makes them, and applied on
    the collate function's stacked 'pixel_values' (after the copy, with a CUDA device, faked
    here): torch's batches, erased where torch erased them."""
    train = erasing_transforms(dataset, 40)
    common = {"batch_size": 4, "num_workers": workers, "collate_fn": collate_fn}
    torch.manual_seed(2)
    want = list(torch.utils.data.DataLoader(train, **common))
    if device == "cuda":
        from fakecuda import FakeCuda

        FakeCuda(monkeypatch)
        common["pin_memory"] = False
    fast = fastload.DataLoader(train, accelerate=True, device=device, **common)
    assert fast.acceleration.batch[-2].endswith("(drawn per sample)")
    torch.manual_seed(2)
    got = list(fast)
    scale = torch.tensor(STD).view(1, 3, 1, 1) * 255
    for w, g in zip(want, got, strict=True):
        assert torch.equal(w["labels"], g["labels"])
        per_image = ((w["pixel_values"] - g["pixel_values"]).abs() * scale).mean(dim=(1, 2, 3))
        assert per_image.max() < 1.0, per_image


def test_a_collate_that_reads_the_images_keeps_the_conversion_per_row(dataset) -> None:
    """A collate function that reads the transformed images past stacking them (here their
    shape) gets them as the pipeline makes them, float32 and normalized: its result is torch's."""
    train = example_transforms(dataset, 40)

    def peeking(examples):
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        dtype = examples[0]["pixel_values"].dtype
        return {"pixel_values": pixel_values, "dtype": dtype}

    fast = fastload.DataLoader(train, batch_size=4, collate_fn=peeking, accelerate=True)
    assert fast.acceleration.accelerated
    assert not any(op.startswith("Normalize") for op in fast.acceleration.batch)
    assert any("peeking" in b and "read nowhere else" in b for b in fast.acceleration.blockers)
    batch = next(iter(fast))
    assert batch["dtype"] == torch.float32 and batch["pixel_values"].dtype == torch.float32


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


def test_the_examples_script_on_a_cuda_device_converts_on_the_device(
    dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a CUDA device (faked here) the collate function's dict crosses with uint8 images
    and the conversion runs on its 'pixel_values' after the copy: torch's batches."""
    from fakecuda import FakeCuda

    train = example_transforms(dataset, 40)
    common = {"batch_size": 6, "shuffle": True, "collate_fn": collate_fn}
    torch.manual_seed(3)
    want = list(torch.utils.data.DataLoader(train, **common))
    FakeCuda(monkeypatch)
    fast = fastload.DataLoader(train, accelerate=True, device="cuda", pin_memory=False, **common)
    assert fast.acceleration.where.startswith("on cuda")
    torch.manual_seed(3)
    got = list(fast)
    for w, g in zip(want, got, strict=True):
        assert set(g) == {"pixel_values", "labels"} and torch.equal(w["labels"], g["labels"])
        assert g["pixel_values"].dtype == torch.float32
        scale = torch.tensor(STD).view(1, 3, 1, 1) * 255
        assert ((w["pixel_values"] - g["pixel_values"]).abs() * scale).mean() < 1.0


def stacked_then_mixed(examples):
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    labels = torch.tensor([example["label"] for example in examples])
    pixel_values, labels = pixel_values.flip(0), labels.flip(0)
    return {"pixel_values": pixel_values, "labels": labels}


def stacked_twice(examples):
    first = torch.stack([example["pixel_values"] for example in examples])
    second = torch.stack([example["pixel_values"] for example in examples])
    return {"first": first, "second": second}


def read_by_get(examples):
    return {
        "pixel_values": torch.stack([example["pixel_values"] for example in examples]),
        "sizes": [example.get("pixel_values").shape for example in examples],
    }


def sizes_of(examples):
    return [example["pixel_values"].shape for example in examples]


def handed_on(examples):
    """Its samples handed whole to a function of its own, which reads the images there."""
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    return {"pixel_values": pixel_values, "sizes": sizes_of(examples)}


def each_handed_on(examples):
    pixel_values = torch.stack([example["pixel_values"] for example in examples])
    return {"pixel_values": pixel_values, "sizes": [sizes_of([e]) for e in examples]}


def stacked_inline(examples):
    """The example's older form: the dict built in the return."""
    return {
        "pixel_values": torch.stack([example["pixel_values"] for example in examples]),
        "labels": torch.tensor([example["label"] for example in examples]),
    }


@pytest.mark.parametrize(
    ("function", "stacked"),
    [
        (collate_fn, ("pixel_values", "pixel_values")),
        (stacked_inline, ("pixel_values", "pixel_values")),
        (stacked_then_mixed, None),  # the stacked images are read again after stacking
        (stacked_twice, None),
        (read_by_get, None),
        (handed_on, None),
        (each_handed_on, None),
        (lambda examples: {"x": torch.stack([e["x"] for e in examples])}, None),  # not a def
    ],
)
def test_only_a_collate_that_stacks_the_images_and_reads_them_nowhere_else_is_proved(
    function, stacked
) -> None:
    from fastload.accelerate.hf_datasets import stacked_column

    found = stacked_column(function)
    assert (None if found is None else (found.key, found.into)) == stacked
