"""A sample's draws from the global random streams: torch's CPU generator, Python's ``random``
and numpy's, seeded from the sample's seed for the length of that one sample and put back.

The transforms keep torchvision's draw functions and distributions; seeding the streams they
draw from per sample makes the draws independent of which worker loads the sample. In thread
workers the streams are shared, so each draw swaps them in (:mod:`fastload.sampling.drawing`).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import get_worker_info

from fastload.sampling import drawing

__all__ = ["seed_both", "seeded", "streams_kept"]


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Run the block with torch's CPU generator, Python's ``random`` and numpy's global stream
    seeded from ``seed``, then put them back.

    Python's and numpy's streams too, because ops draw from them (timm's
    ``RandomResizedCropAndInterpolation``, ops of one's own run as written). numpy's stream is
    put back in the main process only: in a worker process it is torch's to seed per worker
    and nobody else's. CUDA's stream is untouched. ``None`` runs the block as it is (on the
    process's own streams, inside :func:`streams_kept` too). Inside :func:`streams_kept` the
    streams are saved before the first seeded sample and put back once, when the block ends:
    saving and restoring them cost ~10 us a sample (Python's stream nearly all of it).
    """
    if seed is None:
        _put_back()  # a sample of the block with no seed of its own draws as it would alone
        yield
        return
    if drawing.in_worker_thread():  # the streams are shared: each draw swaps them in
        with drawing.sample(seed):
            yield
        return
    with drawing.guard():  # no thread worker's sample swaps them in meanwhile
        batch: _KeptStreams | None = getattr(_KEEPING, "batch", None)
        if batch is not None:
            batch.save_once()
            _seed_all(seed)
            yield
            return
        saved = _saved_streams()
        _seed_all(seed)
        try:
            yield
        finally:
            _restore(saved)


@contextlib.contextmanager
def streams_kept() -> Iterator[None]:
    """Put the streams :func:`seeded` sets back once, at the end of the block (a batch of
    samples), instead of after each sample in it. Each sample seeds every stream anew, so none
    draws from what the one before it left."""
    if drawing.in_worker_thread() or getattr(_KEEPING, "batch", None) is not None:
        yield  # a worker thread's samples swap their streams in at each draw
        return
    batch = _KEEPING.batch = _KeptStreams()
    try:
        yield
    finally:
        _KEEPING.batch = None
        batch.put_back()


class _KeptStreams:
    """The streams saved before the first seeded sample of a :func:`streams_kept` block."""

    def __init__(self) -> None:
        self.saved: tuple[Any, Any, Any] | None = None

    def save_once(self) -> None:
        if self.saved is None:
            self.saved = _saved_streams()

    def put_back(self) -> None:
        if self.saved is not None:
            with drawing.guard():
                _restore(self.saved)
            self.saved = None


_KEEPING = threading.local()


def _put_back() -> None:
    batch = getattr(_KEEPING, "batch", None)
    if batch is not None:
        batch.put_back()


def _saved_streams() -> tuple[Any, Any, Any]:
    """torch's CPU generator's and Python's states, and numpy's where it is ours to put back
    (the main process), for :func:`_restore`."""
    numpy = _numpy_random()
    ours = numpy is not None and get_worker_info() is None
    kept = numpy.get_state() if ours else None
    return torch.default_generator.get_state(), random.getstate(), kept


def _restore(saved: tuple[Any, Any, Any]) -> None:
    torch.default_generator.set_state(saved[0])
    random.setstate(saved[1])
    if saved[2] is not None:
        numpy = _numpy_random()
        if numpy is not None:
            numpy.set_state(saved[2])


def _seed_all(seed: int) -> None:
    seed_both(seed)
    numpy = _numpy_random()
    if numpy is not None:
        numpy.seed(seed & 0xFFFFFFFF)  # numpy's legacy seeds are 32-bit


def _numpy_random() -> Any:
    """``numpy.random`` when numpy is imported (an op that draws from it imported it), else
    ``None``."""
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "random", None) if numpy is not None else None


def seed_both(seed: int) -> None:
    """Seed torch's CPU generator and Python's ``random`` with ``seed`` (see :func:`seeded`)."""
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
