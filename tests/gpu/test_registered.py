"""Batches pinned in place (``FASTLOAD_PIN_IN_PLACE=1``). The worker processes' kept slots
registered with CUDA: each storage registered once when the main process first receives it,
unregistered before it is let go of (a slot's storage made again larger, a storage the worker
dropped, the iterator's end), and a registration CUDA refuses turning it off with one message.
Thread workers' and the loader's own process's batches made in pinned ring buffers, never pinned
by copying. CUDA's runtime is a recorder here; the device path is FakeCuda's
(tests/fakecuda.py); GPU-marked tests check the same batches, pixel for pixel, on a device."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from images import jpeg_bytes, photo
from torch.utils.data import Dataset

import fastload
from fastload import transforms as T
from fastload.gpu import registered
from fastload.gpu.registered import HostRegistry
from fastload.memory.shared_buffers import Returns, SlotTable, WorkerRing


class Runtime:
    """CUDA's runtime as torch exposes it, recording what is pinned; refuses with ``error``."""

    def __init__(self, error: int = 0) -> None:
        self.pinned: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.threads: set[str] = set()  # the threads that registered
        self.error = error

    def cudaHostRegister(self, pointer: int, nbytes: int, flags: int) -> int:
        self.calls.append(("register", pointer))
        self.threads.add(threading.current_thread().name)
        if self.error:
            return self.error
        assert pointer not in self.pinned and flags == 0
        self.pinned[pointer] = nbytes
        return 0

    def cudaHostUnregister(self, pointer: int) -> int:
        self.calls.append(("unregister", pointer))
        del self.pinned[pointer]  # a KeyError: unregistered twice, or never registered
        return 0


def _received(returns: Returns, storage: torch.UntypedStorage) -> torch.Tensor:
    """What the main process gets from a worker: a tensor in the ring storage."""
    batch = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (64,))
    returns.received([batch])
    return batch


def test_a_storage_is_registered_once_and_unregistered_once() -> None:
    runtime = Runtime()
    registry = HostRegistry(runtime)
    storage = torch.UntypedStorage(4096)
    assert registry.register(storage) and registry.register(storage)
    assert storage in registry and runtime.pinned == {storage.data_ptr(): 4096}
    registry.unregister(storage)
    registry.unregister(storage)  # nothing: it is not registered any more
    assert runtime.pinned == {} and storage not in registry
    registry.register(storage)
    registry.close()
    assert runtime.pinned == {}


def test_a_refused_registration_turns_it_off_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Runtime(error=1)  # cudaErrorInvalidValue
    registry = HostRegistry(runtime)
    with caplog.at_level(logging.INFO, logger="fastload"):
        assert not registry.register(torch.UntypedStorage(64))
        assert not registry.register(torch.UntypedStorage(64))
    assert len(runtime.calls) == 1  # not asked again
    assert registry.failed == "cudaHostRegister returned CUDA error 1 for 64 bytes"
    assert [r.message for r in caplog.records].count(
        f"{registry.failed}: the workers' batches are pinned by copying them, as without "
        "FASTLOAD_PIN_IN_PLACE=1"
    ) == 1


def _one_worker() -> tuple[SlotTable, WorkerRing, Runtime, Returns]:
    """One worker's ring of two slots, and the main process's side registering with a
    recording runtime."""
    table = SlotTable(1, slots=2)
    runtime = Runtime()
    return table, WorkerRing(table, 0), runtime, Returns(table, HostRegistry(runtime))


def test_the_main_process_registers_what_it_keeps_and_unregisters_it_before_letting_go() -> None:
    table, ring, runtime, returns = _one_worker()
    small = ring.take(64)
    assert small is not None
    batch = _received(returns, small)
    assert set(runtime.pinned) == {small.data_ptr()}
    _received(returns, small)  # the same slot again: registered already
    assert runtime.calls == [("register", small.data_ptr())]
    del batch
    table.states[0, 0] = 0  # the main process let it go; the worker makes it again larger
    large = ring.take(1 << 16)
    assert large is not None and large.data_ptr() != small.data_ptr()
    _received(returns, large)
    assert set(runtime.pinned) == {large.data_ptr()}  # the small one unregistered first
    returns.close()  # the iterator's end
    assert runtime.pinned == {}


