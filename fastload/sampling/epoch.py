"""Where an epoch stands, and a random stream per sample: what makes an epoch resumable.

``fastload.DataLoader`` reads its indices through an :class:`EpochSampler` wrapped around
torch's index sampler (the batch sampler, or the sampler when ``batch_size=None``). It does two
things that torch's loader does not:

* **It keeps the epoch's starting point.** Just before the sampler makes its first draw, the
  random state it draws from (the loader's ``generator``, else torch's global one) is copied.
  Replaying the sampler from that state gives the same order, so an epoch interrupted after
  ``k`` batches resumes at batch ``k + 1`` in a new process: the sampler is replayed, its first
  ``k`` batches are passed over without loading a file, and the random state is left as the
  uninterrupted run would have left it.
* **It gives each sample its own random stream** (``seeding="sample"``, the default for
  fastload datasets). Each index goes out as a :class:`SampleKey`: the int itself, plus a seed
  derived from the epoch's seed and the sample's position in the epoch. The dataset seeds
  torch's CPU generator with it for the length of that one sample (:func:`seeded`), so the
  transforms keep torchvision's draw functions and distributions, but the draws no longer
  depend on which worker loads the sample or what it loaded before (Python's and numpy's
  global streams are seeded from it too). The same seed gives the
  same batches for any ``num_workers``, and a resumed epoch the same pixels. Each batch
  carries a seed of its own too (:func:`batch_seed`, from the batch's number in the epoch):
  the batch ops (``batch_transforms``) draw from it, wherever they run.

The epoch's seed is derived (never drawn: the loader consumes exactly the random numbers
torch's does) from the starting state, the number of epochs this loader has started, and the
sampler's ``rank`` under ``DistributedSampler``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import Any

import torch

from fastload.sampling.seeds import (
    KeyedBatch,
    SampleKey,
    batch_seed,
    epoch_seed,
    sample_seed,
    sample_seeds,
)

__all__ = ["EpochSampler"]


@dataclass
class _Started:
    """The epoch that is running: what replaying it takes.

    Attributes:
        number: How many epochs had started before it.
        state: The random state its sampler started from.
        seed: Its seed (derived from ``state``).
        sampler_epoch: The sampler's ``epoch`` attribute (``DistributedSampler``), if any.
    """

    number: int
    state: torch.Tensor
    seed: int
    sampler_epoch: int | None


class EpochSampler:
    """torch's index sampler, read so that the epoch can be resumed (see the module's notes).

    Args:
        inner: The loader's batch sampler (or sampler, with ``batch_size=None``).
        batched: Whether ``inner`` yields lists of indices.
        generator: The loader's ``generator`` (``None``: torch's global stream).
        sampler: The loader's sampler (its ``epoch`` and ``rank`` are read).
        keyed: Send out :class:`SampleKey` indices (``seeding="sample"`` on a fastload dataset).
    """

    def __init__(
        self,
        inner: Iterable[Any],
        *,
        batched: bool,
        generator: torch.Generator | None,
        sampler: Any,
        keyed: bool,
    ) -> None:
        self.inner, self.batched, self.keyed = inner, batched, keyed
        self.generator, self.sampler = generator, sampler
        self.started = 0  # epochs started
        self.current: _Started | None = None
        self.delivered = 0  # batches of the current epoch handed to the user
        self.dropped: list[int] = []  # batches dropped whole (every file skipped): after how many
        self.finished = True
        self._pass = 0
        self._resume: tuple[_Started, int] | None = None
        # an elastic sampler (fastload.ShardSampler) keeps its own place: resuming passes over
        # nothing, and the batches before this pass's start are counted from `_base`
        self._resume_elastic = False
        self._base = 0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return _EpochIterator(self)

    # ------------------------------------------------------------ what the loader reports

    def begin(self) -> int:
        """A new pass over the loader begins: nothing delivered yet.

        Returns:
            The pass's token: what older passes report is ignored.
        """
        self._pass += 1
        self.delivered, self.dropped, self.finished = 0, [], False
        return self._pass

    def deliver(self, token: int) -> None:
        """One more batch of pass ``token`` was handed to the user."""
        if token == self._pass:
            self.delivered += 1

    def drop(self, returned: int) -> None:
        """A batch was dropped whole (every file skipped) after ``returned`` were delivered."""
        self.dropped.append(returned)

    def finish(self, token: int) -> None:
        """Pass ``token`` ran to its end."""
        if token == self._pass:
            self.finished = True

    @property
    def consumed(self) -> int:
        """The sampler's batches the user is done with: delivered, or dropped before one."""
        return self.delivered + sum(1 for d in self.dropped if d <= self.delivered)

    @property
    def in_epoch(self) -> bool:
        """Whether an epoch has started and not run to its end."""
        if self.current is None or self.finished:
            return False
        return not (isinstance(self.inner, Sized) and self.consumed >= len(self.inner))

    # ------------------------------------------------------------ state

    def source(self) -> torch.Generator:
        """The generator the sampler draws from."""
        return self.generator if self.generator is not None else torch.default_generator

    def state(self) -> dict[str, Any]:
        """Where the epoch stands, as plain data."""
        generator = None if self.generator is None else self.generator.get_state()
        if self._resume is not None:  # loaded, and not started again yet: the same point
            started, batches = self._resume
            position = self._sampler_position(0)
        elif self.in_epoch:
            assert self.current is not None
            started, batches = self.current, self.consumed
            position = self._sampler_position(self.consumed - self._base)
        else:
            return {"epochs_started": self.started, "in_epoch": False, "generator": generator}
        state: dict[str, Any] = {
            "epochs_started": started.number,  # the running epoch starts again on loading
            "in_epoch": True,
            "generator": generator,
            "epoch": started.number,
            "batches": batches,
            "sampler_state": started.state,
            "sampler_epoch": started.sampler_epoch,
        }
        if position is not None:
            state["sampler_position"] = position
        return state

    @property
    def elastic(self) -> bool:
        """Whether the sampler keeps its own place (``fastload.ShardSampler``): it is saved
        and loaded through its ``state_dict``, so that another world size can resume it."""
        if not getattr(self.sampler, "elastic", False):
            return False
        return not self.batched or (
            getattr(self.inner, "sampler", None) is self.sampler
            and isinstance(getattr(self.inner, "batch_size", None), int)
        )

    def _sampler_position(self, batches: int) -> dict[str, Any] | None:
        """An elastic sampler's state after ``batches`` more batches of this pass."""
        if not self.elastic:
            return None
        samples = batches * self.inner.batch_size if self.batched else batches  # type: ignore[attr-defined]
        return self.sampler.state_dict(consumed=samples)

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`: the next pass resumes the epoch it describes, if any."""
        self.started = int(state["epochs_started"])
        self.current, self._resume, self._resume_elastic = None, None, False
        if state["generator"] is not None and self.generator is not None:
            self.generator.set_state(state["generator"])
        if not state["in_epoch"]:
            return
        epoch = state["sampler_epoch"]
        if epoch is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        number = int(state["epoch"])
        started = _Started(
            number,
            state["sampler_state"],
            self._seed(state["sampler_state"], number),
            epoch,
        )
        self._resume = (started, int(state["batches"]))
        self.started = number  # the resumed epoch counts when it starts again
        if state.get("sampler_position") is not None and self.elastic:
            self.sampler.load_state_dict(state["sampler_position"])
            self._resume_elastic = True

    @property
    def resuming(self) -> bool:
        """Whether the next pass resumes an epoch."""
        return self._resume is not None

    # ------------------------------------------------------------ the epoch's start

    def _seed(self, state: torch.Tensor, number: int) -> int:
        return epoch_seed(state, epoch=number, rank=int(getattr(self.sampler, "rank", 0) or 0))

    def start(self) -> tuple[Iterator[Any], _Started, int, int]:
        """Begin the sampler's pass (its first draws happen here).

        Returns:
            The sampler's iterator, the epoch, how many batches to pass over (a resumed epoch's
            delivered ones) and the position of the first sample that will go out.
        """
        source = self.source()
        resume, self._resume = self._resume, None
        elastic, self._resume_elastic = self._resume_elastic, False
        self._base = 0
        if resume is None:
            state = source.get_state()
            started = _Started(
                self.started,
                state,
                self._seed(state, self.started),
                getattr(self.sampler, "epoch", None),
            )
            self.started += 1
            self.current = started
            return iter(self.inner), started, 0, 0
        started, skip = resume
        self.started = started.number + 1
        self.current = started
        if elastic:  # the sampler gives only the rest: nothing to pass over
            self.delivered, self.dropped, self._base = skip, [], skip
            size = self.inner.batch_size if self.batched else 1  # type: ignore[attr-defined]
            return iter(self.inner), started, skip, skip * size
        saved = source.get_state()
        source.set_state(started.state)
        batches = iter(self.inner)
        position = 0
        for _ in range(skip):  # the sampler's draws, replayed; no file is read
            item = next(batches, None)
            if item is None:
                break
            position += len(item) if self.batched else 1
        if self.generator is None:
            # torch's global stream belongs to the caller (a resumed Trainer restored it): put
            # it back. The loader's own generator stays where the replay left it, where the
            # uninterrupted run's is at this point.
            source.set_state(saved)
        # what the user already has counts as delivered
        self.delivered, self.dropped = skip, []
        return batches, started, skip, position


class _EpochIterator:
    """One pass of an :class:`EpochSampler`; starts the epoch at its first ``next``."""

    def __init__(self, owner: EpochSampler) -> None:
        self._owner = owner
        self._batches: Iterator[Any] | None = None
        self._seed = 0
        self._position = 0
        self._number = 0  # the next batch's number in the epoch

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self) -> Any:
        owner = self._owner
        if self._batches is None:
            # torch builds (and, with workers, rebuilds) its index iterator before it needs
            # one: the epoch starts when the first index is asked for
            self._batches, started, self._number, self._position = owner.start()
            self._seed = started.seed
        item = next(self._batches)
        if not owner.keyed:
            return item
        if not owner.batched:
            key = SampleKey(item, sample_seed(self._seed, self._position))
            self._position += 1
            return key
        first = self._position
        self._position += len(item)
        number = self._number
        self._number += 1
        seeds = sample_seeds(self._seed, first, len(item))
        return KeyedBatch(map(SampleKey, item, seeds), batch_seed(self._seed, number))
