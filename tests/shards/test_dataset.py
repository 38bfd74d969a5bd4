"""ImageShards against ImageFolder on the same bytes, under every loader feature; and the shards
exchanged both ways with the real webdataset package and DALI's own webdataset reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from shardsets import class_folder

import fastload
from fastload import gpu as G
from fastload import transforms as T


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return class_folder(tmp_path_factory.mktemp("photos"), classes=3, per_class=8)


@pytest.fixture(scope="module")
def packed(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "out"
    fastload.pack(folder, out, shard_size=20_000, workers=2, progress=False)
    return out


def _by_path(shards: fastload.ImageShards, folder: Path) -> list[tuple[int, int]]:
    """(shard sample, folder sample) pairs of the same file, through each sample's KEY.json."""
    reference = fastload.ImageFolder(folder)
    where = {os.path.relpath(p, folder): i for i, (p, _) in enumerate(reference.samples)}
    pairs = []
    for i in range(len(shards)):
        meta = json.loads(_member(shards, i, "json"))
        pairs.append((i, where[meta["path"]]))
    return pairs


def _member(shards: fastload.ImageShards, i: int, ext: str) -> bytes:
    """A member of a sample, read through webdataset (an independent reader)."""
    shard = shards.shard_of(i)
    for sample in wds.WebDataset(shard, shardshuffle=False, empty_check=False):
        if sample["__key__"] == shards.key(i):
            return sample[ext]
    raise KeyError(i)


@pytest.mark.parametrize("backend", ["region", "turbojpeg", "opencv", "pillow"])
def test_same_bytes_give_the_same_pixels_as_the_folder(
    folder: Path, packed: Path, backend: str, require_backend
) -> None:
    require_backend(backend)
    transform = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])
    shards = fastload.ImageShards(packed, transform, backend=backend)
    files = fastload.ImageFolder(folder, transform, backend=backend)
    assert shards.classes == files.classes
    for i, j in _by_path(shards, folder):
        key = fastload.sampling.SampleKey
        image, label = shards[key(i, seed=123 + i)]
        expected, expected_label = files[key(j, seed=123 + i)]
        assert torch.equal(image, expected) and label == expected_label


def test_sources_name_the_same_samples(packed: Path) -> None:
    by_folder = fastload.ImageShards(packed)
    tars = sorted(str(p) for p in packed.glob("*.tar"))
    last = len(tars) - 1
    for source in (
        packed / "manifest.json",
        str(packed / f"shard-{{000000..{last:06d}}}.tar"),
        tars,
        f"file://{packed}",
    ):
        other = fastload.ImageShards(source)
        assert [other.key(i) for i in range(len(other))] == [
            by_folder.key(i) for i in range(len(by_folder))
        ]
    assert by_folder.shard_of(0) == tars[0] and by_folder.shard_of(len(by_folder) - 1) == tars[-1]
    assert by_folder.shard_sizes.sum() == len(by_folder) == 24


def test_labels_and_targets_come_from_the_cls_members(folder: Path, packed: Path) -> None:
    shards = fastload.ImageShards(packed)
    files = fastload.ImageFolder(folder)
    pairs = _by_path(shards, folder)
    assert [shards.targets[i] for i, _ in pairs] == [files.targets[j] for _, j in pairs]
    assert shards.labels.dtype == np.int64 and not shards.labels.flags.writeable


def test_webdataset_reads_the_pack_same_keys_bytes_labels(folder: Path, packed: Path) -> None:
    shards = fastload.ImageShards(packed)
    tars = sorted(str(p) for p in packed.glob("*.tar"))
    read = list(wds.WebDataset(tars, shardshuffle=False, empty_check=False))
    assert [s["__key__"] for s in read] == [shards.key(i) for i in range(len(shards))]
    for i, sample in enumerate(read):
        data, label = shards.read_sample(i)
        meta = json.loads(sample["json"])
        assert sample["jpg"] == data == (folder / meta["path"]).read_bytes()
        assert int(sample["cls"]) == label


def test_fastload_reads_shardwriters_shards_through_a_brace_pattern(
    folder: Path, tmp_path: Path
) -> None:
    files = fastload.ImageFolder(folder)
    written = []
    with wds.ShardWriter(str(tmp_path / "wds-%04d.tar"), maxcount=5, verbose=0) as sink:
        for i, (path, label) in enumerate(files.samples):
            key = f"sample{i:05d}"
            sink.write({"__key__": key, "jpg": Path(path).read_bytes(), "cls": label})
            written.append((key, path, label))
    shards = fastload.ImageShards(str(tmp_path / "wds-{0000..0004}.tar"))
    assert len(shards) == len(written) and len(shards.shards) == 5
    for i, (key, path, label) in enumerate(written):
        assert shards.key(i) == key and shards.read_sample(i) == (Path(path).read_bytes(), label)
        image, target = shards[i]
        assert torch.equal(image, files[i][0]) and target == label


def test_dalis_own_reader_reads_the_pack_with_its_indexes(packed: Path, require_backend) -> None:
    require_backend("dali")
    from nvidia.dali import fn, pipeline_def

    tars = sorted(str(p) for p in packed.glob("*.tar"))
    shards = fastload.ImageShards(packed)

    @pipeline_def(batch_size=len(shards), num_threads=1, device_id=None)
    def read():
        jpg, cls = fn.readers.webdataset(
            paths=tars,
            index_paths=[t[:-4] + ".idx" for t in tars],
            ext=["jpg", "cls"],
            missing_component_behavior="error",
        )
        return jpg, cls

    pipe = read()
    pipe.build()
    jpgs, labels = pipe.run()
    for i in range(len(shards)):
        data, label = shards.read_sample(i)
        assert bytes(np.asarray(jpgs[i])) == data and int(bytes(np.asarray(labels[i]))) == label


