"""A batch decoded straight into one tensor (``ImageDataset.load_stacked``, ``StackedSamples``):
the samples ``__getitems__`` gives, pixel for pixel and draw for draw, whatever the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from torch.utils.data import default_collate

import fastload
from fastload import transforms as T
from fastload.backends.region import RegionBackend
from fastload.datasets.skipping import Skipped
from fastload.gpu import functional as batch_ops
from fastload.memory import buffers
from fastload.memory.stacked import (
    Normalizing,
    StackedSamples,
    normalizes_stacked,
    welcome,
    welcomed,
    welcomed_normalizing,
)
from fastload.sampling import KeyedBatch, SampleKey
from tests.images import jpeg_bytes, photo, png_bytes, with_orientation


def _keys(indices: list[int], seed: int = 11) -> KeyedBatch:
    return KeyedBatch([SampleKey(i, seed=1000 * seed + i) for i in indices], seed)


def _folder(root: Path, count: int = 24) -> Path:
    """JPEGs of several sizes, subsamplings and qualities, a progressive one and a grey one."""
    for k in range(count):
        width, height = 200 + 37 * (k % 5), 150 + 29 * (k % 4)
        save: dict[str, Any] = {"subsampling": k % 3}
        if k % 7 == 3:
            save["progressive"] = True
        array = photo(width, height, seed=k)
        if k % 11 == 5:
            array = array[:, :, :1].repeat(3, axis=2)
            data = jpeg_bytes(array[:, :, 0], quality=80)
        else:
            data = jpeg_bytes(array, quality=70 + k % 25, **save)
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"c{k % 2}" / f"{k:03d}.jpg").write_bytes(data)
    return root


# the decoder draws and plans this one itself (fastload.transforms.crop_recipes); the other, flipped
# first, is planned in Python and decoded many at a time
GEOMETRIES = {
    "drawn by the decoder": [T.RandomResizedCrop(64), T.RandomHorizontalFlip()],
    "planned in Python": [T.RandomHorizontalFlip(), T.RandomResizedCrop(64)],
}


def _dataset(
    root: Path, geometry: str = "drawn by the decoder", **options: Any
) -> fastload.ImageFolder:
    ops = T.Compose(GEOMETRIES[geometry])
    return fastload.ImageFolder(root, ops, backend="region", **options)


def _as_batch(samples: Any) -> Any:
    return samples.collated() if isinstance(samples, StackedSamples) else default_collate(samples)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if not isinstance(a, (list, tuple)):
        return type(a) is type(b) and a == b
    return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_a_batch_is_stacked_with_the_pixels_and_draws_of_its_samples_alone(
    tmp_path: Path, geometry: str
) -> None:
    dataset = _dataset(_folder(tmp_path), geometry)
    name = "decode_drawn_many" if geometry == "drawn by the decoder" else "decode_jpeg_resized_many"
    many = getattr(RegionBackend, name)
    calls: list[int] = []

    def counted(self: Any, jobs: list[Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(len(jobs))
        return many(self, jobs, *args, **kwargs)

    for seed in range(6):  # crops at every DCT scale: many at once, and alone (off the grid)
        keys = _keys(list(range(len(dataset)))[seed % 3 :: 2], seed)
        setattr(RegionBackend, name, counted)
        try:
            stacked = dataset.load_stacked(keys)
        finally:
            setattr(RegionBackend, name, many)
        assert isinstance(stacked, StackedSamples) and stacked.seed == seed
        want = dataset.__getitems__(keys)
        assert _equal(stacked.collated(), default_collate(want))
        # read as the list of samples it stands for, by code that does not know it
        assert len(stacked) == len(want) and _equal(list(stacked), want)
        assert _equal(stacked[1:3], want[1:3])
        assert _equal(default_collate(stacked), default_collate(want))
    assert sum(calls) > 0  # the one-call path ran, not only the samples alone


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_other_files_are_decoded_alone_into_their_slots(tmp_path: Path, geometry: str) -> None:
    root = _folder(tmp_path, count=8)
    rotated = with_orientation(photo(260, 180, seed=40), 6)  # transposed: decoded alone
    (root / "c0" / "rotated.jpg").write_bytes(rotated)
    (root / "c1" / "flat.png").write_bytes(png_bytes(Image.fromarray(photo(240, 200, seed=41))))
    dataset = _dataset(root, geometry)
    keys = _keys(list(range(len(dataset))))
    stacked = dataset.load_stacked(keys)
    assert isinstance(stacked, StackedSamples)
    assert _equal(stacked.collated(), default_collate(dataset.__getitems__(keys)))


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_a_file_that_fails_is_reported_as_alone(tmp_path: Path, geometry: str) -> None:
    root = _folder(tmp_path, count=8)
    victim = sorted(root.rglob("*.jpg"))[2]
    data = victim.read_bytes()
    # a whole header and a stream cut short, with its end marker: fails only when decoded
    victim.write_bytes(data[: len(data) // 3] + b"\xff\xd9")
    skipping = _dataset(root, geometry, on_error="skip")
    keys = _keys(list(range(len(skipping))))
    samples = skipping.load_stacked(keys)
    assert not isinstance(samples, StackedSamples)  # a marker cannot join the batch
    skipped = [s for s in samples if isinstance(s, Skipped)]
    assert [s.path for s in skipped] == [str(victim)]
    want = skipping.__getitems__(keys)
    good = [s for s in want if not isinstance(s, Skipped)]
    assert _equal(
        default_collate([s for s in samples if not isinstance(s, Skipped)]), default_collate(good)
    )
    raising = _dataset(root, geometry)
    with pytest.raises(fastload.ImageDecodeError, match=victim.name):
        raising.load_stacked(keys)
    victim.unlink()  # missing when read: read alone, which raises naming it
    with pytest.raises(fastload.ImageDecodeError, match=victim.name):
        raising.load_stacked(keys)


def test_what_cannot_be_stacked_is_loaded_as_getitems_loads_it(tmp_path: Path) -> None:
    root = _folder(tmp_path, count=6)
    keys = _keys(list(range(6)))
    plain = [int(k) for k in keys]  # no seeds: draws from the process's streams
    torch.manual_seed(0)
    dataset = _dataset(root)
    got = dataset.load_stacked(plain)
    torch.manual_seed(0)
    assert not isinstance(got, StackedSamples) and _equal(
        default_collate(got), default_collate(dataset.__getitems__(plain))
    )
    sizes = fastload.ImageFolder(root, T.Resize(40), backend="region")  # sizes differ
    assert _equal(sizes.load_stacked(keys), sizes.__getitems__(keys))
    other = _dataset(root).using("opencv")  # decodes one at a time
    assert _equal(_as_batch(other.load_stacked(keys)), _as_batch(other.__getitems__(keys)))


def test_targets_are_transformed_under_each_samples_seed(tmp_path: Path) -> None:
    def noisy(label: int) -> tuple[int, float]:
        return label, float(torch.rand(()))

    dataset = _dataset(_folder(tmp_path, count=10), target_transform=noisy)
    keys = _keys(list(range(10)))
    stacked = dataset.load_stacked(keys)
    assert isinstance(stacked, StackedSamples)
    assert _equal(stacked.collated(), default_collate(dataset.__getitems__(keys)))


def test_stacked_samples_refuse_targets_that_do_not_line_up() -> None:
    with pytest.raises(ValueError, match="2 images but 3 targets"):
        StackedSamples(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), [0, 1, 2], None)


def test_samples_loaded_alone_are_read_and_their_targets_transformed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "pngs"
    for k in range(6):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(photo(120 + 8 * k, 100, seed=k))
        (root / f"c{k % 2}" / f"{k}.png").write_bytes(png_bytes(image))
    _folder(root, count=4)  # and JPEGs, planned at another size than the PNGs give
    seen: list[int] = []

    def once(label: int) -> int:
        seen.append(label)
        return label

    opened: list[str] = []
    read_file = fastload.datasets.folders.read_file

    def counted(path: str) -> bytes:
        opened.append(path)
        return read_file(path)

    keys = _keys(list(range(10)))
    for transform in (T.Resize(40), T.RandomResizedCrop(64)):  # sizes differ, sizes alike
        dataset = fastload.ImageFolder(root, transform, target_transform=once, backend="region")
        want = dataset.__getitems__(keys)
        seen.clear()
        monkeypatch.setattr(fastload.datasets.folders, "read_file", counted)
        got = dataset.load_stacked(keys)
        monkeypatch.setattr(fastload.datasets.folders, "read_file", read_file)
        assert _equal(list(got), list(want))
        assert sorted(seen) == sorted(label for _, label in want)  # each sample's once
        assert opened == []  # the batch's files read once, together


class _Noted(fastload.ImageFolder):
    """Notes, in a file, each batch read together (by the stacked path only), and the
    normalize its fetch asked for where it asked for one."""

    notes: Path

    def read_samples(self, indices: list[int]) -> Any:
        asked = welcomed_normalizing()
        with open(self.notes, "a") as notes:
            notes.write(
                f"{len(indices)}\n" + (f"normalized:{asked.channels_last}\n" if asked else "")
            )
        return super().read_samples(indices)


def _epoch(dataset: Any, workers: int, **options: Any) -> list[Any]:
    """One shuffled epoch of a loader of batches of 4, its order seeded."""
    loader = fastload.DataLoader(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(3),
        **options,
    )
    return [batch for batch in loader]


def test_loaders_stack_batches_where_the_collate_chain_takes_them(
    tmp_path: Path,
) -> None:
    dataset = _Noted(_folder(tmp_path / "set", count=20), T.RandomResizedCrop(48))
    dataset.notes = tmp_path / "notes"

    def epoch(workers: int, **options: Any) -> list[Any]:
        return _epoch(dataset, workers, **options)

    alone = epoch(0, collate_fn=lambda b: default_collate(b))  # the user's: each alone
    assert not dataset.notes.exists()
    for workers in (2, 0):  # worker processes, and the loader's own process
        assert _equal(epoch(workers), alone)
        assert set(dataset.notes.read_text().split()) == {"4"}
        dataset.notes.unlink()
    assert _equal(epoch(2, collate_fn=lambda b: default_collate(b)), alone)
    assert not dataset.notes.exists()
    assert not welcomed()  # the main thread's own say is put back


class _WithIndex(fastload.ImageFolder):
    """A user's subclass that makes its samples its own way."""

    def __getitem__(self, index: Any) -> Any:
        image, label = super().__getitem__(index)
        return image, label, int(index)


