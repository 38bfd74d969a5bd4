"""Worker processes' batch memory reused once the main process lets go of it, never before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from heap import PAGES, SAMPLE, SAMPLES, faults_a_batch, glibc_only
from ramps import Ramps
from torch.utils.data import Dataset

import fastload
from fastload import gpu
from fastload.memory.shared_buffers import SlotTable, WorkerRing

MEAN, STD = (0.5, 0.25, 0.125), (0.5, 0.5, 0.25)


def _expected(batch_size: int = 4) -> list[torch.Tensor]:
    data = Ramps()
    images = torch.stack([data[i][0] for i in range(len(data))]).float() / 255
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    return list(((images - mean) / std).split(batch_size))


def _loader(**options: object) -> fastload.DataLoader:
    return fastload.DataLoader(
        Ramps(),
        batch_size=4,
        num_workers=2,
        batch_transforms=gpu.Normalize(MEAN, STD),
        **options,  # type: ignore[arg-type]
    )


def _storage(batch: torch.Tensor) -> int:
    """The shared memory file a batch came in (its inode: addresses are reused by mmap)."""
    fd, _ = batch.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


def test_batches_dropped_at_once_are_written_again_in_the_same_memory() -> None:
    addresses = []
    for (images, _), want in zip(_loader(), _expected(), strict=True):
        torch.testing.assert_close(images, want)
        addresses.append(_storage(images))
    assert len(set(addresses)) < len(addresses) // 2  # 24 batches, the few in flight


def test_batches_and_views_the_consumer_holds_are_never_overwritten() -> None:
    held, views = [], []
    for k, (images, _) in enumerate(_loader()):
        if k % 2:
            held.append((k, images))  # whole batches kept to the end
        else:
            views.append((k, images[1:]))  # only a view of the batch kept
    want = _expected()
    for k, images in held:
        torch.testing.assert_close(images, want[k])
    for k, view in views:
        torch.testing.assert_close(view, want[k][1:])


def test_two_iterators_of_one_loader_at_once_keep_each_others_batches() -> None:
    # the first lets go of every batch, the second holds all of its own: a slot freed by the
    # first must not free the second's batch in the worker of the same id
    loader = _loader()
    first, second = iter(loader), iter(loader)
    held = []
    for (a, _), (b, _) in zip(first, second, strict=True):
        del a
        held.append(b)
    for images, want in zip(held, _expected(), strict=True):
        torch.testing.assert_close(images, want)


def test_persistent_workers_keep_their_memory_across_epochs() -> None:
    loader = _loader(persistent_workers=True)
    seen = [[_storage(images) for images, _ in loader] for _ in range(2)]
    assert set(seen[1]) & set(seen[0])  # the second epoch writes the first's memory again
    held = list(loader)
    for (images, _), want in zip(held, _expected(), strict=True):
        torch.testing.assert_close(images, want)


def _note_worker(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    Path(info.dataset.folder, f"worker-{worker_id}").touch()  # type: ignore[attr-defined]


class NotedRamps(Ramps):
    def __init__(self, folder: Path) -> None:
        self.folder = folder


def test_spawned_workers_reuse_memory_and_run_the_users_worker_init_fn(tmp_path: Path) -> None:
    loader = fastload.DataLoader(
        NotedRamps(tmp_path),
        batch_size=4,
        num_workers=2,
        batch_transforms=gpu.Normalize(MEAN, STD),
        multiprocessing_context="spawn",
        worker_init_fn=_note_worker,
    )
    addresses = []
    for (images, _), want in zip(loader, _expected(), strict=True):
        torch.testing.assert_close(images, want)
        addresses.append(_storage(images))
    assert len(set(addresses)) < len(addresses) // 2  # 24 batches, the few in flight
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-0", "worker-1"]


def test_batches_come_out_right_under_the_file_system_sharing_strategy() -> None:
    # the ring is for file descriptors only: under this strategy batches are made anew
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        held = [images for images, _ in _loader()]
    finally:
        torch.multiprocessing.set_sharing_strategy(before)
    for images, want in zip(held, _expected(), strict=True):
        torch.testing.assert_close(images, want)


def test_a_worker_hands_a_slot_out_again_only_once_it_is_freed_and_let_go_of() -> None:
    table = SlotTable(1, slots=2)
    ring = WorkerRing(table, 0)
    first, second = ring.take(1000), ring.take(1000)
    assert first is not None and second is not None
    assert ring.take(1000) is None  # every slot out: the caller makes its batch anew
    held = torch.empty(0, dtype=torch.uint8).set_(first, 0, (1000,))  # still being sent
    table.states[0, 0] = 0  # the main process let go of it
    assert ring.take(1000) is None
    del held
    again = ring.take(1000)
    assert again is not None and again.data_ptr() == first.data_ptr()


def test_a_larger_batch_takes_a_new_storage_in_the_freed_slot() -> None:
    table = SlotTable(1, slots=1)
    ring = WorkerRing(table, 0)
    small = ring.take(64)
    assert small is not None
    table.states[0, 0] = 0
    large = ring.take(1 << 20)
    assert large is not None and large.nbytes() > 1 << 20


def test_storages_not_taken_lately_are_let_go_of() -> None:
    table = SlotTable(1, slots=3)
    ring = WorkerRing(table, 0)
    taken = [ring.take(4096) for _ in range(3)]  # the consumer held three batches at once
    assert all(storage is not None for storage in taken)
    del taken
    table.states[0] = 0
    for _ in range(10):  # then one at a time: slot 0 is enough
        assert ring.take(4096) is not None
        table.states[0, 0] = 0
    assert table.states[0].tolist() == [0, 2, 2]  # 2: the main process drops its mapping too


def test_a_slot_is_reused_for_sizes_near_its_own_and_never_grows_to_the_largest() -> None:
    table = SlotTable(1, slots=1)
    ring = WorkerRing(table, 0)
    large = ring.take(1 << 20)
    assert large is not None
    address = large.data_ptr()
    del large
    table.states[0, 0] = 0
    near = ring.take(600_000)  # within twice its size: written again
    assert near is not None and near.data_ptr() == address
    del near
    table.states[0, 0] = 0
    small = ring.take(1000)  # a storage of 1 MiB is not kept for 1,000 bytes
    assert small is not None and small.nbytes() < 4096


def test_the_environment_variable_turns_the_ring_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTLOAD_SHARED_RING", "0")
    addresses = []
    for (images, _), want in zip(_loader(), _expected(), strict=True):
        torch.testing.assert_close(images, want)
        addresses.append(_storage(images))
    assert len(set(addresses)) == len(addresses)  # a new shared memory file for every batch


def test_uint8_batches_of_torchs_collate_are_torchs_batches_in_memory_written_again() -> None:
    """Without batch ops, torch's ``default_collate`` stacks the images into the ring: the
    same batches as torch's loader, the memory taken again once let go of, held batches and
    views never overwritten."""
    want = list(torch.utils.data.DataLoader(Ramps(), batch_size=4, num_workers=2))
    loader = fastload.DataLoader(Ramps(), batch_size=4, num_workers=2)
    inodes, held = [], []
    for k, (batch, expected) in enumerate(zip(loader, want, strict=True)):
        assert type(batch) is list and len(batch) == 2 and batch[0].dtype == torch.uint8
        assert torch.equal(batch[0], expected[0]) and torch.equal(batch[1], expected[1])
        inodes.append(_storage(batch[0]))
        if k in (3, 4):
            held.append((k, batch[0][1:]))
    assert len(set(inodes)) < len(inodes) // 2  # 24 batches, the few in flight
    for k, view in held:
        assert torch.equal(view, want[k][0][1:])


class Records(Dataset):
    """The Ramps' images as Hugging Face image pipelines give samples: dicts."""

    def __len__(self) -> int:
        return len(Ramps())

    def __getitem__(self, i: int) -> dict[str, object]:
        image, label = Ramps()[i]
        return {"label": label, "pixel_values": image, "name": f"r{i}"}


