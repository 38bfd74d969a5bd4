"""An epoch on Ray that waits because no live node can run its decoding tasks, said as such.

Ray reruns a lost node's tasks wherever their resources are still offered; when the nodes that
offered them are all gone (or never joined: a misspelt custom resource), the tasks wait for
one to join, which is right under an autoscaler and a silent hang otherwise. While an epoch
is read and no batch comes, :class:`Watch` checks the live nodes and warns once when none has
what a decoding task asks for.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["PERIOD_S", "StarvedEpochWarning", "Watch", "needs", "placeable"]

PERIOD_S = 10.0  # how long an epoch goes without a batch before the nodes are checked


class StarvedEpochWarning(UserWarning):
    """No live Ray node offers what the epoch's decoding tasks ask for: it waits for one."""


def needs(remote_args: dict[str, Any] | None) -> dict[str, float]:
    """What one decoding task asks a node for, from ``map_batches``' task options."""
    args = remote_args or {}
    need = {"CPU": float(args.get("num_cpus", 1)), "GPU": float(args.get("num_gpus", 0))}
    need.update({name: float(amount) for name, amount in (args.get("resources") or {}).items()})
    return {name: amount for name, amount in need.items() if amount > 0}


def placeable(need: dict[str, float], nodes: list[dict[str, Any]]) -> bool:
    """Whether a live node (as ``ray.nodes()`` lists them) offers all of ``need``."""
    return any(
        node.get("Alive") and all(node["Resources"].get(k, 0) >= v for k, v in need.items())
        for node in nodes
    )


class Watch:
    """While an epoch is read: a daemon thread that, each ``period`` without a batch, checks
    that a live node can run its decoding tasks, and warns once (from that thread) when none
    can.

    Args:
        need: What a decoding task asks for (:func:`needs`).
        nodes: Lists the cluster's nodes (``ray.nodes``).
        period: Seconds without a batch before the nodes are checked (default
            :data:`PERIOD_S`).
    """

    def __init__(
        self,
        need: dict[str, float],
        nodes: Callable[[], list[dict[str, Any]]],
        *,
        period: float | None = None,
    ) -> None:
        self.need, self._nodes = need, nodes
        self._period = PERIOD_S if period is None else period
        self._progress, self._stop = threading.Event(), threading.Event()
        self.warned = False
        self._thread = threading.Thread(target=self._run, name="fastload-ray-watch", daemon=True)
        self._thread.start()

    def progressed(self) -> None:
        """A batch came."""
        self._progress.set()

    def stop(self) -> None:
        """The epoch ended (or was let go): the thread ends."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            if self._progress.is_set():
                self._progress.clear()
                continue
            try:
                nodes = self._nodes()
            except Exception:  # Ray shutting down, its GCS gone: nothing sure to say
                continue
            if not placeable(self.need, nodes) and not self.warned:
                self.warned = True
                warnings.warn(
                    f"fastload.ray: the epoch is waiting: no live Ray node offers what its "
                    f"decoding tasks ask for ({self.need}); it goes on when one joins (an "
                    f"autoscaler's, or `ray start --address=... --resources=...`)",
                    StarvedEpochWarning,
                    stacklevel=1,
                )