class _Reversed(fastload.ImageFolder):
    """A user's subclass that makes its batches its own way."""

    def __getitems__(self, indices: list[Any]) -> Any:
        return list(reversed(super().__getitems__(indices)))


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_subclass_making_its_own_samples_or_batches_is_asked_for_them(
    tmp_path: Path, kind: str
) -> None:
    root = _folder(tmp_path, count=12)
    for cls in (_WithIndex, _Reversed):
        dataset = cls(root, T.RandomResizedCrop(48), backend="region")
        keys = _keys(list(range(8)))
        assert _equal(dataset.load_stacked(keys), dataset.__getitems__(keys))

        batches = _epoch(dataset, 2, worker_type=kind)
        assert _equal(batches, _epoch(dataset, 0, worker_type=kind))
        if cls is _WithIndex:
            assert all(len(batch) == 3 for batch in batches)  # its index came along


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_a_batch_is_made_in_the_threads_ring_where_it_has_one(
    tmp_path: Path, geometry: str
) -> None:
    taken: list[tuple[tuple[int, ...], torch.dtype]] = []

    class Ring(buffers.BatchRing):
        def take(self, shape: Any, dtype: torch.dtype) -> torch.Tensor:
            taken.append((tuple(shape), dtype))
            return super().take(shape, dtype)

    dataset = _dataset(_folder(tmp_path, count=6), geometry)
    keys = _keys(list(range(6)))
    buffers.use(Ring(2))
    try:
        held = dataset.load_stacked(keys)
        again = dataset.load_stacked(keys)
    finally:
        buffers.use(None)
    assert taken == [((6, 3, 64, 64), torch.uint8)] * 2
    assert held.images.data_ptr() != again.images.data_ptr()  # held: not written again
    assert _equal(held.collated(), again.collated())