def test_dict_samples_have_their_images_stacked_into_memory_written_again() -> None:
    """Samples that are dicts: their largest field, stacked by torch's default_collate, goes
    into the ring as a tuple's images do; the batches are torch's loader's, keys in order."""
    want = list(torch.utils.data.DataLoader(Records(), batch_size=4, num_workers=2))
    loader = fastload.DataLoader(Records(), batch_size=4, num_workers=2)
    inodes = []
    for batch, expected in zip(loader, want, strict=True):
        assert type(batch) is dict and list(batch) == ["label", "pixel_values", "name"]
        assert torch.equal(batch["pixel_values"], expected["pixel_values"])
        assert torch.equal(batch["label"], expected["label"]) and batch["name"] == expected["name"]
        inodes.append(_storage(batch["pixel_values"]))
    assert len(set(inodes)) < len(inodes) // 2  # 24 batches, the few in flight


def test_without_the_ring_uint8_batches_are_made_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTLOAD_SHARED_RING", "0")
    loader = fastload.DataLoader(Ramps(), batch_size=4, num_workers=2)
    inodes = [_storage(images) for images, _ in loader]
    assert len(set(inodes)) > len(inodes) // 2


def test_a_slot_the_sent_batch_does_not_hold_is_freed_once_nothing_refers_to_it() -> None:
    table = SlotTable(1, slots=3)
    ring = WorkerRing(table, 0)
    replaced, sent, kept_aside = ring.take(1000), ring.take(1000), ring.take(1000)
    assert replaced is not None and sent is not None and kept_aside is not None
    batch = torch.empty(0, dtype=torch.uint8).set_(sent, 0, (1000,))
    aside = torch.empty(0, dtype=torch.uint8).set_(kept_aside, 0, (1000,))  # an op kept it
    ring.settle([batch, 3])
    assert table.states[0].tolist() == [0, 1, 1]  # only the replaced one is free again
    again = ring.take(1000)
    assert again is not None and again.data_ptr() == replaced.data_ptr()
    del aside  # let go of after its batch was settled: freed at the next settle
    ring.settle([torch.empty(0, dtype=torch.uint8).set_(again, 0, (1000,))])
    assert table.states[0].tolist() == [1, 1, 0]