def test_a_storage_the_worker_dropped_is_unregistered() -> None:
    table, ring, runtime, returns = _one_worker()
    storage = ring.take(256)
    assert storage is not None
    batch = _received(returns, storage)
    del batch, storage
    returns.received([])  # the consumer let go: the slot is marked free
    table.states[0, 0] = 2  # the worker dropped its storage (not taken lately)
    returns.received([])
    assert runtime.pinned == {}


class Ramps(Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 32, 32), i % 256, dtype=torch.uint8), i


class Records(Dataset):
    """The Ramps as dicts, as Hugging Face image pipelines make samples."""

    def __len__(self) -> int:
        return len(Ramps())

    def __getitem__(self, i: int) -> dict[str, Any]:
        image, label = Ramps()[i]
        return {"pixel_values": image, "label": label}


@pytest.mark.parametrize("pin_memory", [True, False], ids=["pin thread", "loop thread"])
@pytest.mark.parametrize("samples", ["tuples", "dicts"])
def test_a_cuda_loader_registers_its_workers_slots_and_skips_the_pinned_copy(
    monkeypatch: pytest.MonkeyPatch, samples: str, pin_memory: bool
) -> None:
    """With FASTLOAD_PIN_IN_PLACE=1 a loader with a CUDA device (faked) has its workers write
    their batches into kept slots, the thread that receives them (torch's pin-memory thread,
    or with pin_memory=False the loop's own) registers each slot once, and no image is pinned
    by copying; every slot is unregistered at the epoch's end. The batches are the dataset's,
    tuples or dicts."""
    from fakecuda import FakeCuda

    fake = FakeCuda(monkeypatch)
    runtime = Runtime()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: runtime)
    monkeypatch.setattr(  # what CUDA answers for registered memory
        torch.Tensor,
        "is_pinned",
        lambda t: (
            t.untyped_storage().data_ptr() in runtime.pinned or getattr(t, "fake_pinned", False)
        ),
    )
    monkeypatch.setenv(registered.ENV, "1")
    dataset = Ramps() if samples == "tuples" else Records()
    loader = fastload.DataLoader(
        dataset, batch_size=4, num_workers=2, device="cuda", pin_memory=pin_memory
    )
    assert not loader.plan.threads
    labels = []
    for batch in loader:
        images, batch_labels = batch if samples == "tuples" else batch.values()
        assert torch.equal(images[:, 0, 0, 0].long(), batch_labels % 256)
        labels += batch_labels.tolist()
    assert labels == list(range(48))
    registers = [pointer for kind, pointer in runtime.calls if kind == "register"]
    # a few slots a worker, not one a batch (12). torch's pin-memory thread also holds the
    # batches it takes ahead of the loop, each in its slot: 4 tasks in flight (2 workers x
    # prefetch_factor 2) + the prefetcher's 2 + the loop's 1 + for each worker one slot let
    # go of but not yet marked free (the next arrival marks it) = 9
    assert 2 <= len(set(registers)) <= (9 if pin_memory else 8)
    assert runtime.pinned == {}  # all unregistered at the end
    # receiving, and with it registering, stays off the loop's thread where torch pins
    if pin_memory:  # torch names its thread by the function it runs
        assert len(runtime.threads) == 1 and "_pin_memory_loop" in runtime.threads.pop()
    else:
        assert runtime.threads == {threading.current_thread().name}
    pins = [entry for entry in fake.log if entry == ("pin",)]
    assert len(pins) == 12  # the labels alone (not in a slot); never the images


def test_off_by_default() -> None:
    assert not registered.enabled()


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("photos")
    paths = []
    for i in range(20):
        path = folder / f"p{i:02d}.jpg"
        path.write_bytes(jpeg_bytes(photo(64 + 4 * i, 56, seed=i)))
        paths.append(path)
    return paths


def _photo_loader(
    paths: list[Path], device: str, batch_size: int = 4, *, as_written: bool = False, **options: Any
) -> fastload.DataLoader:
    """The photos decoded straight into one batch by the region backend, or (``as_written``)
    made a sample at a time by torchvision's transforms and collated by torch's collate
    (``accelerate=False``: a CUDA device would fuse them with decoding)."""
    if as_written:
        import torchvision.transforms as TV

        transform: Any = TV.Compose([TV.RandomResizedCrop(32), TV.PILToTensor()])
        options["accelerate"] = False
    else:
        transform = T.RandomResizedCrop(32)
    dataset = fastload.ImageList(paths, list(range(len(paths))), transform, backend="region")
    return fastload.DataLoader(
        dataset,
        backend="region",  # decoded by the workers, not on the GPU
        batch_size=batch_size,
        shuffle=True,
        device=device,
        generator=torch.Generator().manual_seed(3),
        **options,
    )


