"""The batch stage inside fastload.DataLoader: where it runs and what it hands over."""

from __future__ import annotations

import collections
import io
import os
from dataclasses import replace

import datasets
import pytest
import torch
import transformers
from fakecuda import FakeCuda
from images import jpeg_bytes, photo
from PIL import Image
from torchvision.transforms import v2

import fastload
from fastload import gpu


class Constant(torch.utils.data.Dataset):
    """Identical images (a left-right gradient), so differences come from augmentation only."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        row = torch.arange(8, dtype=torch.uint8) * 30
        return row.expand(3, 8, 8).clone(), i % 4


def where_it_ran(images: torch.Tensor, labels: torch.Tensor | None = None):
    pids = torch.full((len(images),), os.getpid())
    return pids if labels is None else (pids, labels)


@pytest.mark.parametrize("device", [None, "cpu"])
def test_cpu_stage_runs_in_the_workers(device) -> None:
    loader = fastload.DataLoader(
        Constant(), batch_size=8, num_workers=2, device=device, batch_transforms=where_it_ran
    )
    pids = {int(p) for batch, _ in loader for p in batch}
    assert len(pids) == 2 and os.getpid() not in pids


def test_cpu_stage_normalizes_and_mixes_labels() -> None:
    aug = gpu.Compose(
        [
            gpu.Normalize([0.5] * 3, [0.25] * 3),
            gpu.MixUp(1.0, num_classes=4, generator=torch.Generator().manual_seed(0)),
        ]
    )
    images, labels = next(
        iter(fastload.DataLoader(Constant(), batch_size=8, num_workers=1, batch_transforms=aug))
    )
    assert images.dtype == torch.float32 and labels.shape == (8, 4)
    assert torch.allclose(labels.sum(1), torch.ones(8))


def test_channels_last_option() -> None:
    images, _ = next(iter(fastload.DataLoader(Constant(), batch_size=4, channels_last=True)))
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert not images.is_contiguous()


def test_channels_last_batches_normalized_in_the_workers_hold_the_same_values() -> None:
    """Worker processes write them into their kept shared memory in that layout (thread
    workers' ring: tests/gpu/test_normalizing.py)."""

    def batches(channels_last: bool) -> list[torch.Tensor]:
        loader = fastload.DataLoader(
            Constant(),
            batch_size=4,
            num_workers=2,
            batch_transforms=gpu.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            channels_last=channels_last,
        )
        return [images for images, _ in loader]

    for plain, last in zip(batches(False), batches(True), strict=True):
        assert last.is_contiguous(memory_format=torch.channels_last) and not last.is_contiguous()
        assert plain.is_contiguous() and torch.equal(plain, last)


def test_workers_reseed_explicit_generators() -> None:
    flip = gpu.RandomHorizontalFlip(generator=torch.Generator().manual_seed(0))

    def epoch(seed: int) -> list[list[bool]]:
        loader = fastload.DataLoader(
            Constant(),
            batch_size=8,
            num_workers=2,
            batch_transforms=flip,
            generator=torch.Generator().manual_seed(seed),
        )
        return [(b[:, 0, 0, 0] != 0).tolist() for b, _ in loader]

    first = epoch(1)
    assert first[0] != first[1]  # worker 0's and worker 1's first batches were drawn apart
    assert epoch(1) == first  # and the loader's seed makes it reproducible
    assert epoch(2) != first


def test_stage_with_the_skip_policy(tmp_path) -> None:
    from images import jpeg_bytes, photo

    good = tmp_path / "good.jpg"
    good.write_bytes(jpeg_bytes(photo(40, 30)))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    ds = fastload.ImageList(
        [good, bad, good], [0, 1, 2], transform=fastload.transforms.CenterCrop(16), on_error="skip"
    )
    loader = fastload.DataLoader(
        ds, batch_size=3, batch_transforms=gpu.Normalize([0.5] * 3, [0.5] * 3)
    )
    with pytest.warns(fastload.UnreadableImageWarning):
        ((images, labels),) = list(loader)
    assert images.dtype == torch.float32 and labels.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("kind", "batch_size", "batches"), [("tuples", 8, 4), ("dicts", 4, 3)], ids=["tuples", "dicts"]
)
def test_cuda_stage_runs_on_the_side_stream(
    monkeypatch: pytest.MonkeyPatch, kind: str, batch_size: int, batches: int
) -> None:
    fake = FakeCuda(monkeypatch)
    streams = []

    def record(images: torch.Tensor, labels: torch.Tensor):
        streams.append(fake.current.name)
        return images.float() / 255, labels

    dataset = Constant() if kind == "tuples" else _hugging_face_rows()
    loader = fastload.DataLoader(
        dataset, batch_size=batch_size, device="cuda", batch_transforms=record, channels_last=True
    )
    first, *_ = list(loader)  # every batch, for the streams they ran on
    assert streams == ["side"] * batches
    images = first[0] if kind == "tuples" else first["pixel_values"]
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    owned = {e[2] for e in fake.log if e[0] == "record_stream"}
    assert id(images) in owned  # the stage's outputs are handed over, not only the copies


