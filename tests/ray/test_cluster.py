"""fastload on a Ray cluster of several nodes started on this machine
(``ray.cluster_utils.Cluster``): the decoding runs on the node that holds the "decode"
resource, not beside the trainer; a node lost mid-epoch costs no sample, and an epoch that
lost every node able to decode it says so and goes on when one joins."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from ray.cluster_utils import Cluster

import fastload
from fastload import transforms as T
from fastload.ray.watch import StarvedEpochWarning
from fastload.synthetic import make_image_folder


class NodeLabel:
    """A target transform whose label is the node that decoded the sample (its id's first
    32 bits)."""

    def __call__(self, target: int) -> int:
        return int(ray.get_runtime_context().get_node_id()[:8], 16)


@pytest.fixture(scope="module")
def two_nodes() -> Any:
    """A head node for the trainer (one CPU, a "trainer" resource) and a CPU node with a
    "decode" resource, stopped after the module."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"trainer": 1},
            "include_dashboard": False,
            # a lost node is known within about a second, not Ray's default 15
            "_system_config": {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 500,
                "health_check_timeout_ms": 500,
                "health_check_failure_threshold": 2,
            },
        },
    )
    decoder = cluster.add_node(num_cpus=2, resources={"decode": 2})
    ray.init(
        address=cluster.address,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield cluster, decoder
    ray.shutdown()
    cluster.shutdown()


def test_the_decoding_runs_on_the_cpu_node(two_nodes: Any, tmp_path: Path) -> None:
    cluster, decoder = two_nodes
    photos = make_image_folder(tmp_path / "set", images=12, classes=2)

    def loader(target_transform: Any = None) -> fastload.DataLoader:
        dataset = fastload.ImageFolder(
            photos, T.Compose([T.RandomResizedCrop(24)]), target_transform=target_transform
        )
        generator = torch.Generator().manual_seed(4)
        return fastload.DataLoader(dataset, batch_size=4, shuffle=True, generator=generator)

    where = loader(NodeLabel())
    epoch = fastload.ray.epoch_dataset(where, ray_remote_args={"resources": {"decode": 1}})
    got = list(fastload.ray.batches(epoch, where))
    nodes = {int(label) for _, labels in got for label in labels}
    assert nodes == {int(decoder.node_id[:8], 16)}
    assert int(cluster.head_node.node_id[:8], 16) not in nodes
    expected = list(loader())
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, expected, strict=True))


class Decodes:
    """A target transform that appends the id of the node decoding each sample to a file."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __call__(self, target: int) -> int:
        with self.log.open("a") as f:
            f.write(ray.get_runtime_context().get_node_id() + "\n")
        return target

    def nodes(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


def big_batches(photos: Path, target_transform: Any = None) -> fastload.DataLoader:
    """Batches of 300 KB, above what Ray hands back inline: their blocks live in the object
    store of the node that decoded them, and are lost with it."""
    dataset = fastload.ImageFolder(
        photos, T.Compose([T.RandomResizedCrop(160)]), target_transform=target_transform
    )
    generator = torch.Generator().manual_seed(4)
    return fastload.DataLoader(dataset, batch_size=4, shuffle=True, generator=generator)


def stopped_after_one_batch(photos: Path, decodes: Decodes, resource: str) -> tuple[Any, list]:
    """An epoch whose first batch was taken, once every batch of it was decoded."""
    loader = big_batches(photos, decodes)
    epoch = fastload.ray.epoch_dataset(loader, ray_remote_args={"resources": {resource: 1}})
    stream = fastload.ray.batches(epoch, loader)
    got = [next(stream)]
    deadline = time.monotonic() + 120
    while len(decodes.nodes()) < 32 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(decodes.nodes()) == 32
    return stream, got


def test_a_node_lost_mid_epoch_costs_no_sample(two_nodes: Any, tmp_path: Path) -> None:
    """Two CPU nodes decode; the one that decoded more is killed while its batches wait in
    its object store: Ray decodes them again on the other, the epoch is the loader's."""
    cluster, _ = two_nodes
    photos = make_image_folder(tmp_path / "set", images=32, classes=2)
    nodes = [cluster.add_node(num_cpus=1, resources={"lost": 1}) for _ in range(2)]
    decodes = Decodes(tmp_path / "decodes")
    stream, got = stopped_after_one_batch(photos, decodes, "lost")
    busier = max(nodes, key=lambda node: decodes.nodes().count(node.node_id))
    cluster.remove_node(busier, allow_graceful=False)
    got += list(stream)
    assert len(decodes.nodes()) > 32  # some batches were decoded again
    expected = list(big_batches(photos))
    assert len(got) == len(expected) == 8
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, expected, strict=True))


def test_an_epoch_that_lost_every_node_able_to_decode_it_says_so(
    two_nodes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only node with the tasks' resource is killed mid-epoch: a warning names what the
    tasks wait for; a node with it joins, and the epoch ends as the loader's."""
    monkeypatch.setattr(fastload.ray.watch, "PERIOD_S", 0.5)
    cluster, _ = two_nodes
    photos = make_image_folder(tmp_path / "set", images=32, classes=2)
    only = cluster.add_node(num_cpus=1, resources={"starved": 1})
    stream, got = stopped_after_one_batch(photos, Decodes(tmp_path / "decodes"), "starved")
    cluster.remove_node(only, allow_graceful=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = threading.Thread(target=lambda: got.extend(stream))  # waits for a node
        reader.start()
        deadline = time.monotonic() + 120
        while not caught and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.add_node(num_cpus=1, resources={"starved": 1})  # Ray adds nodes from here only
        reader.join(timeout=120)
        assert not reader.is_alive()
    starved = [str(w.message) for w in caught if w.category is StarvedEpochWarning]
    assert len(starved) == 1 and "'starved': 1.0" in starved[0]
    expected = list(big_batches(photos))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, expected, strict=True))
