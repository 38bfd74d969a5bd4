"""Move batches to a CUDA device ahead of use, on a side stream.

Who owns what, at each moment:

* A host batch belongs to the prefetcher from the moment it is drawn from the source until its
  copy to the device has finished on the GPU (an event recorded after the copy, queried, never
  waited on while batches flow): memory that is pinned in place (a worker's kept slot
  registered with CUDA, :mod:`fastload.gpu.registered`) is read by the copy after
  ``non_blocking`` returns, and must not be written again before. Unpinned tensors are pinned
  first (one host copy) so that the transfer can run asynchronously; batches from
  ``fastload.DataLoader(device="cuda")`` arrive pinned already.
* A device batch is allocated on the prefetcher's side stream. When it is handed out, the
  consumer's current stream is made to wait for the copy (``wait_event``), and every tensor is
  marked with ``record_stream(consumer)``, so the caching allocator does not reuse its memory
  until the work the consumer queued on it has finished. After that the batch is the
  consumer's alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from fastload.checks import check_int
from fastload.devices import DeviceLike, resolve_device
from fastload.memory.tensors import map_tensors, pin

# map_tensors and resolve_device lived here first; they stay importable from here.
__all__ = ["CUDAPrefetcher", "DeviceLike", "map_tensors", "resolve_device"]


class CUDAPrefetcher:
    """Iterate over batches that are already on a CUDA device, copied ahead on a side stream.

    Wraps any iterable of batches (a ``DataLoader``, a generator, a list). While the consumer
    works on one batch, the next ``depth`` batches are already being copied, host to device,
    on a separate CUDA stream with ``non_blocking=True`` from pinned memory. Nested batches keep
    their structure (see :func:`map_tensors`); non-tensor leaves pass through.

    Each ``iter()`` starts a new pass over the wrapped iterable, so a prefetcher around a
    ``DataLoader`` can be iterated once per epoch. The source must not change a batch in place
    after yielding it: the copy of it may still be in flight.

    Example:
        >>> with CUDAPrefetcher(loader, device="cuda") as batches:  # doctest: +SKIP
        ...     for images, labels in batches:
        ...         loss = step(images, labels)

    Args:
        iterable: Where the host batches come from.
        device: The CUDA device to deliver to.
        depth: How many batches to have copied or in flight ahead of the one handed out.
        pin_memory: Pin tensors that are not pinned yet before copying them; without pinning,
            a ``non_blocking`` copy from pageable memory runs synchronously.
        transform: Called on each batch on the device, on the side stream right after its copy
            (``fastload.DataLoader`` puts its batch stage here), so it overlaps the consumer's work.

    Raises:
        ValueError: ``depth`` is not a positive int, or ``device`` is not a CUDA device.
        RuntimeError: CUDA is not available.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        *,
        device: DeviceLike = "cuda",
        depth: int = 2,
        pin_memory: bool = True,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        check_int("depth", depth, minimum=1)
        target = resolve_device(device)
        if target is None or target.type != "cuda":
            raise ValueError(f"device={device!r} must be a CUDA device, e.g. 'cuda' or 'cuda:0'")
        self.device = target
        self.depth = depth
        self.pin_memory = pin_memory
        self.transform = transform
        self._iterable = iterable
        self._stream = torch.cuda.Stream(device=target)
        self._source: Iterator[Any] | None = None
        # Each entry: (device batch, the tensors in it, event recorded after its copy).
        self._queue: deque[tuple[Any, list[torch.Tensor], torch.cuda.Event]] = deque()
        # The host batches whose copies may still be reading them, each with the event recorded
        # right after its copy, oldest first (events on one stream complete in that order).
        self._landing: deque[tuple[torch.cuda.Event, Any]] = deque()
        self._error: Exception | None = None
        self._started = False

    def __iter__(self) -> CUDAPrefetcher:
        self.close()
        self._source = iter(self._iterable)
        self._started = True
        return self

    def __next__(self) -> Any:
        if not self._started:  # next() before any iter(): start the first pass
            iter(self)
        if not self._queue:
            self._fill(1)
        if not self._queue:
            if self._error is not None:
                # Raised in the source's order: after every batch it produced before failing.
                error, self._error = self._error, None
                raise error
            self.close()
            raise StopIteration
        batch, tensors, copied = self._queue.popleft()
        # Issue the next copies before handing this batch out, so they overlap its use.
        self._fill(self.depth)
        self._let_go()
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(copied)
        for tensor in tensors:
            tensor.record_stream(consumer)
        return batch

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __enter__(self) -> CUDAPrefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the batches in flight and let go of the source iterator.

        A torch ``DataLoader`` iterator shuts its workers down once dropped; a generator source
        is closed. Safe to call more than once.
        """
        self._queue.clear()
        for landed, _ in self._landing:  # their memory may go back to a worker once let go
            landed.synchronize()
        self._landing.clear()
        self._error = None
        source, self._source = self._source, None
        close = getattr(source, "close", None)
        if callable(close):
            close()

    def _fill(self, target: int) -> None:
        """Draw batches from the source and issue their copies until ``target`` are queued."""
        while self._source is not None and self._error is None and len(self._queue) < target:
            try:
                host = next(self._source)
            except StopIteration:
                self._source = None
                return
            except Exception as exc:  # delivered once the batches before it are consumed
                self._error = exc
                return
            self._queue.append(self._copy(host))

    def _copy(self, host: Any) -> tuple[Any, list[torch.Tensor], torch.cuda.Event]:
        def to_device(tensor: torch.Tensor) -> torch.Tensor:
            if self.pin_memory and tensor.device.type == "cpu" and not tensor.is_pinned():
                tensor = pin(tensor)
            return tensor.to(self.device, non_blocking=True)

        with torch.cuda.stream(self._stream):
            batch = map_tensors(to_device, host)
            landed = torch.cuda.Event()
            landed.record(self._stream)
            if self.transform is not None:
                batch = self.transform(batch)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        self._landing.append((landed, host))
        tensors: list[torch.Tensor] = []
        map_tensors(tensors.append, batch)  # what the consumer will own
        return batch, tensors, copied

    def _let_go(self) -> None:
        """Drop the host batches whose copies have finished on the GPU."""
        while self._landing and self._landing[0][0].query():
            self._landing.popleft()