def test_the_loader_runs_it_with_workers_and_resumes(packed: Path) -> None:
    def loader() -> fastload.DataLoader:
        shards = fastload.ImageShards(packed, T.RandomResizedCrop(32))
        return fastload.DataLoader(
            shards,
            batch_size=4,
            num_workers=2,
            sampler=fastload.ShardSampler(shards, window=2, seed=5),
            generator=torch.Generator().manual_seed(1),
        )

    whole = list(loader())
    assert sum(len(y) for _, y in whole) == 24
    first = loader()
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(whole) - 2
    for (x, y), (xw, yw) in zip(rest, whole[2:], strict=True):
        assert torch.equal(x, xw) and torch.equal(y, yw)


@pytest.mark.parametrize("backend", ["dali", "nvimgcodec"])
def test_batch_executors_read_the_members(
    folder: Path, packed: Path, backend: str, require_backend
) -> None:
    require_backend(backend)
    transform = T.Compose([T.Resize(40), T.CenterCrop(32)])
    shards = fastload.ImageShards(packed, transform)
    files = fastload.ImageFolder(folder, transform)
    order = [j for _, j in _by_path(shards, folder)]
    ops = G.Compose([G.RandomHorizontalFlip(p=0.0), G.Normalize([0.5] * 3, [0.25] * 3)])
    executed = list(
        fastload.DataLoader(shards, batch_size=8, backend=backend, batch_transforms=ops)
    )
    images = torch.cat([x for x, _ in executed])
    labels = torch.cat([y for _, y in executed])
    stacked = torch.stack([files[j][0] for j in order]).float()
    expected = (stacked / 255 - 0.5) / 0.25
    assert labels.tolist() == [files.targets[j] for j in order]
    assert (images - expected).abs().mean() < 0.05  # the executors' resamplers differ a little


def test_pickles_without_open_files_and_reads_after(packed: Path) -> None:
    import pickle

    shards = fastload.ImageShards(packed)
    first = shards.read_sample(0)
    again = pickle.loads(pickle.dumps(shards))
    assert again.read_sample(0) == first and len(again) == len(shards)


def test_open_files_stay_bounded_however_many_shards(tmp_path: Path, folder: Path) -> None:
    from fastload.shards.storage import local

    out = tmp_path / "many"
    fastload.pack(folder, out, shard_size=4096, workers=1, progress=False)  # a shard a sample
    shards = fastload.ImageShards(out)
    assert len(shards.shards) == len(shards)
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(len(shards)):
        shards.read_sample(i)
    assert len(os.listdir("/proc/self/fd")) - fds <= local.OPEN_PER_THREAD


@pytest.mark.gpu
def test_batches_on_a_cuda_device_equal_the_folders(folder: Path, packed: Path) -> None:
    transform = T.Compose([T.Resize(40), T.CenterCrop(32)])
    shards = fastload.ImageShards(packed, transform, backend="turbojpeg")
    files = fastload.ImageFolder(folder, transform, backend="turbojpeg")
    order = [j for _, j in _by_path(shards, folder)]
    ops = G.Normalize([0.5] * 3, [0.25] * 3)
    loader = fastload.DataLoader(shards, batch_size=8, device="cuda", batch_transforms=ops)
    images = torch.cat([x.cpu() for x, _ in loader])
    expected = (torch.stack([files[j][0] for j in order]).float() / 255 - 0.5) / 0.25
    assert torch.allclose(images, expected, atol=1e-5)


def test_accelerate_runs_a_torchvision_pipeline_on_shards_as_on_the_folder(
    folder: Path, packed: Path
) -> None:
    import torchvision.transforms as TV

    pipeline = TV.Compose(
        [TV.Resize(40), TV.CenterCrop(32), TV.ToTensor(), TV.Normalize([0.5] * 3, [0.25] * 3)]
    )
    shards = fastload.ImageShards(packed, pipeline)
    files = fastload.ImageFolder(folder, pipeline)
    order = [j for _, j in _by_path(shards, folder)]
    loader = fastload.DataLoader(shards, batch_size=8, accelerate=True)
    assert loader.acceleration.accelerated
    fast = list(loader)
    images = torch.cat([x for x, _ in fast])
    stock = torch.stack([files[j][0] for j in order])  # torchvision's own ops, per image
    assert images.dtype == stock.dtype == torch.float32
    difference = float((images - stock).abs().mean()) * 0.25 * 255  # in 0..255 units
    assert difference < 0.5, difference  # the README: within 0.4 of 255 on average


def test_a_subset_serves_its_samples_in_order_and_shard_sampler_orders_an_ascending_one(
    packed: Path,
) -> None:
    shards = fastload.ImageShards(packed)
    picked = [7, 2, 2, len(shards) - 1]
    subset = shards.subset(picked)
    assert len(subset) == 4 and subset.bad_files is shards.bad_files
    assert [subset.read_sample(i) for i in range(4)] == [shards.read_sample(i) for i in picked]
    assert subset.labels.tolist() == shards.labels[picked].tolist()
    ascending = shards.subset(range(1, len(shards), 2))
    order = list(fastload.ShardSampler(ascending, seed=0))
    assert sorted(order) == list(range(len(ascending)))
    with pytest.raises(ValueError, match="not in their shards' order"):
        fastload.ShardSampler(shards.subset([len(shards) - 1, 0]))
