"""A worker's batch on its way to the main process (memory/handover.py): kept slots the main
process maps go by name, small storages by value, larger ones as copies in slots, the rest as
torch sends them; the batches are torch's either way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ramps import Ramps, as_worker
from torch.multiprocessing import reductions
from torch.utils.data import Dataset, default_collate
from torchvision import tv_tensors

import fastload
from fastload.memory import handover, shared_buffers
from fastload.memory.shared_buffers import Returns, SlotTable


class Targets(Dataset):
    """Detection-like samples, as torchvision's v2 transforms make them: an image (larger than
    goes by value, of two sizes) and a dict of small tensors."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        size = (160, 160 + 16 * (i % 2))
        image = tv_tensors.Image(torch.full((3, *size), i, dtype=torch.uint8))
        boxes = tv_tensors.BoundingBoxes(
            torch.arange(8, dtype=torch.float32).view(2, 4) + i, format="XYXY", canvas_size=size
        )
        return image, {"boxes": boxes, "labels": torch.tensor([i, i + 1])}


def detection_collate(batch: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*batch, strict=True))


# The storages received as file descriptors: each one's file (torch's own identity of a shared
# memory file: inode and device) and size
RECEIVED: list[tuple[tuple[int, int], int]] = []
_REBUILD = reductions.rebuild_storage_fd


class _Received:
    """A descriptor already taken from the worker, handed on to torch's rebuilding."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def detach(self) -> int:
        return self.fd


def spy(cls: Any, df: Any, size: int) -> Any:
    """torch's rebuilding from a file descriptor, noted (module-level: forked workers pickle
    a reference to it where they would to torch's)."""
    fd = df.detach()
    RECEIVED.append((reductions.fd_id(fd), size))
    return _REBUILD(cls, _Received(fd), size)


@pytest.fixture
def descriptors(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, int], int]]:
    """The storages this process receives as file descriptors (unpickling looks torch's
    function up by name, so the spy sees every one)."""
    RECEIVED.clear()
    monkeypatch.setattr(reductions, "rebuild_storage_fd", spy)
    return RECEIVED


def each_once_in(sizes: set[int], received: list[tuple[tuple[int, int], int]]) -> bool:
    """Whether every storage received as a descriptor is a kept slot's (one of ``sizes``: the
    batch's bytes and the ring's tag after them), and none of them came twice: once the main
    process maps a slot, the worker names it. How many slots' storages the workers make
    depends on when the main process lets go of each (images of two sizes replace a slot's
    storage too small for them), so their count is not asserted."""
    files = [file for file, _ in received]
    return 0 < len(set(files)) == len(files) and {size for _, size in received} <= sizes


@pytest.fixture
def table() -> Iterator[SlotTable]:
    """This process as worker 0 of a two-slot ring (:func:`shared_buffers.current`)."""
    with as_worker(2) as table:
        yield table


def sent(storage: torch.UntypedStorage) -> tuple[str, torch.UntypedStorage]:
    """How ``storage`` goes to the main process, and what the receiving side makes of it (as
    unpickling does, in this same process)."""
    rebuild, arguments = handover.reduce_storage(storage)
    if rebuild is reductions.rebuild_storage_fd:
        how = "descriptor"
    elif any(isinstance(a, bytes) for a in arguments):
        how = "value"
    else:
        how = "name"
    return how, rebuild(*arguments)


def test_after_its_first_batch_a_slot_is_named_not_sent(
    descriptors: list[tuple[tuple[int, int], int]],
) -> None:
    loader = fastload.DataLoader(Ramps(), batch_size=4, num_workers=2, persistent_workers=True)
    stock = list(torch.utils.data.DataLoader(Ramps(), batch_size=4))
    for _ in range(2):  # the second epoch in the slots of the first
        got = list(loader)
        for (images, labels), (want_images, want_labels) in zip(got, stock, strict=True):
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
            assert images.is_shared()  # in the workers' kept memory
            assert not labels.is_shared()  # 4 int64: came by value
        del got
    # 48 batches of images and labels: torch sends 96 descriptors, a fresh file each; here
    # only the slots' (4 images and the tag), each the first time it is sent
    assert each_once_in({4 * 3 * 16 * 16 + 16}, descriptors)


