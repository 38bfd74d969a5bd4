"""autotune() itself (autotune/tune.py): the cache, the options, num_workers="auto" in a
loader."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from curves import Tensors

import fastload
from fastload import autotune as tune
from fastload import options
from fastload.autotune import measuring
from fastload.autotune import tune as steps


def test_second_call_comes_from_the_cache(cache: Path, fake_measure: list[int]) -> None:
    first = tune.autotune(Tensors(), batch_size=16, max_workers=4)
    assert not first.cached and first.num_workers == 2 and fake_measure
    n = len(fake_measure)
    again = tune.autotune(Tensors(), batch_size=16, max_workers=4)
    assert again.cached and again.num_workers == 2 and len(fake_measure) == n
    assert [m.num_workers for m in again.table] == [m.num_workers for m in first.table]
    other = tune.autotune(Tensors(), batch_size=32 // 2, max_workers=4, step_time=1.0)
    assert not other.cached  # a different question is not answered from the cache


def test_corrupt_or_foreign_cache_is_measured_again(cache: Path, fake_measure: list[int]) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert tune.autotune(Tensors(), batch_size=16, max_workers=4).num_workers == 2
    assert json.loads(cache.read_text())["version"] == tune.CACHE_VERSION  # rewritten
    cache.write_text(json.dumps({"version": 999, "entries": {}}))
    with pytest.warns(UserWarning, match="another version"):
        assert not tune.autotune(Tensors(), batch_size=16, max_workers=4).cached


def test_small_dataset_is_measured_with_a_warning(cache: Path, fake_measure: list[int]) -> None:
    with pytest.warns(UserWarning, match="fewer than 4 batches"):
        tune.autotune(Tensors(), batch_size=32, max_workers=2, cache=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size=0 must be an int >= 1"),
        ({"budget": 0}, "budget=0 must be a positive number"),
        ({"step_time": -1.0}, "step_time=-1.0 must be a positive number"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tune.autotune(Tensors(), **kwargs)


@pytest.mark.parametrize("option", [*options.NAMES, *options.DEPRECATED])
def test_every_fastload_option_asks_for_fastloads_loader(option: str) -> None:
    # read from the one list of fastload's options: accelerate and seeding were once missing
    with pytest.raises(ValueError, match=f"which cannot take {option}: pass loader=fastload"):
        tune.autotune(Tensors(), batch_size=4, loader_kwargs={option: True}, cache=False)


def test_empty_dataset() -> None:
    with pytest.raises(ValueError, match="the dataset is empty"):
        tune.autotune([], batch_size=4)


def test_real_measurement_end_to_end(cache: Path, monkeypatch) -> None:
    """Two candidates measured for real, with real loaders and their workers. Only the search's
    budget clock stands still: on a loaded machine the first candidate alone can outlast a short
    budget, which then rightly ends the search (the budget has its own fake-clock tests)."""
    still = functools.partial(steps.search, clock=lambda: 0.0)
    monkeypatch.setattr(steps, "search", still)
    result = tune.autotune(Tensors(), batch_size=16, max_workers=1, budget=2.0)
    assert {m.num_workers for m in result.table} == {0, 1}
    # the figure reported is the chosen count's own (the mean of its readings)
    chosen = [m.images_per_sec for m in result.table if m.num_workers == result.num_workers]
    assert min(chosen) <= result.images_per_sec <= max(chosen)


def test_dataloader_num_workers_auto(cache: Path, fake_measure: list[int], caplog) -> None:
    caplog.set_level("INFO", logger="fastload")
    loader = fastload.DataLoader(Tensors(), batch_size=16, shuffle=True, num_workers="auto")
    assert loader.num_workers == 2 and isinstance(loader, torch.utils.data.DataLoader)
    assert "num_workers='auto': 2 workers (measured" in caplog.text
    assert len(list(loader)) == 4
    positional = fastload.DataLoader(Tensors(), 16, True, None, None, "auto")
    assert positional.num_workers == 2 and "(cached" in caplog.text


def test_dataloader_auto_needs_a_batch_size(cache: Path, fake_measure: list[int]) -> None:
    with pytest.raises(ValueError, match="needs a batch_size"):
        fastload.DataLoader(Tensors(), batch_size=None, num_workers="auto")


@pytest.mark.parametrize("worker_type", ["process", "auto"])
def test_dataloader_auto_on_an_empty_dataset_runs_as_torchs(
    cache: Path, fake_measure: list[int], worker_type: str
) -> None:
    empty = torch.utils.data.TensorDataset(torch.zeros(0, 3, 4, 4), torch.zeros(0))
    loader = fastload.DataLoader(empty, batch_size=4, num_workers="auto", worker_type=worker_type)
    assert loader.num_workers == 0 and fake_measure == [] and not cache.exists()
    assert list(loader) == list(torch.utils.data.DataLoader(empty, batch_size=4)) == []
    with pytest.raises(ValueError, match="num_samples=0") as theirs:
        torch.utils.data.DataLoader(empty, batch_size=4, shuffle=True)
    with pytest.raises(ValueError, match=str(theirs.value)):
        fastload.DataLoader(empty, batch_size=4, shuffle=True, num_workers="auto")


def test_prefetch_factor_is_kept_for_workers_and_dropped_without(cache: Path, monkeypatch) -> None:
    seen = {}

    def measure(make_loader, workers: int, seconds: float, **options: object):
        seen[workers] = make_loader(workers).prefetch_factor
        return 100.0 * min(max(workers, 0.5), 2), None

    monkeypatch.setattr(measuring, "measure_usage", measure)
    tune.autotune(Tensors(), batch_size=16, max_workers=2, loader_kwargs={"prefetch_factor": 4})
    assert seen[0] is None and seen[1] == 4 and seen[2] == 4


def test_a_measurement_settles_once_its_mean_is_known_well_enough() -> None:
    steady = [1000.0, 1010.0, 990.0, 1005.0, 995.0]
    assert measuring.settled(steady, 0.015)
    assert not measuring.settled(steady[:3], 0.015)  # at least four windows
    noisy = [600.0, 1400.0, 700.0, 1300.0, 1000.0]
    assert not measuring.settled(noisy, 0.015)
    assert measuring.settled(noisy * 200, 0.015)  # enough rounds pin down even a noisy mean
    assert not measuring.settled([0.0] * 5, 0.015)


def test_a_measurement_stops_once_its_side_of_the_bar_is_clear() -> None:
    noisy = [900.0, 1100.0, 950.0, 1050.0, 1000.0]  # mean 1000, standard error 35
    assert not measuring.settled(noisy, 0.02)
    assert measuring.settled(noisy, 0.02, bar=1100.0)  # clearly below: not a gain, stop
    assert not measuring.settled(noisy, 0.02, bar=1050.0)  # within two errors: keep measuring
    assert measuring.settled(noisy, 0.02, bar=900.0)  # clearly above, and known to 5 %
    wild = [500.0, 1500.0, 600.0, 1400.0, 1000.0]  # clearly above 100, but known to 20 % only
    assert not measuring.settled(wild, 0.02, bar=100.0)
    assert not measuring.settled(noisy[:3], 0.02, bar=5000.0)  # still at least four windows