@pytest.mark.parametrize("as_written", [False, True], ids=["decoded stacked", "as written"])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_made_in_this_process_are_made_in_pinned_buffers(
    monkeypatch: pytest.MonkeyPatch,
    photos: list[Path],
    workers: int,
    as_written: bool,
    require_backend,
) -> None:
    """Thread workers (and no workers) decode each batch into a buffer of a ring allocated
    pinned once, or stack the samples torchvision's transforms made into one: the images are
    never pinned by copying, the labels are; the batches are those the loader makes without
    it."""
    from fakecuda import FakeCuda

    require_backend("region")
    options: dict[str, Any] = {"as_written": as_written}
    if workers:
        options.update(num_workers=workers, worker_type="thread")
    on_cpu = _photo_loader(photos, "cpu", batch_size=1, **options)
    fake = FakeCuda(monkeypatch)
    monkeypatch.setenv(registered.ENV, "1")
    loader = _photo_loader(photos, "cuda", batch_size=1, **options)
    assert loader.plan.threads == bool(workers)
    for _ in range(2):  # 20 batches an epoch: more than a ring holds, so buffers come again
        expected = [(x.clone(), y.clone()) for x, y in on_cpu]
        got = [(x.clone(), y.clone()) for x, y in loader]
        for (image, label), (image_cpu, label_cpu) in zip(got, expected, strict=True):
            assert torch.equal(image, image_cpu) and torch.equal(label, label_cpu)
    assert fake.log.count(("pin",)) == 2 * len(expected)  # the labels alone
    # ring buffers, each taken again once let go of: far fewer than one a batch
    assert 1 <= fake.log.count(("pinned alloc",)) <= len(expected)


@pytest.mark.parametrize("in_place", ["0", "1"], ids=["pinned by copying", "pinned in place"])
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_the_loop_never_waits_on_the_gpu_between_batches(
    monkeypatch: pytest.MonkeyPatch, photos: list[Path], kind: str, in_place: str, require_backend
) -> None:
    """The main process's work a batch on the device path, the train recipe's flip and
    normalize as batch ops on the device: each tensor copied once, non_blocking, on the
    prefetcher's stream, and the consumer's stream told to wait for it; no synchronisation
    while batches flow (a host batch is let go of once its copy's event says it is done,
    asked, never waited on); the images never pinned by copying when pinned in place."""
    from fakecuda import FakeCuda

    from fastload import gpu

    require_backend("region")
    fake = FakeCuda(monkeypatch)
    runtime = Runtime()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: runtime)
    pinned_by_fake = torch.Tensor.is_pinned
    monkeypatch.setattr(  # what CUDA answers for registered memory, and the fake's pinned
        torch.Tensor,
        "is_pinned",
        lambda t: t.untyped_storage().data_ptr() in runtime.pinned or pinned_by_fake(t),
    )
    monkeypatch.setenv(registered.ENV, in_place)
    ops = gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize((0.5,) * 3, (0.25,) * 3)])
    loader = _photo_loader(
        photos, "cuda", num_workers=2, worker_type=kind, batch_transforms=ops, drop_last=True
    )
    batches = iter(loader)
    images = [next(batches)[0] for _ in range(len(loader))]
    flowing = list(fake.log)
    assert list(batches) == []  # the epoch's end
    assert all(image.dtype == torch.float32 and image.shape[1:] == (3, 32, 32) for image in images)
    assert not [entry for entry in flowing if entry[0] == "synchronize"]
    copies = [entry for entry in flowing if entry[0] == "copy"]
    assert copies == [("copy", "side", True)] * 2 * len(images)  # images and labels
    assert [entry[:2] for entry in flowing if entry[0] == "wait"] == [("wait", "consumer")] * len(
        images
    )
    pins = flowing.count(("pin",))
    assert pins == (len(images) if in_place == "1" else 2 * len(images))  # labels; or both


