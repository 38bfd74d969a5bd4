"""A COCO dataset packed as shards (``fastload.pack`` of a ``CocoDetection``) and read back with
``CocoShards``: the same samples as the folder, through torchvision's own wrapped dataset and
the references' pipelines, locally, from S3 on loopback, and from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from cocosets import coco_set
from remotes import uploaded
from test_detection_ops import assert_same_sample, collate, detection_train, wrapped
from torchvision.datasets import CocoDetection as TorchvisionCoco

import fastload
from fastload.accelerate import accelerate_dataset
from fastload.detection import CocoDetection, CocoShards
from fastload.testing import S3Server


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return coco_set(tmp_path_factory.mktemp("coco"), images=9, empty=(4,))


@pytest.fixture(scope="module")
def packed(coco: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The set packed from torchvision's own wrapped dataset, a few images a shard."""
    out = tmp_path_factory.mktemp("packed") / "pack"
    theirs = wrapped(*coco, None, masks=True)
    fastload.pack(theirs, out, shard_size=150_000, progress=False)
    return out


def by_image_id(dataset: Any) -> dict[int, int]:
    return {image_id: i for i, image_id in enumerate(dataset.ids)}


def test_the_pack_holds_each_image_its_annotations_and_the_categories(
    coco: tuple[Path, Path], packed: Path
) -> None:
    document = json.loads(coco[1].read_text())
    manifest = json.loads((packed / "manifest.json").read_text())
    assert manifest["categories"] == document["categories"] and manifest["classes"] == []
    assert len(manifest["shards"]) > 1 and manifest["samples"] == len(document["images"])
    raw = fastload.ImageShards(packed, target="json")
    names = {entry["id"]: entry["file_name"] for entry in document["images"]}
    seen = set()
    for i in range(len(raw)):
        image, member = raw.read_sample(i)
        image_id = member["image_id"]
        assert image == (coco[0] / names[image_id]).read_bytes()  # the file's bytes
        expected = [a for a in document["annotations"] if a["image_id"] == image_id]
        assert member["annotations"] == expected
        assert member["path"] == names[image_id]
        seen.add(image_id)
    assert seen == set(names)
    assert not any(name.endswith(".cls") for name in _members(packed))


def _members(pack: Path) -> list[str]:
    import tarfile

    names = []
    for shard in sorted(pack.glob("*.tar")):
        with tarfile.open(shard) as tar:
            names += tar.getnames()
    return names


def test_the_shards_give_the_folders_samples(coco: tuple[Path, Path], packed: Path) -> None:
    folder = CocoDetection(*coco, target_keys="all")
    shards = CocoShards(packed, target_keys="all")
    assert len(shards) == len(folder) and shards.categories == folder.categories
    where = by_image_id(folder)
    for i in range(len(shards)):
        image, target = shards[i]
        assert_same_sample((image, target), folder[where[target["image_id"]]], where=shards.path(i))


def test_seekable_shards_give_the_folders_samples(
    coco: tuple[Path, Path], tmp_path: Path, require_backend
) -> None:
    """``pixels="seekable"`` keeps each image's pixels and EXIF orientation, so its boxes and
    masks stay where they are."""
    require_backend("region")
    fastload.pack(CocoDetection(*coco), tmp_path / "seekable", pixels="seekable", progress=False)
    folder = CocoDetection(*coco, target_keys="all")
    shards = CocoShards(tmp_path / "seekable", target_keys="all")
    where = by_image_id(folder)
    for i in range(len(shards)):
        image, target = shards[i]
        assert_same_sample((image, target), folder[where[target["image_id"]]], where=shards.path(i))


@pytest.mark.parametrize("augmentation", ["multiscale", "ssd"])
def test_the_references_presets_on_the_shards_give_torchvisions_samples(
    coco: tuple[Path, Path], packed: Path, augmentation: str
) -> None:
    """The same v2 pipeline on torchvision's dataset of the folder, and accelerated on the
    shards: for the same image and seed, the same sample."""
    theirs = wrapped(*coco, detection_train(augmentation), masks=True)
    given = CocoShards(
        packed, detection_train(augmentation), target_keys=["boxes", "labels", "image_id", "masks"]
    )
    fast, translated = accelerate_dataset(given, batches=False)
    assert isinstance(fast, CocoShards) and translated.fused
    where = by_image_id(theirs)
    for i in range(len(fast)):
        image_id = fast.read_sample(i)[1]["image_id"]
        if image_id == theirs.ids[4]:
            continue  # no annotations: torchvision's preset refuses it (tested elsewhere)
        torch.manual_seed(i)
        expected = theirs[where[image_id]]
        torch.manual_seed(i)
        assert_same_sample(fast[i], expected, where=f"{augmentation} {fast.path(i)}")


