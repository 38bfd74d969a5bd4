"""fastload's epochs on a real Ray (started on this machine inside the tests): the same batches
as the loader itself, decoded in Ray's worker processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as TV

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.gpu.functional import normalizing_of
from fastload.gpu.stage import BatchStage
from fastload.memory.buffers import BatchRing
from fastload.ray.delivery import regroup
from fastload.ray.reading import read_batches
from fastload.sampling import KeyedBatch, SampleKey
from fastload.synthetic import make_image_folder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("ray") / "set", images=23, classes=3)


def assert_same_batches(ours: list[Any], theirs: list[Any]) -> None:
    assert len(ours) == len(theirs)
    for k, (mine, expected) in enumerate(zip(ours, theirs, strict=True)):
        images, labels = mine
        assert torch.equal(images, expected[0]), k
        assert torch.equal(labels, expected[1]), k


def test_an_epoch_on_ray_gives_the_loaders_batches(local_ray: Any, photos: Path) -> None:
    """Two epochs of a shuffled fastload dataset with batch ops that draw: the same images,
    labels and draws (the last batch short), decoded in Ray tasks."""

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(
            photos, T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])
        )
        ops = gpu.Compose([gpu.ColorJitter(0.4, 0.4, 0.4, 0.1), gpu.Normalize(MEAN, STD)])
        return fastload.DataLoader(
            dataset,
            batch_size=5,
            shuffle=True,
            generator=torch.Generator().manual_seed(7),
            batch_transforms=ops,
        )

    theirs, ours = loader(), loader()
    for _ in range(2):
        expected = list(theirs)
        got = list(fastload.ray.batches(fastload.ray.epoch_dataset(ours), ours))
        assert [len(b[0]) for b in got] == [5, 5, 5, 5, 3]
        assert got[0][0].dtype == torch.float32
        assert_same_batches(got, expected)


def test_a_cpu_loaders_batch_ops_run_in_the_ray_tasks_as_in_its_workers(
    local_ray: Any, photos: Path
) -> None:
    """A loader on the CPU runs its batch ops in its workers: on Ray, the tasks run them (the
    blocks carry float32), and channels-last batches come back channels-last, the loader's."""

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(photos, T.Compose([T.RandomResizedCrop(20)]))
        ops = gpu.Compose([gpu.ColorJitter(0.4, 0.4, 0.4), gpu.Normalize(MEAN, STD)])
        generator = torch.Generator().manual_seed(3)
        return fastload.DataLoader(
            dataset,
            batch_size=4,
            shuffle=True,
            generator=generator,
            batch_transforms=ops,
            channels_last=True,
        )

    theirs, ours = loader(), loader()
    epoch = fastload.ray.epoch_dataset(ours)
    got = list(fastload.ray.batches(epoch, ours))
    assert all(images.is_contiguous(memory_format=torch.channels_last) for images, _ in got)
    assert_same_batches(got, list(theirs))
    block = epoch.take_batch(4, batch_format="numpy")["image"]
    assert block.dtype == np.float32 and block.shape[1:] == (20, 20, 3)  # N x H x W x C


def test_an_unchanged_torchvision_pipeline_through_accelerate(local_ray: Any, photos: Path) -> None:
    """torchvision's ImageFolder and train transform, swapped with accelerate=True and each
    sample's own draws (seeding="sample"): the crop fused with decoding in Ray, the conversion
    and Normalize on the batches here."""
    transform = TV.Compose(
        [
            TV.RandomResizedCrop(32),
            TV.RandomHorizontalFlip(),
            TV.ToTensor(),
            TV.Normalize(MEAN, STD),
        ]
    )

    def loader() -> fastload.DataLoader:
        dataset = torchvision.datasets.ImageFolder(str(photos), transform=transform)
        generator = torch.Generator().manual_seed(3)
        return fastload.DataLoader(
            dataset,
            batch_size=8,
            shuffle=True,
            generator=generator,
            accelerate=True,
            seeding="sample",
        )

    theirs, ours = loader(), loader()
    assert ours.acceleration.accelerated and ours.plan.batch_ops is not None
    assert_same_batches(
        list(fastload.ray.batches(fastload.ray.epoch_dataset(ours), ours)), list(theirs)
    )