@pytest.fixture
def worker_ring() -> Any:
    """This process made a worker process of a fastload loader, with a ring of 4 slots."""
    from ramps import as_worker

    with as_worker(4) as table:
        yield table


def test_a_worker_process_decodes_its_batch_into_the_shared_memory_it_sends(
    tmp_path: Path, worker_ring: Any
) -> None:
    from fastload.loader.collate import collate_chain
    from fastload.memory import shared_buffers

    root = _folder(tmp_path, count=8)
    victim = sorted(root.rglob("*.jpg"))[5]
    chain = collate_chain(
        default_collate, stage=None, on_device=False, skipping=True, batched=True, keyed=True
    )
    main = shared_buffers.Returns(worker_ring)  # the loader's side, freeing what it let go of
    dataset = _dataset(root, on_error="skip")
    keys = _keys(list(range(8)))
    want = default_collate(dataset.__getitems__(keys))
    for _ in range(6):  # more batches than slots: each comes back once dropped
        stacked = dataset.load_stacked(keys)
        images = stacked.images
        collated = chain(stacked)
        main.received(collated)
        batch = collated.batch
        assert _equal(batch, want) and batch[0].is_shared()
        assert batch[0].data_ptr() == images.data_ptr()  # sent as it was decoded: no copy
        del stacked, images, collated, batch
    victim.write_bytes(b"\xff\xd8\xff" + bytes(64) + b"\xff\xd9")  # a file skipped
    for _ in range(6):
        # the samples come as a list, stacked anew in another slot; the one decoded into is
        # freed once they are dropped (it stayed out for good, and the ring ran dry)
        samples = dataset.load_stacked(keys)
        assert not isinstance(samples, StackedSamples)
        collated = chain(samples)
        main.received(collated)
        batch = collated.batch
        assert [s.path for s in collated.skipped] == [str(victim)]
        assert batch[0].is_shared() and len(batch[0]) == 7
        del samples, collated, batch
    assert worker_ring.states[0].tolist().count(0) >= 2


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _normalizing(channels_last: bool = False) -> Normalizing:
    return batch_ops.normalizing_of(MEAN, STD, channels_last=channels_last)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_a_batch_normalized_as_decoded_is_its_samples_normalized(
    tmp_path: Path, geometry: str, channels_last: bool
) -> None:
    root = _folder(tmp_path, count=10)
    rotated = with_orientation(photo(260, 180, seed=40), 6)  # decoded alone, then normalized
    (root / "c0" / "rotated.jpg").write_bytes(rotated)
    (root / "c1" / "flat.png").write_bytes(png_bytes(Image.fromarray(photo(240, 200, seed=41))))
    dataset = _dataset(root, geometry)
    normalizing = _normalizing(channels_last)
    for seed in range(3):
        keys = _keys(list(range(len(dataset))), seed)
        want = dataset.load_stacked(keys)
        got = dataset.load_stacked(keys, normalizing=normalizing)
        assert isinstance(got, StackedSamples) and got.normalized == normalizing
        factors, shifts = normalizing.factors, normalizing.shifts
        assert torch.equal(got.images, batch_ops.normalize_planes(want.images, factors, shifts))
        assert got.images.is_contiguous(memory_format=torch.channels_last) == channels_last
        assert _equal(got.targets, want.targets) and got.seed == want.seed


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_batch_normalized_as_decoded_falls_back_to_its_samples_own_bytes(
    tmp_path: Path, channels_last: bool
) -> None:
    """A batch that cannot be stacked (a skipped file) comes as the samples as ever: the
    images the decoder normalized are the uint8 images again, exactly."""
    root = _folder(tmp_path, count=8)
    sorted(root.rglob("*.jpg"))[3].write_bytes(b"\xff\xd8\xff" + bytes(64) + b"\xff\xd9")
    dataset = _dataset(root, on_error="skip")
    keys = _keys(list(range(8)))
    want = dataset.load_stacked(keys)
    got = dataset.load_stacked(keys, normalizing=_normalizing(channels_last))
    assert not isinstance(got, StackedSamples) and sum(isinstance(s, Skipped) for s in got) == 1
    assert _equal(
        [s for s in got if not isinstance(s, Skipped)],
        [s for s in want if not isinstance(s, Skipped)],
    )


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "workers", [("thread", 2), ("process", 2), (None, 0)], ids=["threads", "processes", "none"]
)
def test_loaders_normalize_as_they_decode_where_the_stage_normalizes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: Any, channels_last: bool
) -> None:
    """``batch_transforms`` that start with ``gpu.Normalize``: the batches are those of the
    uint8 loader normalized, made by the decoder in float32 (seen in this process)."""
    from fastload import gpu

    kind, count = workers
    dataset = _Noted(_folder(tmp_path / "set", count=20), T.RandomResizedCrop(48))
    dataset.notes = tmp_path / "notes"
    asked: list[Any] = []
    many = RegionBackend.decode_drawn_many

    def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("normalizing"))
        return many(self, *args, **kwargs)

    monkeypatch.setattr(RegionBackend, "decode_drawn_many", noted)

    typed = {"worker_type": kind} if count else {}
    plain = _epoch(dataset, count, **typed)
    asked.clear()
    ops = gpu.Normalize(MEAN, STD)
    normalized = _epoch(dataset, count, batch_transforms=ops, channels_last=channels_last, **typed)
    assert len(plain) == len(normalized) == 5
    for (images, labels), (floats, same) in zip(plain, normalized, strict=True):
        assert torch.equal(floats, batch_ops.normalize(images, MEAN, STD)) and torch.equal(
            labels, same
        )
        assert floats.is_contiguous(memory_format=torch.channels_last) == channels_last
    if kind != "process":
        assert asked == [_normalizing(channels_last)] * 5
    else:  # what each worker's fetch asked of the dataset
        assert dataset.notes.read_text().split().count(f"normalized:{channels_last}") == 5


def test_getitems_normalizes_as_it_decodes_when_welcomed(tmp_path: Path) -> None:
    """``__getitems__`` (a worker process's fetch, or the loader's own) hands the batch
    normalized where the fetch says its chain normalizes first."""
    from fastload import gpu
    from fastload.gpu.stage import BatchStage
    from fastload.loader.collate import collate_chain

    stage = BatchStage(gpu.Normalize(MEAN, STD), channels_last=False)
    chain = collate_chain(
        default_collate, stage=stage, on_device=False, skipping=False, batched=True, keyed=True
    )
    normalizing = normalizes_stacked(chain)
    assert normalizing == _normalizing()
    dataset = _dataset(_folder(tmp_path, count=8))
    keys = _keys(list(range(8)))
    want = chain(dataset.__getitems__(keys))  # not welcomed: each sample alone
    welcome(True, normalizing)
    try:
        samples = dataset.__getitems__(keys)
    finally:
        welcome(False)
    assert isinstance(samples, StackedSamples) and samples.normalized == normalizing
    assert _equal(chain(samples), want)
