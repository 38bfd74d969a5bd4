"""fastload on a two-node Ray cluster started on this machine (``ray.cluster_utils.Cluster``):
the decoding runs on the node that holds the "decode" resource, not beside the trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from ray.cluster_utils import Cluster

import fastload
from fastload import transforms as T
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
        head_node_args={"num_cpus": 1, "resources": {"trainer": 1}, "include_dashboard": False},
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