def test_an_epoch_stopped_on_ray_resumes_exactly_in_another_loader(
    local_ray: Any, photos: Path
) -> None:
    """Two batches of an epoch read through Ray, the loader's state saved; a loader made the
    same way loads it: the rest of that epoch on Ray (no batch replayed), then the next epoch,
    as the uninterrupted loader gives them."""

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(photos, T.Compose([T.RandomResizedCrop(24)]))
        ops = gpu.ColorJitter(0.4, 0.4, 0.4, 0.1)
        generator = torch.Generator().manual_seed(11)
        return fastload.DataLoader(
            dataset, batch_size=5, shuffle=True, generator=generator, batch_transforms=ops
        )

    uninterrupted = loader()
    expected = list(uninterrupted) + list(uninterrupted)
    first = loader()
    stream = fastload.ray.batches(fastload.ray.epoch_dataset(first), first)
    got = [next(stream), next(stream)]
    state = first.state_dict()
    stream.close()  # the run stops here: its Ray execution with it
    assert state["epochs"]["in_epoch"] and state["epochs"]["batches"] == 2
    resumed = loader()
    resumed.load_state_dict(state)
    rest = fastload.ray.epoch_dataset(resumed)
    got += list(fastload.ray.batches(rest, resumed))
    assert not resumed.state_dict()["epochs"]["in_epoch"]  # the epoch ran to its end
    got += list(fastload.ray.batches(fastload.ray.epoch_dataset(resumed), resumed))
    assert_same_batches(got, expected)


def test_unreadable_images_skipped_on_ray_as_the_loader_skips_them(
    local_ray: Any, tmp_path: Path
) -> None:
    """``on_error="skip"``: the same batches as the loader's (a batch whose every file is
    unreadable dropped whole), the same files recorded, the same warning, and a state taken
    after the dropped batch that the loader's own pass would give there."""
    photos = make_image_folder(tmp_path / "set", images=11, classes=2)
    files = sorted(photos.rglob("*.jpg"))
    for broken in (files[1], files[3], files[4], files[5]):  # the second batch of 3: all
        broken.write_bytes(broken.read_bytes()[:200])

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(photos, T.Compose([T.CenterCrop(16)]), on_error="skip")
        return fastload.DataLoader(dataset, batch_size=3, batch_transforms=gpu.Normalize(MEAN, STD))

    theirs, ours = loader(), loader()
    with pytest.warns(UserWarning, match="skipped 4 unreadable") as expected_warning:
        expected = list(theirs)
    with pytest.warns(UserWarning, match="skipped 4 unreadable") as our_warning:
        got = list(fastload.ray.batches(fastload.ray.epoch_dataset(ours), ours))
    assert str(our_warning[0].message) == str(expected_warning[0].message)
    assert [len(images) for images, _ in got] == [2, 3, 2]  # 3 batches of 4: one dropped
    assert_same_batches(got, expected)
    assert ours.dataset.bad_files == theirs.dataset.bad_files
    assert set(ours.dataset.bad_files) == {str(files[k]) for k in (1, 3, 4, 5)}

    theirs, ours = loader(), loader()
    torch_pass = iter(theirs)
    ray_pass = fastload.ray.batches(fastload.ray.epoch_dataset(ours), ours)
    for _ in range(2):  # the first batch, then the third (the second was dropped)
        next(torch_pass), next(ray_pass)
    mine, expected_state = ours.state_dict()["epochs"], theirs.state_dict()["epochs"]
    assert mine.keys() == expected_state.keys()
    for name, value in expected_state.items():
        assert repr(mine[name]) == repr(value), name
    ray_pass.close()


class DiesOnce:
    """A target transform that kills the process running it the first time it runs anywhere
    (a file marks that it did): a Ray worker lost mid-epoch."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __call__(self, target: int) -> int:
        if not self.marker.exists():
            self.marker.touch()
            os._exit(1)
        return target


def test_a_ray_worker_killed_mid_epoch_costs_no_sample(
    local_ray: Any, photos: Path, tmp_path: Path
) -> None:
    """The process decoding a batch dies; Ray runs its task again, which reads the same keys
    with the same seeds: the epoch is the loader's, every sample once."""

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(
            photos,
            T.Compose([T.RandomResizedCrop(24)]),
            target_transform=DiesOnce(tmp_path / "died"),
        )
        generator = torch.Generator().manual_seed(2)
        return fastload.DataLoader(dataset, batch_size=5, shuffle=True, generator=generator)

    on_ray = loader()
    got = list(fastload.ray.batches(fastload.ray.epoch_dataset(on_ray), on_ray))
    assert (tmp_path / "died").exists()  # a worker did die
    assert_same_batches(got, list(loader()))


