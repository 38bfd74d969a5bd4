"""A stand-in CUDA device for the tests of the device path on machines without one: streams,
events, copies and pinning recorded in order (the prefetcher's, the batch stage's and the
accelerated pipelines' tests)."""

from __future__ import annotations

from typing import Any

import pytest
import torch


class FakeStream:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def wait_event(self, event: FakeEvent) -> None:
        self.log.append(("wait", self.name, event.id))

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


class FakeEvent:
    count = 0

    def __init__(self, log: list) -> None:
        self.log = log
        FakeEvent.count += 1
        self.id = FakeEvent.count

    def record(self, stream: FakeStream) -> None:
        self.log.append(("record", stream.name, self.id))

    done = True  # what query() answers: a test holds a copy in flight with False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.log.append(("synchronize", self.id))
        self.done = True


class FakeCuda:
    """Stands in for a CUDA device: records stream, event and copy calls in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple] = []
        # storages allocated pinned (torch.empty(pin_memory=True)): address -> bytes
        self.pinned: dict[int, int] = {}
        self.consumer = FakeStream(self.log, "consumer")
        self.current: FakeStream = self.consumer
        fake = self
        real_to = torch.Tensor.to

        class StreamContext:
            def __init__(self, stream: FakeStream) -> None:
                self.stream = stream

            def __enter__(self) -> None:
                self.previous, fake.current = fake.current, self.stream

            def __exit__(self, *exc: object) -> None:
                fake.current = self.previous

        def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            where = args[0] if args else kwargs.get("device")
            if where is None or isinstance(where, (torch.dtype, torch.Tensor)):
                return real_to(tensor, *args, **kwargs)  # a dtype change, no device
            device = torch.device(where)
            if device.type != "cuda":
                return real_to(tensor, *args, **kwargs)
            moved = tensor.clone()
            moved.fake_device = device
            fake.log.append(("copy", fake.current.name, kwargs.get("non_blocking", False)))
            return moved

        def pin_memory(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.is_pinned():  # as torch's: a pinned tensor is returned as it is
                return tensor
            pinned = tensor.clone()
            pinned.fake_pinned = True
            fake.log.append(("pin",))
            return pinned

        real_empty = torch.empty

        def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
            made = real_empty(*args, **kwargs)
            if pin_memory:
                storage = made.untyped_storage()
                fake.pinned[storage.data_ptr()] = storage.nbytes()
                fake.log.append(("pinned alloc",))
            return made

        def is_pinned(tensor: torch.Tensor) -> bool:
            if getattr(tensor, "fake_pinned", False):
                return True
            # by address and size: memory let go of may come back at the same address, for a
            # tensor of another size (a batch's labels where a ring buffer was)
            storage = tensor.untyped_storage()
            return fake.pinned.get(storage.data_ptr()) == storage.nbytes()

        def record_stream(tensor: torch.Tensor, stream: FakeStream) -> None:
            fake.log.append(("record_stream", stream.name, id(tensor)))

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        # torch's pin-memory thread (worker processes, pinned by copying) asks the accelerator
        monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
        monkeypatch.setattr(torch.accelerator, "set_device_index", lambda index: None)
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: FakeStream(fake.log, "side"))
        monkeypatch.setattr(torch.cuda, "Event", lambda: FakeEvent(fake.log))
        monkeypatch.setattr(torch.cuda, "stream", StreamContext)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: fake.current)
        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "is_pinned", is_pinned)
        monkeypatch.setattr(torch, "empty", empty)
        monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
        monkeypatch.setattr(torch.Tensor, "record_stream", record_stream)