def test_without_it_this_process_pins_by_copying(
    monkeypatch: pytest.MonkeyPatch, photos: list[Path], require_backend
) -> None:
    from fakecuda import FakeCuda

    require_backend("region")
    fake = FakeCuda(monkeypatch)
    loader = _photo_loader(photos, "cuda", num_workers=2, worker_type="thread")
    batches = sum(1 for _ in loader)
    assert fake.log.count(("pin",)) == 2 * batches and ("pinned alloc",) not in fake.log


def test_a_worker_killed_with_batches_in_flight_is_named_and_every_slot_unregistered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker killed mid-epoch while its slots are registered and batches wait in the
    prefetcher: one error naming the worker, and every registration undone once the iterator
    is let go of (the killed worker's slots included)."""
    from fakecuda import FakeCuda

    FakeCuda(monkeypatch)
    runtime = Runtime()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: runtime)
    monkeypatch.setattr(
        torch.Tensor, "is_pinned", lambda t: t.untyped_storage().data_ptr() in runtime.pinned
    )
    monkeypatch.setenv(registered.ENV, "1")
    loader = fastload.DataLoader(Ramps(), batch_size=4, num_workers=2, device="cuda")
    in_flight: list[int] = []
    _kill_a_worker_mid_epoch(loader, lambda: in_flight.append(len(runtime.pinned)))
    assert in_flight[0] > 0  # slots were registered, batches in flight, when it was killed
    assert runtime.pinned == {}


def _kill_a_worker_mid_epoch(loader: fastload.DataLoader, after_first: Any = None) -> None:
    """Start an epoch, kill one of its workers (``after_first`` called before), and check the
    error names it; the iterator is let go of and collected after."""
    before = {p.pid for p in multiprocessing.active_children()}
    batches = iter(loader)
    next(batches)
    if after_first is not None:
        after_first()
    victim = next(p for p in multiprocessing.active_children() if p.pid not in before)
    os.kill(victim.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=rf"DataLoader worker \(pid(\(s\))? {victim.pid}\b"):
        for _ in range(len(loader)):
            next(batches)
    del batches
    gc.collect()


@pytest.mark.gpu
@pytest.mark.parametrize("in_place", ["0", "1"])
def test_on_the_device_a_killed_worker_is_named_and_the_next_loader_runs(
    monkeypatch: pytest.MonkeyPatch, in_place: str
) -> None:
    """The same on a real device, pinned by copying and pinned in place: the error names the
    worker, the device memory the epoch held is given back, and a new loader delivers the
    dataset's batches."""
    monkeypatch.setenv(registered.ENV, in_place)
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    _kill_a_worker_mid_epoch(
        fastload.DataLoader(Ramps(), batch_size=4, num_workers=2, device="cuda")
    )
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline
    labels = []
    for images, batch_labels in fastload.DataLoader(
        Ramps(), batch_size=4, num_workers=2, device="cuda"
    ):
        assert images.is_cuda and torch.equal(images[:, 0, 0, 0].long(), batch_labels % 256)
        labels += batch_labels.tolist()
    assert labels == list(range(48))


@pytest.mark.gpu
@pytest.mark.parametrize("as_written", [False, True], ids=["decoded stacked", "as written"])
@pytest.mark.parametrize(
    "options",
    [{}, {"num_workers": 2, "worker_type": "thread"}, {"num_workers": 2, "worker_type": "process"}],
    ids=["no workers", "threads", "processes"],
)
def test_on_the_device_pinned_in_place_delivers_the_same_batches(
    monkeypatch: pytest.MonkeyPatch,
    photos: list[Path],
    options: dict[str, Any],
    as_written: bool,
    require_backend,
) -> None:
    """Pixel for pixel, two epochs, whichever way the batches were pinned."""
    require_backend("region")

    def epochs(in_place: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
        monkeypatch.setenv(registered.ENV, in_place)
        loader = _photo_loader(photos, "cuda", as_written=as_written, **options)
        out = []
        for _ in range(2):
            for images, labels in loader:
                assert images.is_cuda and labels.is_cuda
                out.append((images.cpu(), labels.cpu()))
        return out

    for (image, label), (copied, copied_label) in zip(epochs("1"), epochs("0"), strict=True):
        assert torch.equal(image, copied) and torch.equal(label, copied_label)