def test_a_broken_image_on_ray_is_the_loaders_error_naming_it(
    local_ray: Any, tmp_path: Path
) -> None:
    photos = make_image_folder(tmp_path / "set", images=6, classes=2)
    broken = sorted(photos.rglob("*.jpg"))[3]
    broken.write_bytes(broken.read_bytes()[:200])  # a truncated JPEG
    loader = fastload.DataLoader(
        fastload.ImageFolder(photos, T.Compose([T.CenterCrop(16)])), batch_size=3
    )
    with pytest.raises(fastload.ImageDecodeError, match=broken.name):
        list(fastload.ray.batches(fastload.ray.epoch_dataset(loader), loader))


def test_the_decoding_runs_in_rays_worker_processes(local_ray: Any, photos: Path) -> None:
    dataset = fastload.ImageFolder(
        photos, T.Compose([T.CenterCrop(16)]), target_transform=lambda _: os.getpid()
    )
    loader = fastload.DataLoader(dataset, batch_size=6)
    pids = {
        int(pid)
        for _, labels in fastload.ray.batches(fastload.ray.epoch_dataset(loader), loader)
        for pid in labels
    }
    assert pids and os.getpid() not in pids


class AsksForStacked(fastload.ImageFolder):
    """An ImageFolder that records the normalizing each stacked batch is asked for."""

    asked: ClassVar[list[Any]] = []

    def load_stacked(self, keys: list[Any], *, normalizing: Any = None) -> Any:
        self.asked.append(normalizing)
        return super().load_stacked(keys, normalizing=normalizing)


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_ray_task_has_the_batch_decoded_normalized_as_a_worker_does(
    local_ray: Any, photos: Path, channels_last: bool
) -> None:
    """Where the batch ops start with a float32 Normalize, a task asks the dataset for the
    batch normalized as it is decoded (no uint8 batch), runs only the ops after it, and gives
    the values of the whole stage on the uint8 batch."""
    dataset = AsksForStacked(photos, T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()]))
    ops = gpu.Compose([gpu.Normalize(MEAN, STD), gpu.RandomErasing(p=1.0)])
    stage = BatchStage(ops, channels_last=channels_last)
    keys = KeyedBatch([SampleKey(i, 100 + i) for i in (0, 4, 9, 13, 17)], 5)
    rows = {
        "batch": np.array([0]),
        "indices": np.array([[int(k) for k in keys]]),
        "seeds": np.array([[k.seed for k in keys]]),
        "batch_seed": np.array([5]),
    }
    AsksForStacked.asked.clear()
    ref = local_ray.put(dataset)
    columns = read_batches(rows, ref, stage=stage)
    assert AsksForStacked.asked == [normalizing_of(MEAN, STD, channels_last=channels_last)]

    expected_images, expected_labels = stage(dataset.load_stacked(keys).collated(), seed=5)
    images = torch.from_numpy(columns["image"])
    if channels_last:  # the columns are N x H x W x C
        images = images.permute(0, 3, 1, 2)
    assert torch.equal(images, expected_images)
    assert torch.equal(torch.from_numpy(columns["label"]), expected_labels)
    # the next tasks in this process decode into the task's kept memory only once nothing
    # refers to it: the columns held here stay as they were
    kept = columns["image"].copy()
    for seed in (6, 7, 8):
        read_batches({**rows, "batch_seed": np.array([seed])}, ref, stage=stage)
    assert np.array_equal(columns["image"], kept)


def test_loaders_it_cannot_run_yet_are_one_error_naming_why(local_ray: Any, photos: Path) -> None:
    dataset = fastload.ImageFolder(photos, T.Compose([T.CenterCrop(16)]))
    cases = {
        "samples carry no seeds": fastload.DataLoader(dataset, batch_size=4, seeding="worker"),
        "collate_fn of its own": fastload.DataLoader(
            dataset, batch_size=4, collate_fn=lambda samples: samples
        ),
        "makes no batches": fastload.DataLoader(dataset, batch_size=None),
    }
    for why, loader in cases.items():
        with pytest.raises(TypeError, match=f"fastload.ray cannot run this loader: .*{why}"):
            fastload.ray.epoch_dataset(loader)


