"""CUDAPrefetcher and map_tensors.

Without a GPU, the prefetcher's stream logic runs against a fake ``torch.cuda`` that records
every stream operation; the real thing runs in the ``gpu``-marked tests.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import multiprocessing
import threading
from typing import Any

import pytest
import torch
from fakecuda import FakeCuda

import fastload
from fastload import CUDAPrefetcher, map_tensors

Pair = collections.namedtuple("Pair", "image label")


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    meta: dict[str, Any]
    name: str = "x"
    size: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.size = self.image.numel()


class Batch(list):
    """A list subclass, as some collate functions return."""


# ---------------------------------------------------------------- map_tensors


def test_map_tensors_keeps_every_container_type() -> None:
    t = torch.arange(4)
    batch = {
        "tuple": (t, 1),
        "list": [t, "s"],
        "named": Pair(t, 3),
        "ordered": collections.OrderedDict(a=t),
        "default": collections.defaultdict(list, a=t),
        "dataclass": Sample(t, {"k": t}),
        "sub": Batch([t]),
        "none": None,
        "text": "hello",
        "number": 2.5,
    }
    out = map_tensors(lambda x: x + 10, batch)
    assert type(out) is dict and list(out) == list(batch)
    assert out["tuple"][1] == 1 and torch.equal(out["tuple"][0], t + 10)
    assert out["list"][1] == "s" and type(out["list"]) is list
    assert type(out["named"]) is Pair and out["named"].label == 3
    assert type(out["ordered"]) is collections.OrderedDict
    assert type(out["default"]) is collections.defaultdict
    assert out["default"].default_factory is list
    assert type(out["dataclass"]) is Sample
    assert torch.equal(out["dataclass"].meta["k"], t + 10)
    assert out["dataclass"].size == 4  # init=False field recomputed, not copied blindly
    assert type(out["sub"]) is Batch and torch.equal(out["sub"][0], t + 10)
    assert out["none"] is None and out["text"] == "hello" and out["number"] == 2.5


def test_map_tensors_does_not_modify_the_input() -> None:
    t = torch.zeros(2)
    batch = {"a": [t]}
    out = map_tensors(lambda x: x + 1, batch)
    assert batch["a"][0] is t and torch.equal(t, torch.zeros(2))
    assert torch.equal(out["a"][0], torch.ones(2))


def test_map_tensors_visits_each_tensor_once() -> None:
    seen = []
    map_tensors(seen.append, (torch.zeros(1), [torch.ones(1), {"x": torch.ones(2)}], "s"))
    assert [tuple(t.shape) for t in seen] == [(1,), (1,), (2,)]


# ---------------------------------------------------------------- construction errors


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_no_cuda_is_a_clear_error_at_construction() -> None:
    with pytest.raises(RuntimeError, match=r"torch.cuda.is_available\(\) is False"):
        CUDAPrefetcher([1, 2])


@pytest.mark.parametrize("depth", [0, -1, 1.5, "2", True])
def test_bad_depth(depth: Any) -> None:
    with pytest.raises(ValueError, match=r"depth=.* must be an int >= 1"):
        CUDAPrefetcher([1], depth=depth)


def test_cpu_is_not_a_prefetch_target() -> None:
    with pytest.raises(ValueError, match="must be a CUDA device"):
        CUDAPrefetcher([1], device="cpu")


# ---------------------------------------------------------------- the stream logic, on a fake GPU


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    return FakeCuda(monkeypatch)


def pinned(*shape: int, fill: float = 0) -> torch.Tensor:
    t = torch.full(shape, fill)
    t.fake_pinned = True
    return t


class CountingSource:
    """An iterable that counts how many batches were drawn from it."""

    def __init__(self, n: int) -> None:
        self.n, self.drawn = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.drawn += 1
            yield {"x": pinned(2, fill=i), "i": i}

    def __len__(self) -> int:
        return self.n


def test_copies_run_on_the_side_stream_without_blocking(fake_cuda: FakeCuda) -> None:
    out = list(CUDAPrefetcher(CountingSource(3)))
    copies = [e for e in fake_cuda.log if e[0] == "copy"]
    assert copies == [("copy", "side", True)] * 3
    assert [b["i"] for b in out] == [0, 1, 2]
    assert all(b["x"].fake_device == torch.device("cuda", 0) for b in out)
    assert [b["x"][0].item() for b in out] == [0, 1, 2]


def test_consumer_waits_for_each_copy_and_owns_the_memory(fake_cuda: FakeCuda) -> None:
    log = fake_cuda.log
    prefetcher = iter(CUDAPrefetcher(CountingSource(4), depth=1))
    for _ in range(4):
        start = len(log)
        batch = next(prefetcher)
        during = log[start:]
        (wait,) = [e for e in during if e[0] == "wait"]
        assert wait[1] == "consumer"
        # the event waited on was recorded on the side stream after this batch's copy (and the
        # event its host batch is let go by)
        recorded = log.index(("record", "side", wait[2]))
        assert log[recorded - 2] == ("copy", "side", True) and log[recorded - 1][0] == "record"
        # the consumer takes ownership only after waiting
        owned = ("record_stream", "consumer", id(batch["x"]))
        assert during.index(wait) < during.index(owned)
    with pytest.raises(StopIteration):
        next(prefetcher)


class Tag:
    """A host batch's marker, whose life shows how long the prefetcher holds the batch."""