def test_draws_made_per_sample_ride_with_the_batch_to_the_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """With a CUDA device the batch stage runs after the copy: the policy's per-sample draws
    travel with the batch from the collate function (a worker's, or here this process's). On
    the CPU AugMix runs as written (torchvision runs it on tensors: the same pixels), and only
    RandomErasing is drawn per sample; the batches are the same."""
    import torchvision
    import torchvision.transforms as v1

    from fastload.synthetic import make_image_folder

    root = make_image_folder(tmp_path / "set", images=12, classes=2)
    pipeline = v1.Compose(
        [v1.RandomResizedCrop(32), v1.AugMix(), v1.PILToTensor(), v1.RandomErasing(1.0)]
    )
    dataset = torchvision.datasets.ImageFolder(root, pipeline)

    def epoch(**options) -> torch.Tensor:
        torch.manual_seed(4)
        loader = fastload.DataLoader(dataset, batch_size=5, accelerate=True, **options)
        assert loader.plan.deferred
        return torch.cat([x for x, _ in loader])

    on_cpu = epoch()
    FakeCuda(monkeypatch)
    assert torch.equal(epoch(device="cuda"), on_cpu)
    loader = fastload.DataLoader(dataset, batch_size=5, device="cuda")
    assert loader.acceleration.rest == ()  # on the device, AugMix too runs on batches


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"batch_transforms": 3}, ValueError, "batch_transforms=3 is not callable"),
        ({"channels_last": "yes"}, ValueError, "channels_last='yes' must be True or False"),
    ],
)
def test_bad_options(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        fastload.DataLoader(Constant(), **kwargs)


def test_batches_the_stage_cannot_read() -> None:
    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> dict:
            return {"tokens": torch.zeros(5, dtype=torch.long), "label": i}

    loader = fastload.DataLoader(
        Tokens(), batch_size=2, batch_transforms=gpu.Normalize([0.5], [0.5])
    )
    with pytest.raises(TypeError, match=r"a dict with no 4-D tensor \('tokens': \(2, 5\)"):
        next(iter(loader))
    # channels_last alone has nothing to lay out there, as on a 3-D image: torch's batches
    loader = fastload.DataLoader(Tokens(), batch_size=2, channels_last=True)
    theirs = torch.utils.data.DataLoader(Tokens(), batch_size=2)
    for ours, batch in zip(loader, theirs, strict=True):
        assert ours.keys() == batch.keys() and all(torch.equal(ours[k], batch[k]) for k in batch)


def _hugging_face_rows() -> datasets.Dataset:
    """A Hugging Face dataset of real JPEGs, its pipeline given with ``set_transform`` as its
    image-classification examples give it: dict samples, collated by torch's default."""
    photos = [Image.open(io.BytesIO(jpeg_bytes(photo(40 + 3 * k, 36, seed=k)))) for k in range(12)]
    rows = datasets.Dataset.from_dict({"image": photos, "label": [k % 3 for k in range(12)]})
    pipeline = v2.Compose([v2.PILToTensor(), v2.Resize(24), v2.CenterCrop(24)])

    def transform(columns: dict) -> dict:
        return {
            "pixel_values": [pipeline(image.convert("RGB")) for image in columns["image"]],
            "label": columns["label"],
            "size": [torch.tensor(image.size) for image in columns["image"]],
        }

    rows.set_transform(transform)
    return rows


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_batches_get_the_ops_on_their_images_and_come_channels_last(workers) -> None:
    rows = _hugging_face_rows()
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    loader = fastload.DataLoader(
        rows,
        batch_size=4,
        num_workers=workers,
        batch_transforms=gpu.Normalize(mean, std),
        channels_last=True,
    )
    normalize = v2.Normalize(mean, std)
    theirs = list(torch.utils.data.DataLoader(rows, batch_size=4))
    for ours, batch in zip(loader, theirs, strict=True):
        assert ours.keys() == batch.keys()
        images = ours["pixel_values"]
        assert (
            images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
        )
        expected = normalize(batch["pixel_values"].float() / 255)
        torch.testing.assert_close(images, expected, atol=1e-5, rtol=0)
        assert torch.equal(ours["label"], batch["label"]) and torch.equal(
            ours["size"], batch["size"]
        )


@pytest.mark.parametrize("kind", [collections.OrderedDict, transformers.BatchFeature])
def test_dict_batches_keep_the_type_torch_collated_them_into(kind) -> None:
    """An image processor's ``BatchFeature`` per sample (transformers' own type), or an
    ``OrderedDict``: torch's collate keeps the type, and so do the ops."""
    g = torch.Generator().manual_seed(0)
    rows = [
        kind({"pixel_values": torch.rand(3, 8, 8, generator=g), "labels": torch.tensor(k)})
        for k in range(6)
    ]
    loader = fastload.DataLoader(
        rows,
        batch_size=3,
        batch_transforms=gpu.Normalize([0.5] * 3, [0.25] * 3),
        channels_last=True,
    )
    for ours, batch in zip(loader, torch.utils.data.DataLoader(rows, batch_size=3), strict=True):
        assert type(ours) is type(batch) is kind and list(ours.keys()) == list(batch.keys())
        torch.testing.assert_close(ours["pixel_values"], (batch["pixel_values"] - 0.5) / 0.25)
        assert ours["pixel_values"].is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(ours["labels"], batch["labels"])


def test_dict_batches_hand_their_labels_to_the_ops() -> None:
    mix = gpu.MixUp(1.0, num_classes=3, generator=torch.Generator().manual_seed(0))
    loader = fastload.DataLoader(
        _hugging_face_rows(),
        batch_size=4,
        batch_transforms=gpu.Compose([gpu.Normalize([0.5] * 3, [0.25] * 3), mix]),
    )
    batch = next(iter(loader))
    assert batch["label"].shape == (4, 3)
    torch.testing.assert_close(batch["label"].sum(1), torch.ones(4))


@pytest.mark.gpu
def test_real_cuda_stage() -> None:
    aug = gpu.Compose(
        [
            gpu.RandomHorizontalFlip(),
            gpu.ColorJitter(0.3, 0.3, 0.3, 0.05),
            gpu.Normalize([0.5] * 3, [0.25] * 3),
        ]
    )
    loader = fastload.DataLoader(
        Constant(),
        batch_size=8,
        num_workers=2,
        device="cuda",
        batch_transforms=aug,
        channels_last=True,
    )
    for images, labels in loader:
        assert images.is_cuda and labels.is_cuda and images.dtype == torch.float32
        assert images.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.gpu
def test_real_cuda_stage_on_dict_batches() -> None:
    loader = fastload.DataLoader(
        _hugging_face_rows(),
        batch_size=4,
        num_workers=2,
        device="cuda",
        batch_transforms=gpu.Compose(
            [gpu.RandomHorizontalFlip(), gpu.Normalize([0.5] * 3, [0.25] * 3)]
        ),
        channels_last=True,
    )
    for batch in loader:
        images = batch["pixel_values"]
        assert images.is_cuda and batch["label"].is_cuda and images.dtype == torch.float32
        assert images.is_contiguous(memory_format=torch.channels_last)


def test_the_workers_image_buffer_is_kept_only_while_the_stage_copies_it() -> None:
    """The stage's input batch is stacked into a buffer kept across batches; a stage that
    hands its input out (an op returning it) gets a new one next time, so batches already
    delivered never change."""
    from torch.utils.data import default_collate

    from fastload.gpu.stage import BatchStage, CollateThenStage

    def samples(k: int) -> list:
        return [(torch.full((3, 4, 4), 10 * k + j, dtype=torch.uint8), j) for j in range(3)]

    copying = CollateThenStage(
        default_collate, BatchStage(gpu.Normalize((0.5,), (0.5,)), channels_last=False)
    )
    first, _ = copying(samples(1))
    second, labels = copying(samples(2))
    assert torch.equal(first, default_collate(samples(1))[0].float().div(255).sub(0.5).div(0.5))
    assert labels.tolist() == [0, 1, 2] and not torch.equal(first, second)
    passing = CollateThenStage(
        default_collate, BatchStage(lambda x, y: (x, y), channels_last=False)
    )
    kept, _ = passing(samples(1))
    passing(samples(2))
    assert torch.equal(kept, default_collate(samples(1))[0])  # not overwritten by batch 2
    odd = [
        (torch.zeros(3, 4, 4, dtype=torch.uint8), 0),
        (torch.zeros(3, 5, 4, dtype=torch.uint8), 1),
    ]
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        copying(odd)  # torch's own collate says it, as it would


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize(
    ("ops", "runs_after"),
    [
        (gpu.Normalize(MEAN, STD), None),
        (gpu.Compose([gpu.Normalize(MEAN, STD), gpu.RandomHorizontalFlip(p=1.0)]), "flip"),
        (
            gpu.Compose([gpu.Compose([gpu.Normalize((0.5,), (0.25,))]), gpu.RandomErasing(p=0.0)]),
            "",
        ),
    ],
)
def test_a_leading_normalize_is_left_to_a_dataset_that_decodes_it(ops, runs_after) -> None:
    """A stage whose first op is a float32 Normalize says so to the dataset
    (``normalizes_stacked``); a batch the dataset made normalized runs the ops after it only,
    to the same batch as the uint8 batch run through them all."""
    from torch.utils.data import default_collate

    from fastload.gpu import functional as F
    from fastload.gpu.stage import BatchStage, CollateThenStage
    from fastload.memory.stacked import StackedSamples, normalizes_stacked

    for channels_last in (False, True):
        link = CollateThenStage(default_collate, BatchStage(ops, channels_last=channels_last))
        normalizing = normalizes_stacked(link)
        assert normalizing is not None and normalizing.channels_last == channels_last
        images = torch.randint(0, 256, (4, 3, 6, 5), dtype=torch.uint8)
        want, labels = link(StackedSamples(images.clone(), [0, 1, 2, 3], 5))
        written = F.normalize_planes(images, normalizing.factors, normalizing.shifts)
        done = StackedSamples(written, [0, 1, 2, 3], 5, normalized=normalizing)
        got, same = link(done)
        assert torch.equal(got, want) and torch.equal(labels, same)
        assert got.is_contiguous(memory_format=torch.channels_last) == channels_last
        if runs_after == "flip":
            assert torch.equal(got, written.flip(-1))
        other = StackedSamples(
            written, [0, 1, 2, 3], 5, normalized=replace(normalizing, shifts=(0.0, 0.0, 0.0))
        )
        with pytest.raises(ValueError, match="came to a collate whose stage normalizes by"):
            link(other)


@pytest.mark.parametrize(
    "ops",
    [
        gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize(MEAN, STD)]),  # not first
        gpu.Normalize(MEAN, STD, dtype=torch.float16),
        gpu.Compose([]),
        gpu.RandomApply(gpu.Normalize(MEAN, STD), p=0.5),
        None,
    ],
)
def test_a_stage_that_does_not_normalize_first_leaves_the_dataset_its_bytes(ops) -> None:
    from torch.utils.data import default_collate

    from fastload.gpu.stage import BatchStage, CollateThenStage
    from fastload.memory.stacked import normalizes_stacked

    assert (
        normalizes_stacked(CollateThenStage(default_collate, BatchStage(ops, channels_last=False)))
        is None
    )
    # the user's collate function: the samples go to it as they are
    user = CollateThenStage(
        lambda b: default_collate(b), BatchStage(gpu.Normalize(MEAN, STD), channels_last=False)
    )
    assert normalizes_stacked(user) is None