def with_annotations(dataset: CocoShards) -> list[int]:
    """The samples with annotations: what the references' training set keeps."""
    return [i for i in range(len(dataset)) if dataset.read_sample(i)[1]["annotations"]]


def test_the_references_subset_in_workers_with_their_collate(packed: Path) -> None:
    dataset = CocoShards(packed, detection_train("multiscale"), target_keys="all")
    kept = with_annotations(dataset)
    assert len(kept) == len(dataset) - 1
    loader = fastload.DataLoader(
        torch.utils.data.Subset(dataset, kept),
        batch_size=2,
        shuffle=True,
        num_workers=2,
        collate_fn=collate,
        accelerate=True,
    )
    assert "accelerated in part" in fastload.explain(loader)
    seen: list[int] = []
    for images, targets in loader:
        for image, target in zip(images, targets, strict=True):
            assert image.dtype == torch.float32 and image.shape[0] == 3
            assert target["boxes"].shape[0] == target["masks"].shape[0]
            seen.append(int(target["image_id"]))
    assert len(seen) == len(kept) == len(set(seen))  # every image once


def test_shard_sampler_orders_a_subset_by_shard(packed: Path) -> None:
    dataset = CocoShards(packed, target_keys="all")
    kept = dataset.subset(with_annotations(dataset))
    loader = fastload.DataLoader(
        kept,
        batch_size=2,
        sampler=fastload.ShardSampler(kept, seed=3),
        num_workers=2,
        collate_fn=collate,
    )
    ids = [int(t["image_id"]) for _, targets in loader for t in targets]
    assert sorted(ids) == sorted(int(kept.read_sample(i)[1]["image_id"]) for i in range(len(kept)))
    with pytest.raises(ValueError, match="not in their shards' order"):
        fastload.ShardSampler(dataset.subset([len(dataset) - 1, 0]))


def test_a_pack_on_s3_reads_as_the_local_one(packed: Path, tmp_path: Path) -> None:
    with S3Server() as s3:
        url = uploaded(s3, packed)
        remote = CocoShards(
            url,
            target_keys="all",
            storage_options=s3.storage_options(),
            cache_dir=tmp_path / "cache",
        )
        local = CocoShards(packed, target_keys="all")
        assert len(remote) == len(local) and remote.categories == local.categories
        for i in range(len(local)):
            assert_same_sample(remote[i], local[i], where=remote.path(i))


def test_shards_without_coco_annotations_are_one_error_naming_the_sample_or_skipped(
    tmp_path: Path,
) -> None:
    from shardsets import class_folder

    photos = class_folder(tmp_path / "photos", classes=2, per_class=3, size=64)
    fastload.pack(photos, tmp_path / "pack", progress=False)  # .json: path and size only
    dataset = CocoShards(tmp_path / "pack")
    with pytest.raises(fastload.ImageDecodeError, match=r"not a COCO image's 'image_id'"):
        dataset[0]
    skipping = CocoShards(tmp_path / "pack", on_error="skip")
    assert isinstance(skipping[0], fastload.Skipped) and len(skipping.bad_files) == 1


def test_pack_refuses_to_re_encode_a_coco_dataset(coco: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"max_side=320 would re-encode the images of a COCO"):
        fastload.pack(CocoDetection(*coco), tmp_path / "out", max_side=320, progress=False)
    plain = TorchvisionCoco(str(coco[0]), str(coco[1]))  # unwrapped: a COCO dataset too
    manifest = fastload.pack(plain, tmp_path / "plain", progress=False)
    assert manifest.samples == len(plain) and manifest.categories


def test_the_command_packs_a_coco_folder(coco: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "fastload", "pack", str(coco[0]), str(out)]
    done = subprocess.run(
        [*command, "--coco", str(coco[1])], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "fastload.detection.CocoShards" in done.stdout
    assert len(CocoShards(out)) == len(CocoDetection(*coco))
    missing = subprocess.run(
        [*command[:-1], str(tmp_path / "other"), "--coco", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 1 and "none.json" in missing.stderr