def test_the_stage_in_a_worker_frees_what_a_later_op_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Normalize writes into a slot; an op after it makes a new batch: that slot never goes
    to the main process, so the worker frees it (before, it stayed out for good and every
    batch of such a pipeline held on to shared memory)."""
    from torch.utils.data import default_collate

    from fastload.gpu import normalizing
    from fastload.gpu.stage import BatchStage, CollateThenStage
    from fastload.memory import shared_buffers

    monkeypatch.setattr(normalizing, "get_worker_info", lambda: object())
    init = shared_buffers.RingInit(None)
    init.table = SlotTable(1, slots=4)
    init(0)
    try:
        ops = gpu.Compose([gpu.Normalize(MEAN, STD), lambda images, labels: (images * 2, labels)])
        collate = CollateThenStage(default_collate, BatchStage(ops, channels_last=False))
        samples = [Ramps()[i] for i in range(4)]
        for _ in range(6):  # more batches than slots
            images, _ = collate(samples)
            torch.testing.assert_close(images, 2 * _expected()[0])
            assert not images.untyped_storage().is_shared()  # the op's own new batch
        assert init.table.states[0].tolist() == [0, 0, 0, 0]
    finally:
        init.table = None
        init(0)  # no ring again in this process


@glibc_only
def test_the_samples_a_worker_stacks_into_a_slot_are_kept_by_malloc() -> None:
    """A slot is shared memory, not malloc's: the ring raises malloc's thresholds to its size
    as it makes it, so the samples stacked into it are not faulted in again each batch."""
    assert faults_a_batch(f"WorkerRing(SlotTable(1), 0).take({SAMPLE * SAMPLES})") < PAGES / 20
