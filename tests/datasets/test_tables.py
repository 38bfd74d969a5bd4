"""fastload.ImageTable: a table's column of encoded images read where it is: Parquet files
written by Hugging Face ``datasets`` (local and through fsspec), a ``datasets.Dataset`` made by
``load_dataset("parquet")``, ``load_dataset("imagefolder")`` and ``save_to_disk``, and a pyarrow
Table; the same images and targets as the files themselves, batched as torch's loader batches
them."""

from __future__ import annotations

from pathlib import Path

import datasets
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torchvision.transforms.v2 as v2
from images import jpeg_bytes, photo

import fastload
from fastload import transforms as T

CLASSES = ["cat", "dog"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[int]]:
    """Twelve JPEGs in class folders (``imagefolder``'s layout), and their labels."""
    root = tmp_path_factory.mktemp("table-images")
    paths, labels = [], []
    for k in range(12):
        label = k % 2
        folder = root / CLASSES[label]
        folder.mkdir(exist_ok=True)
        path = folder / f"img_{k:02}.jpg"
        path.write_bytes(jpeg_bytes(photo(64 + 8 * k, 48 + 4 * k, seed=k)))
        paths.append(path)
        labels.append(label)
    return paths, labels


def _dataset(files: tuple[list[Path], list[int]]) -> datasets.Dataset:
    paths, labels = files
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=CLASSES)}
    )
    rows = {
        "image": [{"bytes": p.read_bytes(), "path": p.name} for p in paths],
        "label": labels,
    }
    return datasets.Dataset.from_dict(rows, features=features)