def test_without_the_ring_every_storage_is_sent_as_torch_sends_it(
    descriptors: list[tuple[tuple[int, int], int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTLOAD_SHARED_RING", "0")
    batches = list(fastload.DataLoader(Ramps(), batch_size=4, num_workers=2))
    assert all(images.is_shared() and labels.is_shared() for images, labels in batches)
    assert len(descriptors) == 2 * len(batches)


def test_detection_images_come_in_kept_slots_and_their_targets_by_value(
    descriptors: list[tuple[tuple[int, int], int]],
) -> None:
    """The references' collate, images and boxes as torchvision's tv_tensors: each image is
    copied into a slot where torch would copy it into fresh shared memory, and named once the
    main process maps it; the targets come by value."""
    loader = fastload.DataLoader(
        Targets(), batch_size=4, num_workers=2, collate_fn=detection_collate
    )
    stock = torch.utils.data.DataLoader(Targets(), batch_size=4, collate_fn=detection_collate)
    count = 0
    for (images, targets), (want_images, want_targets) in zip(loader, stock, strict=True):
        count += len(images)
        for image, want in zip(images, want_images, strict=True):
            assert type(image) is tv_tensors.Image and torch.equal(image, want)
            assert image.is_shared()
        for target, want in zip(targets, want_targets, strict=True):
            assert target.keys() == want.keys()
            assert all(torch.equal(target[k], want[k]) for k in want)
            assert type(target["boxes"]) is tv_tensors.BoundingBoxes
            assert target["boxes"].canvas_size == want["boxes"].canvas_size
            assert not target["labels"].is_shared()
    # torch sends 96 images and 192 targets as descriptors; here only the slots', each once
    assert count == len(Targets())
    assert each_once_in({3 * 160 * width + 16 for width in (160, 176)}, descriptors)
    # an epoch held whole: more images than slots, none written again while held
    held = [images for images, _ in loader]
    for images, (want, _) in zip(held, stock, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(images, want, strict=True))


def fields_beside_torchs(dataset: Dataset, as_dicts: bool) -> Iterator[list[torch.Tensor]]:
    """Each batch's fields from a fastload loader with two worker processes, each asserted
    equal, values and dtype, to the field of torch's loader's batch of the same samples."""
    loader = fastload.DataLoader(dataset, batch_size=4, num_workers=2)
    stock = torch.utils.data.DataLoader(dataset, batch_size=4)
    for got, want in zip(loader, stock, strict=True):
        fields = list(got.values() if as_dicts else got)
        wanted = list(want.values() if as_dicts else want)
        for ours, theirs in zip(fields, wanted, strict=True):
            assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
        yield fields


class Captioned(Dataset):
    """Ramps' images with a caption's tokens and a label as tensors, as tuples or as dicts
    (OpenCLIP's samples, a Hugging Face pipeline's): fields torch's default_collate stacks into
    fresh shared memory in a worker."""

    def __init__(self, *, as_dicts: bool) -> None:
        self.as_dicts = as_dicts

    def __len__(self) -> int:
        return len(Ramps())

    def __getitem__(self, i: int) -> Any:
        image, label = Ramps()[i]
        tokens = torch.arange(77, dtype=torch.int64) * i
        if self.as_dicts:
            return {"pixel_values": image, "input_ids": tokens, "label": torch.tensor(label)}
        return image, tokens, torch.tensor(label)


@pytest.mark.parametrize("as_dicts", [False, True], ids=["tuples", "dicts"])
def test_small_fields_default_collate_made_shared_go_by_value(
    descriptors: list[tuple[tuple[int, int], int]], as_dicts: bool
) -> None:
    """The tokens and labels come by value, unshared; the images in the kept slots; the
    batches are torch's: torch sends three descriptors a batch, here only the slots'."""
    for images, tokens, labels in fields_beside_torchs(Captioned(as_dicts=as_dicts), as_dicts):
        assert images.is_shared() and not tokens.is_shared() and not labels.is_shared()
    assert each_once_in({4 * 3 * 16 * 16 + 16}, descriptors)


class Segmented(Dataset):
    """Segmentation samples as plain tensors, as tuples or as dicts (a Hugging Face image
    processor's): float pixels, a class a pixel (a mask larger than goes by value, a batch)
    and a label."""

    def __init__(self, *, as_dicts: bool) -> None:
        self.as_dicts = as_dicts

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> Any:
        pixels = torch.linspace(0, 1, 3 * 64 * 64).view(3, 64, 64) * i
        mask = torch.arange(64 * 64, dtype=torch.int64).view(64, 64) % (i + 2)
        if self.as_dicts:
            return {"pixel_values": pixels, "labels": mask, "label": torch.tensor(i)}
        return pixels, mask, torch.tensor(i)


@pytest.mark.parametrize("as_dicts", [False, True], ids=["tuples", "dicts"])
def test_a_mask_beside_the_images_comes_in_a_kept_slot_too(
    descriptors: list[tuple[tuple[int, int], int]], as_dicts: bool
) -> None:
    """Images and masks both in the kept slots, the label by value; the batches are torch's:
    the only descriptors are the slots', each once, where torch sends three a batch."""
    for pixels, mask, label in fields_beside_torchs(Segmented(as_dicts=as_dicts), as_dicts):
        assert pixels.is_shared() and mask.is_shared() and not label.is_shared()
    assert each_once_in({4 * 3 * 64 * 64 * 4 + 16, 4 * 64 * 64 * 8 + 16}, descriptors)


def with_flag(samples: list[Any]) -> dict[str, Any]:
    """A collate function of one's own that changes what ``default_collate`` gives (not
    provably ``f(*default_collate(batch))``: a dict of its own)."""
    pixels, mask, label = default_collate(samples)
    return {"pixels": pixels, "mask": mask, "label": label, "odd": label % 2 == 1}


def flipped(samples: list[Any]) -> tuple[torch.Tensor, ...]:
    """A collate function of one's own that drops the pixels ``default_collate`` stacked for
    new ones."""
    pixels, mask, label = default_collate(samples)
    return pixels.flip(-1), mask, label


class WithPrevious:
    """A collate function of one's own that keeps each batch's pixels in the worker, to mix
    into the next batch's."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None

    def __call__(self, samples: list[Any]) -> tuple[torch.Tensor, ...]:
        pixels, mask, label = default_collate(samples)
        mixed = pixels if self.previous is None else (pixels + self.previous) / 2
        self.previous = pixels
        return mixed, mask, label


@pytest.mark.parametrize(
    "collate_fn", [with_flag, flipped, WithPrevious()], ids=["changed", "dropped", "kept"]
)
def test_what_default_collate_stacks_inside_ones_own_collate_comes_in_kept_slots(
    descriptors: list[tuple[tuple[int, int], int]], collate_fn: Any
) -> None:
    """Each epoch gives torch's loader's batches of the same collate function, the pixels and
    masks in the workers' kept slots (or, where the function made its own, copied into one as
    sent) and the small fields by value: torch sends a descriptor for every field of every
    batch, here only the slots', each once. A batch default_collate made that the function
    dropped frees its slot; one the function keeps is not written again."""
    dataset = Segmented(as_dicts=False)
    common: dict[str, Any] = {
        "batch_size": 4,
        "num_workers": 2,
        "collate_fn": collate_fn,
        "persistent_workers": True,  # the function's state carries over, in both
    }
    loader = fastload.DataLoader(dataset, **common)
    torchs = torch.utils.data.DataLoader(dataset, **common)
    # four epochs: more batches a worker than it has slots, were a dropped one not freed
    stock = [list(torchs) for _ in range(4)]
    descriptors.clear()  # those torch's workers sent
    for epoch in range(4):
        got = list(loader)
        for ours, theirs in zip(got, stock[epoch], strict=True):
            fields = list(ours.values() if isinstance(ours, dict) else ours)
            wanted = list(theirs.values() if isinstance(theirs, dict) else theirs)
            for field, want in zip(fields, wanted, strict=True):
                assert field.dtype == want.dtype and torch.equal(field, want)
            assert [field.is_shared() for field in fields] == [True, True] + [False] * (
                len(fields) - 2
            )
        del got
    assert each_once_in({4 * 3 * 64 * 64 * 4 + 16, 4 * 64 * 64 * 8 + 16}, descriptors)


def test_a_copy_sent_stays_out_until_the_main_process_lets_go_of_it(table: SlotTable) -> None:
    ring = shared_buffers.current()
    assert ring is not None
    returns = Returns(table)
    image = torch.arange(100_000, dtype=torch.int32)
    how, received = sent(image.untyped_storage())
    assert how == "descriptor"  # a slot made for it, not mapped there yet
    arrived = torch.empty(0, dtype=torch.int32).set_(received, 0, image.shape)
    assert torch.equal(arrived, image) and received.nbytes() > image.untyped_storage().nbytes()
    returns.received(arrived)
    ring.settle(torch.zeros(3))  # the worker's next batch: the copy is not one of its own
    assert table.states[0].tolist() == [1, 0]  # out, with the consumer
    assert sent((image + 1).untyped_storage())[0] == "descriptor"  # slot 1, made for it
    assert sent((image + 2).untyped_storage())[0] == "descriptor"  # every slot out: torch's way
    assert table.states[0].tolist() == [1, 1]
    del arrived
    returns.received(None)  # the consumer let go of the first: its slot is free again
    again = image * 3
    how, received = sent(again.untyped_storage())
    assert how == "name" and received is Returns.kept(table.ring_id, 0, 0)
    assert torch.equal(torch.empty(0, dtype=torch.int32).set_(received, 0, again.shape), again)


def test_a_slot_is_named_only_while_the_main_process_keeps_its_storage(table: SlotTable) -> None:
    ring = shared_buffers.current()
    assert ring is not None
    returns = Returns(table)  # this process is the main process too
    storage = ring.take(1000)
    assert storage is not None
    how, received = sent(storage)
    assert how == "descriptor"  # not mapped there yet
    returns.received(torch.empty(0, dtype=torch.uint8).set_(received, 0, (1000,)))
    kept = Returns.kept(ring.ring_id, 0, 0)
    assert kept.data_ptr() == received.data_ptr()
    assert sent(storage) == ("name", kept)  # the very storage the main process keeps
    other = ring.take(1000)  # slot 1, never received there
    assert other is not None and sent(other)[0] == "descriptor"
    table.mapped[0, 0] = 0  # as when the main process lets go of it
    assert sent(storage)[0] == "descriptor"


def test_a_slot_the_main_process_does_not_keep_is_one_clear_error(table: SlotTable) -> None:
    with pytest.raises(RuntimeError, match="worker 0 named slot 1 of its kept batch memory"):
        Returns.kept(table.ring_id, 0, 1)


@pytest.mark.parametrize(
    "tensor, by_value",
    [
        (torch.arange(16), True),  # labels
        (torch.zeros(0), True),
        (torch.ones(handover.INLINE_BYTES // 4), True),  # as large as goes by value
        (torch.ones(handover.INLINE_BYTES // 4 + 1), False),
        (torch.arange(16).share_memory_(), False),  # shared already: it stays shared
    ],
)
def test_small_storages_not_shared_go_by_value(tensor: torch.Tensor, by_value: bool) -> None:
    how, storage = sent(tensor.untyped_storage())
    got = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape)
    assert torch.equal(got, tensor) and how == ("value" if by_value else "descriptor")
    assert storage.is_shared() is not by_value


def test_batches_torchs_pin_memory_thread_receives_come_in_kept_slots(
    monkeypatch: pytest.MonkeyPatch, descriptors: list[tuple[tuple[int, int], int]]
) -> None:
    """With a CUDA device (faked) and torch's pinning (the default), torch's pin-memory thread
    receives the batches: it notes the slots each came in as it pins it by copying, and the
    slots are written again once pinned; the batches are the dataset's."""
    from fakecuda import FakeCuda

    fake = FakeCuda(monkeypatch)
    loader = fastload.DataLoader(
        Ramps(), batch_size=4, num_workers=2, device="cuda", persistent_workers=True
    )
    stock = list(torch.utils.data.DataLoader(Ramps(), batch_size=4))
    for _ in range(2):
        held = list(loader)  # on the device: the slots are not held by them
        for (images, labels), (want_images, want_labels) in zip(held, stock, strict=True):
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
    assert fake.log.count(("pin",)) == 2 * 2 * len(stock)  # each image and labels, once
    # 48 batches' images: torch's way, one descriptor and fresh file each; here the slots'
    assert each_once_in({4 * 3 * 16 * 16 + 16}, descriptors)
