"""Each sample's random streams when the loader's workers are threads of one process.

torch's CPU generator, Python's ``random`` and numpy's legacy stream are one per process. A
worker process seeds them for the length of a sample (:func:`fastload.sampling.seeded`);
threads cannot, since another thread's sample would draw from the same streams meanwhile. So in
a thread worker a sample's streams are kept apart (:class:`SampleStreams`), and each stretch of
code that may draw (the fused decode plan, the transforms run as written, the target transform,
random batch ops) runs under :func:`drawing`: one lock held, the sample's streams put in place,
the process's own put back after. The sample sees the draws a worker process would give it, in
the same order; what draws nothing (decoding, resampling, a deterministic batch op) runs outside
the lock, in parallel.

fastload's own planned ops draw from torch's stream only, through :func:`generator`: in a
thread worker's sample that is the sample's own ``torch.Generator`` (seeded as a worker process
seeds torch's, so the numbers are the same), which needs no lock and no swap
(:func:`own_draws`). Until something asks for that generator, the draws come from the same
stream reproduced in Python (:func:`words`, :mod:`fastload.sampling.torch_draws`): no torch
call, so no hand-over of the GIL, which many worker threads would wait on. A later stretch under
:func:`drawing` continues from where it stands.

numpy's stream is moved as its raw MT19937 words (a copy of 2.5 KB instead of
``get_state``'s ~30 us); the one Gaussian that numpy's legacy ``normal`` caches between calls is
not part of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from fastload.sampling.torch_draws import TorchWords, advance, words_for

__all__ = [
    "SampleStreams",
    "drawing",
    "drawn",
    "generator",
    "guard",
    "in_worker_thread",
    "own_draws",
    "pool_started",
    "pool_stopped",
    "sample",
    "words",
    "worker_thread",
]

_LOCAL = threading.local()
LOCK = threading.RLock()  # held while any thread has a sample's streams in place
_MT_WORDS = 625  # numpy's mt19937_state: uint32 key[624], then int pos


def _numpy_words() -> np.ndarray:
    """numpy's global MT19937 state as a writable view of its words."""
    address = np.random.mtrand.get_bit_generator().ctypes.state_address
    return np.ctypeslib.as_array((ctypes.c_uint32 * _MT_WORDS).from_address(address))


class SampleStreams:
    """One sample's torch, Python and numpy streams, seeded from ``seed`` on first use.

    Args:
        seed: The sample's seed (as :func:`fastload.sampling.seeded` seeds a worker process).
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._torch: torch.Generator | None = None
        self._words: TorchWords | None = None
        self._reproducible = True  # until words_for says otherwise
        self._saved: tuple[Any, np.ndarray] | None = None  # Python's and numpy's

    @property
    def torch(self) -> torch.Generator:
        """The sample's torch stream (its state, while :meth:`enter` has it in place, is in
        torch's default generator instead), past the words :meth:`words` handed out."""
        if self._torch is None:
            self._torch = torch.Generator().manual_seed(self.seed)
            if self._words is not None:
                advance(self._torch, self._words.used)
        return self._torch

    def words(self) -> TorchWords | None:
        """The sample's torch stream reproduced in Python, while nothing has asked for its
        ``torch.Generator``; ``None`` after that, or where this torch's draws cannot be
        reproduced."""
        if self._torch is not None or not self._reproducible:
            return None
        if self._words is None:
            self._words = words_for(self.seed)
            self._reproducible = self._words is not None
        return self._words

    def enter(self) -> None:
        """Put this sample's streams in place (the lock held)."""
        torch.default_generator.set_state(self.torch.get_state())
        if self._saved is None:
            random.seed(self.seed)
            np.random.seed(self.seed & 0xFFFFFFFF)  # numpy's legacy seeds are 32-bit
            return
        python, words = self._saved
        random.setstate(python)
        _numpy_words()[:] = words

    def leave(self) -> None:
        """Keep where this sample's streams stand (the lock held)."""
        self.torch.set_state(torch.default_generator.get_state())
        self._saved = (random.getstate(), _numpy_words().copy())


def worker_thread() -> None:
    """Mark the calling thread as a loader's worker (a thread pool's initializer)."""
    _LOCAL.worker = True


def in_worker_thread() -> bool:
    """Whether the calling thread is a loader's worker thread."""
    return getattr(_LOCAL, "worker", False)


@contextlib.contextmanager
def sample(seed: int) -> Iterator[None]:
    """In a worker thread: the block is one sample, whose draws come from ``seed``."""
    outer = getattr(_LOCAL, "streams", None)
    _LOCAL.streams = SampleStreams(seed)
    try:
        yield
    finally:
        _LOCAL.streams = outer


@contextlib.contextmanager
def drawing() -> Iterator[None]:
    """Run a block that may draw with the current sample's streams in place (a worker thread
    inside :func:`sample`); elsewhere the block runs as it is."""
    streams: SampleStreams | None = getattr(_LOCAL, "streams", None)
    if streams is None:
        yield
        return
    with LOCK:
        words = _numpy_words()
        process = torch.default_generator.get_state(), random.getstate(), words.copy()
        streams.enter()
        try:
            yield
        finally:
            streams.leave()
            torch.default_generator.set_state(process[0])
            random.setstate(process[1])
            words[:] = process[2]


def drawn(function: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``function``, run under :func:`drawing` when called inside a worker thread's sample."""
    if function is None or getattr(_LOCAL, "streams", None) is None:
        return function

    def run(*args: Any, **kwargs: Any) -> Any:
        with drawing():
            return function(*args, **kwargs)

    return run


def generator() -> torch.Generator | None:
    """The generator fastload's own ops draw from: the sample's own inside :func:`own_draws`,
    ``None`` (torch's default generator) elsewhere."""
    streams: SampleStreams | None = getattr(_LOCAL, "own", None)
    return None if streams is None else streams.torch


def words() -> TorchWords | None:
    """Inside :func:`own_draws`, the sample's torch stream reproduced in Python (draw from it
    instead of :func:`generator` where it can be); ``None`` elsewhere or when it cannot be."""
    streams: SampleStreams | None = getattr(_LOCAL, "own", None)
    return None if streams is None else streams.words()


def own_draws(function: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``function``, whose only draws are fastload's own through :func:`generator`, run with
    the current sample's torch stream when called inside a worker thread's sample: no lock,
    no swap. Elsewhere it runs as it is."""
    if function is None or getattr(_LOCAL, "streams", None) is None:
        return function

    def run(*args: Any, **kwargs: Any) -> Any:
        _LOCAL.own = _LOCAL.streams
        try:
            return function(*args, **kwargs)
        finally:
            _LOCAL.own = None

    return run


def guard() -> contextlib.AbstractContextManager[Any]:
    """The lock while thread workers run (for a block that swaps or seeds shared streams
    itself: a sample seeded in the main thread, the batch ops' own generators, a sampler's
    draws), nothing otherwise."""
    return LOCK if _RUNNING[0] or in_worker_thread() else contextlib.nullcontext()


def pool_started() -> None:
    """A pool of thread workers starts: other threads' draws take the lock from now on."""
    with LOCK:
        _RUNNING[0] += 1


def pool_stopped() -> None:
    """A pool of thread workers has stopped (each :func:`pool_started` gets one)."""
    with LOCK:
        _RUNNING[0] = max(_RUNNING[0] - 1, 0)


_RUNNING = [0]  # pools of thread workers running in this process


def _forked() -> None:
    """A forked child has none of the parent's threads: a lock one of them held stays free."""
    global LOCK
    LOCK, _RUNNING[0] = threading.RLock(), 0


os.register_at_fork(after_in_child=_forked)
