"""``on_error="skip"`` in loaders: markers for skipped samples, dropped before collating and
reported in the main process, once per epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastload import errors
from fastload.memory.stacked import Normalizing, StackedSamples, normalizes_stacked, takes_stacked
from fastload.memory.tensors import pin_batch
from fastload.sampling import SeededSamples

__all__ = ["Collated", "SkipCollate", "SkipReport", "Skipped"]


@dataclass(frozen=True)
class Skipped:
    """Returned in place of a sample that could not be read, with ``on_error="skip"``.

    ``fastload.DataLoader`` drops these from batches and records them in the dataset's
    ``bad_files``.
    """

    path: str
    reason: str


class Collated:
    """A batch (``None`` when every sample was skipped) and the markers of the samples
    dropped from it; :class:`SkipReport` unwraps it where batches are delivered."""

    __slots__ = ("batch", "skipped")

    def __init__(self, batch: Any, skipped: list[Skipped]) -> None:
        self.batch, self.skipped = batch, skipped

    def pin_memory(self) -> Collated:  # called by torch's pin-memory thread
        return Collated(pin_batch(self.batch), self.skipped)


class SkipCollate:
    """Wraps a collate function: drops :class:`Skipped` samples before collating."""

    def __init__(self, collate_fn: Callable[[Any], Any], *, batched: bool) -> None:
        self.collate_fn, self.batched = collate_fn, batched

    @property
    def takes_stacked(self) -> bool:
        return takes_stacked(self.collate_fn)

    @property
    def normalizes_stacked(self) -> Normalizing | None:
        return normalizes_stacked(self.collate_fn)

    def __call__(self, samples: Any) -> Collated:
        if isinstance(samples, StackedSamples):  # made only of samples that were read
            return Collated(self.collate_fn(samples), [])
        if not self.batched:
            if isinstance(samples, Skipped):
                return Collated(None, [samples])
            return Collated(self.collate_fn(samples), [])
        good: list[Any] = [s for s in samples if not isinstance(s, Skipped)]
        if isinstance(samples, SeededSamples):  # the batch's seed goes on to the batch ops
            good = SeededSamples(good, samples.seed)
        skipped = [s for s in samples if isinstance(s, Skipped)]
        return Collated(self.collate_fn(good) if good else None, skipped)


class SkipReport:
    """Iterates batches, dropping what was skipped, recording it, and warning once per epoch.

    Args:
        batches: The collated batches (:class:`Collated` or plain).
        dataset: Whose ``bad_files`` records the skipped files.
        on_drop: Told, when a batch is dropped whole (none of its files readable), how many
            batches were returned before it.
    """

    def __init__(
        self,
        batches: Iterator[Any],
        dataset: Any,
        *,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        self._batches, self._dataset, self._count = batches, dataset, 0
        self._on_drop, self._returned = on_drop, 0

    def __iter__(self) -> SkipReport:
        return self

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]

    def __next__(self) -> Any:
        while True:
            try:
                item = next(self._batches)
            except StopIteration:
                errors.warn_skipped(self._count)
                self._count = 0
                raise
            if not isinstance(item, Collated):
                self._returned += 1
                return item
            for s in item.skipped:
                self._dataset.bad_files[s.path] = s.reason
            self._count += len(item.skipped)
            if item.batch is not None:
                self._returned += 1
                return item.batch
            if self._on_drop is not None:
                self._on_drop(self._returned)
