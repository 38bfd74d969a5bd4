"""Reading ahead: downloading the shards a rank will read, in the order it will read them.

:class:`fastload.ShardSampler` knows each epoch's order before the epoch starts. When its
dataset's shards are remote, it starts a :class:`ReadAhead` over its rank's share: the shards
are downloaded into the cache in the order of their first sample, :data:`PARALLEL` at a time
(each with several ranged GETs, see :meth:`fastload.shards.storage.remote.Remote.download`), as far
ahead as the cache's limit allows, so that the workers find them there. Each shard downloaded
is held (not evictable) until the sampler has handed out its last sample and ``lag`` more; a
shard the cache has no room for yet waits until held shards are let go.

A window of shards is read together, and let go together, so the cache needs room for two
windows (the one being read, and the next, fetched meanwhile); with less, the first shards of
each window are read by ranged requests while they download, and a warning says so.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from fastload.shards.storage.cache import ShardCache, release

__all__ = ["PARALLEL", "ReadAhead", "Wanted"]

PARALLEL = 2  # shards downloaded at once by a rank's read-ahead
_POLL = 0.05

_LOG = logging.getLogger("fastload.shards")

Wanted = tuple[str, int, "str | None"]  # a shard's URL, size and SHA-256


class ReadAhead:
    """Downloads and holds a rank's shards ahead of its sampler (see the module's notes).

    Args:
        cache: The cache to fill.
        shards: Every shard of the dataset, as ``(url, size, sha256)``.
        sequence: The shard of each sample the rank will read, in order.
        position: How many of those samples the sampler has handed out so far.
        lag: Samples after a shard's last one before it is let go (the loader reads behind
            the sampler).
        window: The sampler's window (for the warning above).
    """

    def __init__(
        self,
        cache: ShardCache,
        shards: Sequence[Wanted],
        sequence: np.ndarray,
        position: Callable[[], int],
        *,
        lag: int,
        window: int,
    ) -> None:
        self.cache, self.shards, self.position, self.lag = cache, list(shards), position, lag
        needed = 2 * window * max((size for _, size, _ in self.shards), default=0)
        if cache.limit is not None and cache.limit < needed:
            warnings.warn(
                f"cache_limit={cache.limit} holds fewer than two windows of shards (2 x window "
                f"{window} x the largest shard = {needed} bytes): the next window cannot be "
                "downloaded while one is read, and reading will wait on the network",
                stacklevel=4,
            )
        order, first = np.unique(sequence, return_index=True)
        self.order = [int(s) for s in order[np.argsort(first)]]
        ends = len(sequence) - 1 - np.unique(sequence[::-1], return_index=True)[1]
        self.last = dict(zip(order.tolist(), ends.tolist(), strict=True))
        self.total = len(sequence)
        self.fetched = 0
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastload-read-ahead", daemon=True)
        self._thread.start()

    def _passed(self, shard: int) -> bool:
        return self.last[shard] + self.lag < self.position()

    def _handed_out(self) -> bool:
        """Whether the sampler has handed out every sample: what is not fetched by then is
        read by the workers themselves."""
        return self.position() >= self.total

    def _let_go(self) -> None:
        with self._lock:
            for shard in [s for s in self._held if self._passed(s)]:
                release(self._held.pop(shard))

    def _run(self) -> None:
        try:
            self._fetch_all()
            while self._held and not self._stop.wait(_POLL):
                self._let_go()
        except Exception as exc:  # the readers fetch what is missing themselves, and report
            if not sys.is_finalizing():
                _LOG.warning("reading ahead stopped: %s: %s", type(exc).__name__, exc)

    def _fetch_all(self) -> None:
        pending = deque(self.order)
        running: dict[Future[bool], int] = {}
        with ThreadPoolExecutor(PARALLEL, thread_name_prefix="fastload-fetch") as pool:
            while (pending or running) and not self._stop.is_set():
                self._let_go()
                if self._handed_out():
                    pending.clear()
                while pending and len(running) < PARALLEL:
                    shard = pending.popleft()
                    if not self._passed(shard):
                        url, size, sha256 = self.shards[shard]
                        running[pool.submit(self.cache.fetch, url, size, sha256, ahead=True)] = (
                            shard
                        )
                done, _ = wait(running, timeout=_POLL, return_when=FIRST_COMPLETED)
                for future in done:
                    shard = running.pop(future)
                    try:
                        fetched = future.result()
                    except Exception as exc:
                        _LOG.warning("could not read ahead %s: %s", self.shards[shard][0], exc)
                        continue
                    if not fetched:  # no room yet: try again once held shards are let go
                        pending.appendleft(shard)
                        self._stop.wait(_POLL)
                        continue
                    self._hold(shard)

    def _hold(self, shard: int) -> None:
        fd = self.cache.hold(self.shards[shard][0])
        with self._lock:
            self.fetched += 1
            if fd is not None and not self._stop.is_set():
                self._held[shard] = fd
            elif fd is not None:
                release(fd)

    def close(self) -> None:
        """Stop reading ahead and let every held shard go (downloads in progress finish)."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            for fd in self._held.values():
                release(fd)
            self._held.clear()