def test_a_host_batch_is_held_until_its_copy_has_finished_on_the_gpu(
    fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory pinned in place (a worker's registered slot) is read by the copy after
    non_blocking returns: the prefetcher holds each host batch until the event recorded after
    its copy has completed, asked without waiting; close() waits for the rest."""
    import gc
    import weakref

    from fakecuda import FakeEvent

    alive: list[weakref.ref] = []

    def source():  # each batch made as it is drawn, so only the prefetcher holds it
        for _ in range(4):
            tag = Tag()
            alive.append(weakref.ref(tag))
            yield {"x": pinned(2), "tag": tag}

    monkeypatch.setattr(FakeEvent, "done", False)  # every copy still in flight
    prefetcher = iter(CUDAPrefetcher(source(), depth=1))
    next(prefetcher), next(prefetcher)  # batches 0 and 1 handed out, batch 2 copied ahead
    gc.collect()
    assert alive[0]() is not None and alive[1]() is not None  # their copies may still read
    monkeypatch.setattr(FakeEvent, "done", True)  # the copies have landed
    next(prefetcher)
    gc.collect()
    assert alive[0]() is None and alive[1]() is None and alive[2]() is None
    # closed with copies in flight: it waits for them before letting their batches go
    alive.clear()
    monkeypatch.setattr(FakeEvent, "done", False)
    prefetcher = iter(CUDAPrefetcher(source(), depth=2))
    next(prefetcher)
    prefetcher.close()
    gc.collect()
    assert len(alive) == 3 and all(ref() is None for ref in alive)
    assert [entry[0] for entry in fake_cuda.log].count("synchronize") == 3


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_depth_batches_are_in_flight_ahead(fake_cuda: FakeCuda, depth: int) -> None:
    source = CountingSource(10)
    prefetcher = iter(CUDAPrefetcher(source, depth=depth))
    next(prefetcher)
    assert source.drawn == 1 + depth
    next(prefetcher)
    assert source.drawn == 2 + depth


def test_unpinned_tensors_are_pinned_before_the_copy(fake_cuda: FakeCuda) -> None:
    list(CUDAPrefetcher([(torch.zeros(2), pinned(2))]))
    ops = [e[0] for e in fake_cuda.log if e[0] in ("pin", "copy")]
    assert ops == ["pin", "copy", "copy"]


def test_pinning_can_be_turned_off(fake_cuda: FakeCuda) -> None:
    list(CUDAPrefetcher([torch.zeros(2)], pin_memory=False))
    assert not [e for e in fake_cuda.log if e[0] == "pin"]


def test_structure_and_non_tensor_leaves_survive(fake_cuda: FakeCuda) -> None:
    t = pinned(3, fill=1)
    batch = Pair(image=t, label=["a", 1, None])
    (out,) = list(CUDAPrefetcher([batch]))
    assert type(out) is Pair and out.label == ["a", 1, None]
    assert out.image.fake_device.type == "cuda" and torch.equal(out.image, t)


def test_source_error_arrives_after_the_batches_before_it(fake_cuda: FakeCuda) -> None:
    def source():
        yield pinned(1, fill=0)
        yield pinned(1, fill=1)
        raise OSError("disk gone")

    prefetcher = iter(CUDAPrefetcher(source(), depth=3))
    assert next(prefetcher).item() == 0
    assert next(prefetcher).item() == 1
    with pytest.raises(OSError, match="disk gone"):
        next(prefetcher)


def test_each_iter_is_a_new_pass_and_len_forwards(fake_cuda: FakeCuda) -> None:
    prefetcher = CUDAPrefetcher(CountingSource(3))
    assert len(prefetcher) == 3
    assert [b["i"] for b in prefetcher] == [0, 1, 2]
    assert [b["i"] for b in prefetcher] == [0, 1, 2]


def test_close_and_context_manager_release_the_source(fake_cuda: FakeCuda) -> None:
    closed = []

    def source():
        try:
            for i in range(100):
                yield pinned(1, fill=i)
        finally:
            closed.append(True)

    with CUDAPrefetcher(source()) as prefetcher:
        next(iter(prefetcher))
    assert closed == [True]
    with pytest.raises(StopIteration):
        next(prefetcher)


def test_dataloader_with_cuda_device_uses_the_prefetcher(fake_cuda: FakeCuda) -> None:
    data = [(torch.full((2,), i), i) for i in range(6)]
    loader = fastload.DataLoader(data, batch_size=2, device="cuda", device_prefetch=1)
    assert loader.pin_memory is True  # pinned by torch's pin thread when a GPU is present
    it = iter(loader)
    # the prefetcher, behind the loader's count of delivered batches (state_dict)
    assert it.depth == 1 and len(it) == 3
    out = list(it)
    assert [b[1].tolist() for b in out] == [[0, 1], [2, 3], [4, 5]]
    assert all(b[0].fake_device.type == "cuda" for b in out)


def test_dataloader_with_cuda_device_in_a_plain_for_loop(fake_cuda: FakeCuda) -> None:
    """`for batch in loader` calls iter() on the loader only: the pass must already be started."""
    data = [(torch.full((2,), i), i) for i in range(6)]
    labels = []
    for _, label in fastload.DataLoader(data, batch_size=2, device="cuda"):
        labels.append(label.tolist())
    assert labels == [[0, 1], [2, 3], [4, 5]]


def test_next_before_iter_starts_the_first_pass(fake_cuda: FakeCuda) -> None:
    prefetcher = CUDAPrefetcher(CountingSource(2))
    assert next(prefetcher)["i"] == 0 and next(prefetcher)["i"] == 1
    with pytest.raises(StopIteration):
        next(prefetcher)
    with pytest.raises(StopIteration):  # exhausted stays exhausted until iter() again
        next(prefetcher)
    assert [b["i"] for b in prefetcher] == [0, 1]


def test_dataloader_keeps_an_explicit_pin_memory(fake_cuda: FakeCuda) -> None:
    data = list(range(4))
    assert fastload.DataLoader(data, device="cuda", pin_memory=False).pin_memory is False
    positional = fastload.DataLoader(data, 1, False, None, None, 0, None, False, device="cuda")
    assert positional.pin_memory is False
    assert fastload.DataLoader(data).pin_memory is False  # torch's default without a device


# ---------------------------------------------------------------- pinning tensor subclasses


def _boxes() -> Any:
    from torchvision import tv_tensors

    return tv_tensors.BoundingBoxes(
        torch.tensor([[1.0, 2.0, 5.0, 6.0]]), format="XYWH", canvas_size=(30, 40)
    )


def test_pinning_keeps_tensor_subclasses_and_their_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's pin_memory returns a plain tensor for torchvision's BoundingBoxes and Mask;
    fastload's pinning wraps it again, format and canvas size kept (pinning faked: no GPU)."""
    from torchvision import tv_tensors

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: t.as_subclass(torch.Tensor) + 0)
    target = {
        "boxes": _boxes(),
        "masks": tv_tensors.Mask(torch.ones(1, 3, 3)),
        "labels": torch.ones(1),
    }
    assert fastload.memory.tensors.has_subclasses(
        [target]
    ) and not fastload.memory.tensors.has_subclasses([1])
    pinned = fastload.memory.tensors.pin_batch([target])[0]
    assert type(pinned["boxes"]) is tv_tensors.BoundingBoxes
    assert pinned["boxes"].format is tv_tensors.BoundingBoxFormat.XYWH
    assert pinned["boxes"].canvas_size == (30, 40)
    assert type(pinned["masks"]) is tv_tensors.Mask and type(pinned["labels"]) is torch.Tensor
    assert torch.equal(
        pinned["boxes"].as_subclass(torch.Tensor), target["boxes"].as_subclass(torch.Tensor)
    )


class Detections(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, Any]]:
        return torch.zeros(3, 4, 4), {"boxes": _boxes(), "id": i}


