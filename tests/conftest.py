"""Shared test policy: GPU tests skip without CUDA; missing backends fail in CI; one intra-op
thread a process."""

from __future__ import annotations

from pathlib import Path

import isolation  # noqa: F401  (first: the environment every test process runs in)
import numpy as np
import pytest
import torch
from images import jpeg_bytes, photo
from strictness import STRICT_ENV, backends_required

from fastload.backends import check


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is False")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not a "gpu" folder name
            item.add_marker(skip)


@pytest.fixture
def require_backend():
    """Call with a backend name: skips when it is missing locally, fails when it is in CI."""

    def _require(name: str) -> None:
        status = check(name)
        if status.usable:
            return
        message = f"backend {name!r} unusable: {status.reason}; fix: {status.fix}"
        if backends_required():
            pytest.fail(f"{message} ({STRICT_ENV} or CI is set, so this is an error)")
        pytest.skip(message)

    return _require


@pytest.fixture(scope="session")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 photos, each in a class folder of its own: an ImageFolder's label is the index (the
    framework tests in tests/integrations read it)."""
    root = tmp_path_factory.mktemp("indexed")
    for i in range(30):
        (root / f"c{i:02}").mkdir()
        image = photo(48, 40, seed=i)
        (root / f"c{i:02}" / "x.jpg").write_bytes(jpeg_bytes(np.ascontiguousarray(image)))
    return root
