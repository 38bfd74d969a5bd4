"""Ray started on this machine for a test module, and stopped after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray


@pytest.fixture(scope="module")
def local_ray() -> Any:
    """Ray on this machine's two cores, for this module, stopped after it; two "trainer"
    slots stand for training workers that leave the CPUs to the decoding."""
    ray.init(
        num_cpus=2,
        resources={"trainer": 2},
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=256 * 2**20,
        configure_logging=False,
        # Ray's workers import the test modules for the trainers' loops (pickled by reference)
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
