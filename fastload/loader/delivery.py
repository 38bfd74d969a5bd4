"""Counting what a pass hands to the user, for ``state_dict``; shared by both delivery paths.

Each pass over the loader gets a token from its :class:`~fastload.sampling.EpochSampler`; a
batch counts as delivered when it leaves the iterator the user holds, never when a worker or
the prefetcher made it, so a state saved between two steps names the next batch to train on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from fastload.memory.tensors import Pinnable
from fastload.sampling import EpochSampler

__all__ = ["Counting", "Delivered", "EpochKeys", "counted", "keyed_epoch"]


@dataclass(frozen=True)
class _Counter:
    """Tells an :class:`EpochSampler` what pass ``token`` hands out."""

    epochs: EpochSampler
    token: int

    def __call__(self, batch: Any) -> Any:
        self.epochs.deliver(self.token)
        return batch

    def end(self) -> None:
        self.epochs.finish(self.token)


class Counting:
    """Mixed into torch's iterators: each batch handed out is counted (``state_dict``)."""

    counter: _Counter | None = None

    def __next__(self) -> Any:
        try:
            batch = super().__next__()  # type: ignore[misc]
        except StopIteration:
            if self.counter is not None:
                self.counter.end()
            raise
        if isinstance(batch, Pinnable):  # pinned keeping its tensor subclasses
            batch = batch.batch
        return batch if self.counter is None else self.counter(batch)


class Delivered:
    """The user's side of a pass that is not torch's iterator: counts what it hands out."""

    def __init__(self, batches: Iterator[Any], epochs: EpochSampler, token: int) -> None:
        self._batches, self._counter = batches, _Counter(epochs, token)

    def __iter__(self) -> Delivered:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._batches)
        except StopIteration:
            self._counter.end()
            raise
        return self._counter(batch)

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # the wrapped iterator's own (close, ...)
        if name.startswith("_"):  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._batches, name)


def counted(
    epochs: EpochSampler | None,
    start: Callable[[], Iterator[Any]],
    *,
    own_generator: bool,
) -> Iterator[Any]:
    """Start a pass with ``start()`` and count what it hands out.

    Args:
        epochs: Where the epoch stands (``None``: an iterable dataset, nothing to count).
        start: Starts the pass and returns its iterator.
        own_generator: The loader has its own ``generator``.

    Returns:
        torch's own iterator, when ``start`` gave one (it counts itself), else a
        :class:`Delivered` around what ``start`` gave.
    """
    if epochs is None:
        return start()
    token = epochs.begin()
    if epochs.resuming and not own_generator:
        # A resumed epoch replays its sampler from the recorded state; what starting the pass
        # draws from torch's global stream (torch's worker seed) is not drawn by the run it
        # continues, so that stream is put back as it was.
        with torch.random.fork_rng(devices=[]):
            batches = start()
    else:
        batches = start()
    if isinstance(batches, Counting):  # torch's own iterator, handed out as it is
        batches.counter = _Counter(epochs, token)
        return batches
    return Delivered(batches, epochs, token)


class EpochKeys(list[Any]):
    """An epoch's batches of keys drawn for loading elsewhere (:mod:`fastload.ray`), and the
    count of those handed to the user, which whoever delivers them reports.

    Args:
        keys: The batches of keys, in order.
        counter: Tells the loader's epoch what this pass hands out.
    """

    def __init__(self, keys: list[Any], counter: _Counter) -> None:
        super().__init__(keys)
        self._counter = counter

    def delivered(self) -> None:
        """One more batch was handed to the user (``state_dict`` counts it)."""
        self._counter(None)

    def dropped(self, returned: int) -> None:
        """A batch was dropped whole (``on_error="skip"``, none of its files readable) after
        ``returned`` batches were handed out."""
        self._counter.epochs.drop(returned)

    def finished(self) -> None:
        """The pass ran to its end."""
        self._counter.end()


def keyed_epoch(epochs: EpochSampler, generator: torch.Generator | None) -> EpochKeys:
    """The next epoch's batches of keys, drawn as a pass over the loader draws them (or the
    rest of a resumed epoch), counted as a pass is.

    torch's iterator draws its workers' base seed from the loader's ``generator`` before the
    sampler's first draw: so does this. A resumed epoch puts torch's global stream back as
    :func:`counted` does.
    """
    token = epochs.begin()

    def draw() -> list[Any]:
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        return list(epochs)

    if epochs.resuming and generator is None:
        with torch.random.fork_rng(devices=[]):
            keys = draw()
    else:
        keys = draw()
    return EpochKeys(keys, _Counter(epochs, token))