def test_regroup_makes_the_loaders_batches_from_any_blocks() -> None:
    """Rows in order, cut into blocks anywhere: each batch whole again, with its seed."""
    numbers = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    rows = {
        "image": np.arange(8, dtype=np.uint8).reshape(8, 1, 1, 1),
        "label": np.arange(8, dtype=np.int64) * 10,
        "batch": numbers,
        "batch_seed": numbers + 100,
    }
    blocks = [
        {name: values[a:b] for name, values in rows.items()} for a, b in ((0, 2), (2, 4), (4, 8))
    ]
    out = list(regroup(iter(blocks)))
    assert [seed for _, seed, _ in out] == [100, 101, 102]
    assert [batch[1].tolist() for batch, _, _ in out] == [[0, 10, 20], [30, 40], [50, 60, 70]]
    assert all(dropped == [] for _, _, dropped in out)

    # the images copied into kept memory: batches the consumer holds stay as they were (a
    # ring smaller than what is held makes the others anew); one let go of is written again
    held = list(regroup(iter(blocks), ring=BatchRing(1)))
    assert [batch[0].flatten().tolist() for batch, _, _ in held] == [[0, 1, 2], [3, 4], [5, 6, 7]]
    even = {name: values[:6] for name, values in rows.items()}
    even["batch"] = even["batch_seed"] = np.array([0, 0, 1, 1, 2, 2])
    pointers, images = set(), []
    for batch, _, _ in regroup(iter([even]), ring=BatchRing(1)):
        pointers.add(batch[0].data_ptr())
        images.append(batch[0].flatten().tolist())
        del batch
    assert images == [[0, 1], [2, 3], [4, 5]]
    assert len(pointers) == 1


def _train_loop(config: dict[str, Any]) -> None:
    """Each Ray Train worker: the loader it would use on one machine for its rank, its epochs
    run on Ray Data; the indices it trained on, per epoch, written for the test to read."""
    import json

    import ray.train

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    loader = rank_loader(Path(config["photos"]), rank, world)
    seen = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        labels = [
            int(label)
            for _, batch_labels in fastload.ray.batches(fastload.ray.epoch_dataset(loader), loader)
            for label in batch_labels
        ]
        seen.append(labels)
    Path(config["out"], f"rank{rank}.json").write_text(json.dumps(seen))


def rank_loader(photos: Path, rank: int, world: int) -> fastload.DataLoader:
    """A rank's loader: its share of a shuffled epoch, each sample's label its index."""
    paths = sorted(str(p) for p in photos.rglob("*.jpg"))
    dataset = fastload.ImageList(paths, list(range(len(paths))), T.Compose([T.CenterCrop(16)]))
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world, rank=rank, seed=5)
    return fastload.DataLoader(dataset, batch_size=4, sampler=sampler)


def test_ray_trains_two_gloo_workers_each_on_its_share(
    local_ray: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Ray Train's TorchTrainer with two workers (gloo): each rank's epochs are its loader's
    batches, the same as that loader gives alone; together every sample once an epoch."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    photos = make_image_folder(tmp_path_factory.mktemp("train") / "set", images=24, classes=3)
    out = tmp_path_factory.mktemp("ranks")
    trainer = TorchTrainer(
        _train_loop,
        train_loop_config={"photos": str(photos), "out": str(out)},
        # the trainers take no CPU of the two: the decoding tasks have them
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"trainer": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=str(tmp_path_factory.mktemp("runs"))),
    )
    trainer.fit()
    import json

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        shares = [set(rank[epoch]) for rank in ranks]
        assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(24))
        for rank, got in enumerate(ranks):
            alone = rank_loader(photos, rank, 2)
            alone.sampler.set_epoch(epoch)
            assert got[epoch] == [int(label) for _, labels in alone for label in labels]
    assert ranks[0][0] != ranks[0][1]  # a new order each epoch


@pytest.mark.gpu
def test_an_epoch_on_ray_reaches_the_device_as_the_loaders(local_ray: Any, photos: Path) -> None:
    """With a CUDA device: pinned, copied on the prefetcher's stream, the batch ops there
    under each batch's seed; the same batches as the loader's own on that device."""

    def loader() -> fastload.DataLoader:
        dataset = fastload.ImageFolder(photos, T.Compose([T.RandomResizedCrop(32)]))
        ops = gpu.Compose([gpu.ColorJitter(0.4, 0.4, 0.4), gpu.Normalize(MEAN, STD)])
        generator = torch.Generator().manual_seed(5)
        return fastload.DataLoader(
            dataset,
            batch_size=6,
            shuffle=True,
            generator=generator,
            batch_transforms=ops,
            device="cuda",
            backend="region",  # the workers decode (not the GPU executor, which Ray cannot run)
        )

    theirs, ours = loader(), loader()
    got = list(fastload.ray.batches(fastload.ray.epoch_dataset(ours), ours, device="cuda"))
    assert all(images.is_cuda and labels.is_cuda for images, labels in got)
    assert_same_batches(got, list(theirs))
