"""What a decoding task asks a node for, and the watch that says when no live node offers it
(Ray's node listing faked: the cluster tests lose real nodes)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

from fastload.ray.watch import StarvedEpochWarning, Watch, needs, placeable


def node(alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"Alive": alive, "Resources": resources}


def test_needs_reads_the_task_options_as_map_batches_takes_them() -> None:
    assert needs(None) == {"CPU": 1.0}
    assert needs({"num_cpus": 2, "resources": {"decode": 1}}) == {"CPU": 2.0, "decode": 1.0}
    assert needs({"num_cpus": 0, "num_gpus": 1}) == {"GPU": 1.0}


def test_placeable_needs_one_live_node_with_all_of_it() -> None:
    need = {"CPU": 1.0, "decode": 1.0}
    assert placeable(need, [node(CPU=4), node(CPU=2, decode=2)])
    assert not placeable(need, [node(CPU=4), node(decode=2)])  # split over two nodes
    assert not placeable(need, [node(False, CPU=2, decode=2)])  # the one that had it is lost
    assert not placeable(need, [])


class Listing:
    """Ray's node listing, faked: counts its calls and signals each."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes, self.calls = nodes, 0
        self.called = threading.Event()

    def __call__(self) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls >= 3:
            self.called.set()
        return self.nodes


def watched(nodes: list[dict[str, Any]]) -> list[warnings.WarningMessage]:
    """What a watch warns while no batch comes and the nodes are listed three times."""
    listing = Listing(nodes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch = Watch({"CPU": 1.0, "decode": 1.0}, listing, period=0.01)
        assert listing.called.wait(timeout=60)
        watch.stop()
    return caught


def test_the_watch_warns_once_when_no_live_node_can_decode() -> None:
    caught = watched([node(CPU=2), node(False, CPU=2, decode=1)])
    assert len(caught) == 1 and caught[0].category is StarvedEpochWarning
    assert "{'CPU': 1.0, 'decode': 1.0}" in str(caught[0].message)


def test_the_watch_is_quiet_while_a_node_can_decode() -> None:
    assert watched([node(CPU=2, decode=1)]) == []


def test_stopping_ends_the_thread() -> None:
    Watch({"CPU": 1.0}, Listing([node(CPU=1)]), period=0.01).stop()
    assert not [t for t in threading.enumerate() if t.name == "fastload-ray-watch"]


def test_a_cluster_that_cannot_be_asked_is_not_warned_about() -> None:
    """Ray's node listing failing (its GCS gone) neither warns nor ends the watch: it asks
    again the next period."""
    calls: list[int] = []
    again = threading.Event()

    def gone() -> list[dict[str, Any]]:
        calls.append(1)
        if len(calls) == 2:
            again.set()
        raise ConnectionError("the GCS is gone")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch = Watch({"CPU": 1.0}, gone, period=0.01)
        assert again.wait(timeout=60)
        watch.stop()
    assert caught == [] and not watch.warned