def lists(samples: list[Any]) -> tuple[Any, ...]:
    return tuple(zip(*samples, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pinned_loader_hands_out_its_batches_with_their_tensor_subclasses(workers: int) -> None:
    """With pin_memory=True the batches travel wrapped for pinning (here without a GPU: not
    pinned); the loader hands out the batches themselves."""
    from torchvision import tv_tensors

    loader = fastload.DataLoader(
        Detections(), batch_size=4, num_workers=workers, collate_fn=lists, pin_memory=True
    )
    with pytest.warns(UserWarning, match="pin_memory"):
        batches = list(loader)
    targets = [t for _, targets in batches for t in targets]
    assert [t["id"] for t in targets] == list(range(8))
    assert all(type(t["boxes"]) is tv_tensors.BoundingBoxes for t in targets)


# ---------------------------------------------------------------- on a real GPU


@pytest.mark.gpu
def test_gpu_batches_arrive_on_the_device_with_the_right_values() -> None:
    host = [{"x": torch.randn(64, 3, 32, 32), "y": torch.arange(64), "name": "b"} for _ in range(8)]
    with CUDAPrefetcher(host, depth=2) as batches:
        for src, out in zip(host, batches, strict=True):
            assert out["x"].is_cuda and out["y"].is_cuda and out["name"] == "b"
            torch.testing.assert_close(out["x"].cpu(), src["x"])


@pytest.mark.gpu
@pytest.mark.parametrize("busy_consumer", [False, True])
def test_gpu_consumer_sees_the_finished_copy(busy_consumer: bool) -> None:
    """An in-place op queued on the consumer's stream right away must see the copied values.

    64 MiB copies take long enough that, without the consumer waiting on the copy's event, the
    multiply would run on half-copied memory.
    """
    host = [torch.full((1 << 24,), float(i)).pin_memory() for i in range(6)]
    seen = []
    for batch in CUDAPrefetcher(host, depth=3):
        if busy_consumer:
            torch.cuda._sleep(1_000_000)
        batch.mul_(2)
        seen.append(batch)
    torch.cuda.synchronize()
    for i, batch in enumerate(seen):
        assert bool((batch == 2.0 * i).all()), f"batch {i} was read before its copy finished"


@pytest.mark.gpu
def test_gpu_dataloader_workers_do_not_touch_cuda_and_memory_is_released() -> None:
    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            # a forked worker that initialised CUDA would fail here
            return torch.full((3, 64, 64), i % 256, dtype=torch.uint8), i

    torch.cuda.synchronize()
    baseline_mem = torch.cuda.memory_allocated()
    baseline_threads = set(threading.enumerate())
    loader = fastload.DataLoader(Data(), batch_size=8, num_workers=2, device="cuda")
    for images, labels in loader:
        assert images.is_cuda and labels.is_cuda
        assert torch.equal(images[:, 0, 0, 0].long().cpu(), labels.cpu() % 256)
    for i, _batch in enumerate(loader):
        if i == 2:
            break  # leave in the middle of an epoch, holding a batch
    del loader, images, labels, _batch
    gc.collect()
    # Blocks freed with record_stream uses pending are returned when the allocator next
    # processes its events; empty_cache() synchronises and does that now.
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == baseline_mem
    assert set(threading.enumerate()) - baseline_threads == set()
    pinned_alive = [o for o in gc.get_objects() if torch.is_tensor(o) and o.is_pinned()]
    assert pinned_alive == []


@pytest.mark.gpu
def test_gpu_pinned_and_copied_boxes_stay_bounding_boxes() -> None:
    from torchvision import tv_tensors

    boxes = _boxes()
    pinned = fastload.memory.tensors.pin(boxes)
    assert pinned.is_pinned() and type(pinned) is tv_tensors.BoundingBoxes
    with CUDAPrefetcher([{"boxes": boxes}]) as batches:
        (moved,) = list(batches)
    assert moved["boxes"].is_cuda and type(moved["boxes"]) is tv_tensors.BoundingBoxes
    assert moved["boxes"].canvas_size == (30, 40)


@pytest.mark.gpu
def test_gpu_workers_start_beside_garbage_holding_record_streamed_tensors() -> None:
    """Garbage left from delivered batches (a reference cycle holding a CUDA tensor that was
    record_stream'd) must not be collected in a forked worker: there, freeing it records an
    event where CUDA cannot run, and the worker aborts."""

    class Collecting(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> int:
            gc.collect()
            return i

    side = torch.cuda.Stream()
    context = multiprocessing.get_context("fork")
    loader = fastload.DataLoader(
        Collecting(), batch_size=4, num_workers=2, multiprocessing_context=context
    )
    gc.disable()
    try:
        cycle: list[Any] = [torch.ones(1 << 20, device="cuda")]
        cycle[0].record_stream(side)
        cycle.append(cycle)
        del cycle
        assert torch.cat(list(loader)).tolist() == list(range(16))
    finally:
        gc.enable()