@pytest.fixture(scope="module")
def parquet(files, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The images' bytes in two Parquet files, as the Hub stores an image dataset."""
    folder = tmp_path_factory.mktemp("parquet")
    table = _dataset(files)
    table.select(range(7)).to_parquet(str(folder / "train-00000-of-00002.parquet"))
    table.select(range(7, 12)).to_parquet(str(folder / "train-00001-of-00002.parquet"))
    return folder


def _reference(files) -> fastload.ImageList:
    paths, labels = files
    return fastload.ImageList(paths, labels, T.Resize((32, 40)), classes=CLASSES)


def _all(dataset) -> tuple[torch.Tensor, list]:
    samples = [dataset[i] for i in range(len(dataset))]
    return torch.stack([x for x, _ in samples]), [y for _, y in samples]


def test_parquet_files_read_in_place_are_the_files_images(files, parquet: Path) -> None:
    table = fastload.ImageTable(parquet, T.Resize((32, 40)))
    want, labels = _all(_reference(files))
    got, targets = _all(table)
    assert torch.equal(got, want) and targets == labels
    assert table.classes == CLASSES  # from the files' Hugging Face metadata
    assert fastload.ImageTable(str(parquet / "*.parquet"), target=None)[3].shape == (3, 60, 88)


def test_a_datasets_dataset_is_read_in_its_own_order(files, parquet: Path, tmp_path) -> None:
    """load_dataset("parquet"), save_to_disk / load_from_disk, and a shuffled selection."""
    want, labels = _all(_reference(files))
    loaded = datasets.load_dataset(
        "parquet", data_files=str(parquet / "*.parquet"), split="train", cache_dir=str(tmp_path)
    )
    got, targets = _all(fastload.ImageTable(loaded, T.Resize((32, 40))))
    assert torch.equal(got, want) and targets == labels
    _dataset(files).save_to_disk(str(tmp_path / "saved"))
    shuffled = datasets.load_from_disk(str(tmp_path / "saved")).shuffle(seed=3).select(range(5))
    table = fastload.ImageTable(shuffled, T.Resize((32, 40)))
    assert len(table) == 5 and table.classes == CLASSES
    stored = shuffled.cast_column("image", datasets.Image(decode=False))
    order = [int(stored[i]["image"]["path"][4:6]) for i in range(5)]  # img_KK.jpg
    assert order != sorted(order)
    got, targets = _all(table)
    assert torch.equal(got, want[order]) and targets == [labels[k] for k in order]


def test_an_imagefolder_dataset_reads_its_paths(files, tmp_path: Path) -> None:
    """``load_dataset("imagefolder")`` keeps paths, not bytes: the files are read."""
    root = files[0][0].parent.parent
    loaded = datasets.load_dataset(
        "imagefolder", data_dir=str(root), split="train", cache_dir=str(tmp_path)
    )
    table = fastload.ImageTable(loaded, T.Resize((32, 40)))
    assert len(table) == 12 and table.classes == CLASSES
    reference = {p.name: i for i, p in enumerate(files[0])}
    want, _ = _all(_reference(files))
    for i in range(len(table)):
        k = reference[Path(table.path(i).split("(")[1].rstrip(")")).name]
        image, label = table[i]
        assert torch.equal(image, want[k]) and label == files[1][k]


def test_a_url_is_read_through_fsspec(files, parquet: Path) -> None:
    memory = fsspec.filesystem("memory")
    for path in sorted(parquet.iterdir()):
        memory.pipe(f"/tables/{path.name}", path.read_bytes())
    table = fastload.ImageTable("memory://tables", T.Resize((32, 40)))
    want, labels = _all(_reference(files))
    got, targets = _all(table)
    assert torch.equal(got, want) and targets == labels


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_torchs_for_a_class_and_a_text_target(files, workers: int) -> None:
    """Through fastload's loader (the batch decoded into one tensor) and torch's, the same
    batches: int64 labels, captions as a tuple of str."""
    table = pa.table(
        {
            "jpg": [p.read_bytes() for p in files[0]],
            "label": files[1],
            "text": [f"photo {k}" for k in range(12)],
        }
    )
    for target in ("label", "text"):
        dataset = fastload.ImageTable(table, T.Resize((32, 40)), image="jpg", target=target)
        ours = list(fastload.DataLoader(dataset, batch_size=5, num_workers=workers))
        torchs = list(torch.utils.data.DataLoader(dataset, batch_size=5, num_workers=workers))
        for (a, y), (b, z) in zip(ours, torchs, strict=True):
            assert torch.equal(a, b) and type(y) is type(z)
            assert torch.equal(y, z) if isinstance(y, torch.Tensor) else y == z, (y, z)


def test_a_bad_row_is_named_by_its_file_and_row(files, tmp_path: Path) -> None:
    table = pa.table({"image": [files[0][0].read_bytes(), b"not a jpeg"], "label": [0, 1]})
    pq.write_table(table, tmp_path / "bad.parquet")
    raising = fastload.ImageTable(tmp_path / "bad.parquet")
    with pytest.raises(fastload.ImageDecodeError, match=r"bad\.parquet row 1"):
        raising[1]
    skipping = fastload.ImageTable(tmp_path / "bad.parquet", T.Resize((8, 8)), on_error="skip")
    with pytest.warns(fastload.UnreadableImageWarning):
        batches = list(fastload.DataLoader(skipping, batch_size=2))
    assert batches[0][0].shape == (1, 3, 8, 8)
    assert any("bad.parquet row 1" in name for name in skipping.bad_files)


def test_bad_sources_and_columns_say_what_there_is(parquet: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"column 'img' is not in .* image, label"):
        fastload.ImageTable(parquet, image="img")
    with pytest.raises(ValueError, match="no Parquet file at"):
        fastload.ImageTable(tmp_path / "nothing-*.parquet")


def test_a_datasets_dataset_given_to_the_loader_is_pointed_at_imagetable(files) -> None:
    """Its with_transform runs as written, and explain says how to have it fused."""
    ds = _dataset(files).with_transform(lambda batch: batch)
    loader = fastload.DataLoader(ds, batch_size=4, accelerate=True)
    assert not loader.acceleration.accelerated
    assert "fastload.ImageTable(dataset, transform)" in str(loader.acceleration)


@pytest.fixture(scope="module")
def grouped(files, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The images in two Parquet files of row groups of 3 rows (7 rows: 3 + 3 + 1, then 5:
    3 + 2)."""
    folder = tmp_path_factory.mktemp("grouped")
    table = _dataset(files).with_format("arrow")[:]
    pq.write_table(table.slice(0, 7), folder / "train-0.parquet", row_group_size=3)
    pq.write_table(table.slice(7), folder / "train-1.parquet", row_group_size=3)
    return folder


def test_row_groups_read_as_asked_are_the_files_images(files, grouped: Path) -> None:
    """in_memory=False: the same images, targets and classes, each process keeping only the
    last row groups it read; the row groups are the table's shards."""
    from fastload.datasets import row_groups

    table = fastload.ImageTable(grouped, T.Resize((32, 40)), in_memory=False)
    assert table.shard_sizes == [3, 3, 1, 3, 2] and len(table) == 12
    assert table.classes == CLASSES
    want, labels = _all(_reference(files))
    got, targets = _all(table)
    assert torch.equal(got, want) and targets == labels
    kept = table._groups._kept
    assert len(kept) <= row_groups.KEPT and sorted(kept) == [0, 1, 2, 3, 4]
    assert table.path(8) == f"{grouped / 'train-1.parquet'} row 1 (img_08.jpg)"


@pytest.mark.parametrize("workers", [0, 2])
def test_row_groups_under_the_shard_sampler_give_every_sample_once(
    files, grouped: Path, workers: int
) -> None:
    """fastload.ShardSampler orders the samples a few row groups at a time; forked worker
    processes read their own row groups."""
    table = fastload.ImageTable(grouped, T.Resize((32, 40)), in_memory=False)
    sampler = fastload.ShardSampler(table, window=2, seed=1, num_replicas=1, rank=0)
    loader = fastload.DataLoader(table, batch_size=4, sampler=sampler, num_workers=workers)
    want, _ = _all(_reference(files))
    order = list(iter(sampler))
    images = torch.cat([x for x, _ in loader])
    assert sorted(order) == list(range(12)) and order != list(range(12))
    sampler.set_epoch(0)
    assert torch.equal(images, want[list(iter(sampler))])


def test_row_groups_are_only_for_parquet_files_and_a_stream_is_pointed_at_them(
    files, grouped: Path
) -> None:
    with pytest.raises(ValueError, match="in_memory=False reads Parquet files"):
        fastload.ImageTable(_dataset(files), in_memory=False)
    streaming = datasets.load_dataset(
        "parquet", data_files=str(grouped / "*.parquet"), split="train", streaming=True
    )
    with pytest.raises(TypeError, match="ImageTableStream, or give ImageTable its Parquet"):
        fastload.ImageTable(streaming)
    with pytest.raises(TypeError, match="ImageTable with in_memory=False"):
        fastload.ShardSampler(fastload.ImageTable(grouped))


@pytest.fixture(scope="module")
def stream(files, grouped: Path) -> datasets.IterableDataset:
    """The Parquet files as ``datasets`` streams them (``streaming=True``)."""
    return datasets.load_dataset(
        "parquet", data_files=str(grouped / "*.parquet"), split="train", streaming=True
    )


def test_a_stream_gives_the_files_images_in_its_order(files, stream) -> None:
    table = fastload.ImageTableStream(stream, T.Resize((32, 40)))
    assert table.classes == CLASSES
    want, labels = _all(_reference(files))
    samples = list(table)
    assert torch.equal(torch.stack([x for x, _ in samples]), want)
    assert [y for _, y in samples] == labels
    with pytest.raises(TypeError, match="a stream has no length"):
        len(table)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_batches_as_torchs_loader_batches_it(files, stream, workers: int) -> None:
    """In worker processes ``datasets`` gives each worker its files: the same batches as
    torch's loader, every row once."""
    table = fastload.ImageTableStream(stream, T.Resize((32, 40)))
    ours = list(fastload.DataLoader(table, batch_size=4, num_workers=workers))
    torchs = list(torch.utils.data.DataLoader(table, batch_size=4, num_workers=workers))
    for (a, y), (b, z) in zip(ours, torchs, strict=True):
        assert torch.equal(a, b) and torch.equal(y, z)
    assert sorted(torch.cat([y for _, y in ours]).tolist()) == sorted(files[1])


def test_a_streams_pipeline_is_accelerated_and_its_bad_rows_named(
    files, stream, tmp_path: Path
) -> None:
    pipeline = v2.Compose(
        [v2.RandomResizedCrop(24), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    )
    loader = fastload.DataLoader(
        fastload.ImageTableStream(stream, pipeline), batch_size=6, accelerate=True
    )
    assert loader.acceleration.accelerated and loader.acceleration.dtype == "float32"
    images, _ = next(iter(loader))
    assert images.shape == (6, 3, 24, 24) and images.dtype == torch.float32
    # a stream given to the loader as it is runs as written, and explain names the class
    plain = fastload.DataLoader(stream, batch_size=4, accelerate=True)
    assert "fastload.ImageTableStream(stream, transform)" in str(plain.acceleration)
    table = pa.table({"image": [files[0][0].read_bytes(), b"not a jpeg"], "label": [0, 1]})
    pq.write_table(table, tmp_path / "bad.parquet")
    bad = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "bad.parquet"), split="train", streaming=True
    )
    with pytest.raises(fastload.ImageDecodeError, match="the stream row 1"):
        list(fastload.ImageTableStream(bad))
    skipping = fastload.ImageTableStream(bad, T.Resize((8, 8)), on_error="skip")
    with pytest.warns(fastload.UnreadableImageWarning):
        batches = list(fastload.DataLoader(skipping, batch_size=2))
    assert batches[0][0].shape == (1, 3, 8, 8)
    with pytest.raises(TypeError, match=r"fastload\.ImageTableStream"):
        fastload.ImageTable(stream)
