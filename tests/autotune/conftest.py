"""The autotune tests' shared fixtures: a quiet machine, a cache of their own, fake
measurements and a small photo set."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastload import autotune as tune
from fastload.autotune import measuring
from fastload.autotune import tune as steps


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load average of zero unless a test sets one: the choice must not depend on what else
    the test machine runs (tests about load set their own)."""
    monkeypatch.setattr(steps, "load_average", lambda: 0.0)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    return tmp_path / "autotune.json"


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def measure(make_loader, workers: int, seconds: float, **options: object):
        # measured until the mean is known, or its side of the bar is
        assert set(options) == {"precision", "bar"} and options["precision"] == tune.PRECISION
        calls.append(workers)
        loader = make_loader(workers)  # the loader is built as training will build it
        assert loader.num_workers == workers
        return 100.0 * min(max(workers, 0.5), 2), 0.9  # busy workers: computing

    monkeypatch.setattr(measuring, "measure_usage", measure)
    return calls


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fastload.synthetic import make_image_folder

    return make_image_folder(tmp_path_factory.mktemp("kinds"), images=48, classes=3)
