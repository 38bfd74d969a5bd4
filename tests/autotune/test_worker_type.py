"""worker_type='auto': threads kept only when faster beyond the noise, and cached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from curves import Tensors

import fastload
from fastload import autotune as tune
from fastload.autotune import measuring


def test_threads_are_kept_only_when_faster_beyond_the_noise() -> None:
    order: list[str] = []

    def measuring_at(rates: dict[str, list[float]]):
        readings = {kind: iter(values) for kind, values in rates.items()}

        def measure(kind: str) -> float:
            order.append(kind)
            return next(readings[kind])

        return measure

    kind, readings, note = tune.compare_worker_types(
        measuring_at({"process": [100.0, 102.0], "thread": [130.0, 128.0]})
    )
    assert kind == "thread" and readings["thread"] == [130.0, 128.0]
    assert "threads ran 1.28x processes" in note
    # each kind measured twice, the one measured first alternating
    assert order == ["process", "thread", "thread", "process"]
    tie, _, note = tune.compare_worker_types(
        measuring_at({"process": [100.0, 100.0], "thread": [102.0, 102.0]})
    )
    assert tie == "process" and "not faster beyond the noise (3%)" in note
    # readings 20 % apart: a 10 % lead is within what the repeats show
    noisy, _, note = tune.compare_worker_types(
        measuring_at({"process": [100.0, 100.0], "thread": [120.0, 100.0]})
    )
    assert noisy == "process" and "(17%)" in note


def _kind_measure(monkeypatch: pytest.MonkeyPatch, rates: dict[str, float]) -> list[tuple]:
    """Fake measurements whose images/s depend on the kind of worker each loader has."""
    calls: list[tuple] = []

    def measure(make_loader, workers: int, seconds: float, **options: object):
        loader = make_loader(workers)  # built as training builds it: a real fastload loader
        calls.append((workers, loader.worker_type))
        return rates[loader.worker_type] * min(max(workers, 0.5), 2), 0.9

    monkeypatch.setattr(measuring, "measure_usage", measure)
    return calls


def test_autotune_measures_both_kinds_at_the_chosen_count_and_caches_the_kind(
    photos: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _kind_measure(monkeypatch, {"process": 100.0, "thread": 140.0})
    dataset = fastload.ImageFolder(photos, fastload.transforms.RandomResizedCrop(16))
    kwargs = {"worker_type": "auto"}
    result = tune.autotune(
        dataset, batch_size=8, max_workers=4, loader=fastload.DataLoader, loader_kwargs=kwargs
    )
    assert result.num_workers == 2 and result.worker_type == "thread"
    assert result.images_per_sec == 280.0  # the kind kept: its own readings
    searched = [c for c in calls if c[1] == "process"]
    assert {w for w, _ in searched} >= {0, 1, 2}  # the counts: searched with processes
    assert calls[-4:] == [(2, "process"), (2, "thread"), (2, "thread"), (2, "process")]
    assert [m.worker_type for m in result.table[-4:]] == ["process", "thread", "thread", "process"]
    n = len(calls)
    again = tune.autotune(
        dataset, batch_size=8, max_workers=4, loader=fastload.DataLoader, loader_kwargs=kwargs
    )
    assert again.cached and again.worker_type == "thread" and len(calls) == n


def test_loader_with_worker_type_auto_holds_the_kind_measured(
    photos: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _kind_measure(monkeypatch, {"process": 100.0, "thread": 140.0})
    dataset = fastload.ImageFolder(photos, fastload.transforms.RandomResizedCrop(16))
    loader = fastload.DataLoader(dataset, batch_size=8, num_workers=2, worker_type="auto")
    assert calls == [(2, "process"), (2, "thread"), (2, "thread"), (2, "process")]
    assert loader.worker_type == "thread" and loader.plan.threads
    assert loader.worker_choice.startswith("worker_type='auto': measured: num_workers=2")
    assert "threads of this process" in fastload.explain(loader)
    assert "threads ran 1.40x processes" in fastload.explain(loader)
    assert len(list(loader)) == 6
    slower = _kind_measure(monkeypatch, {"process": 100.0, "thread": 90.0})
    other = fastload.DataLoader(dataset, batch_size=8, num_workers=1, worker_type="auto")
    assert other.worker_type == "process" and not other.plan.threads and len(slower) == 4
    cached = fastload.DataLoader(dataset, batch_size=8, num_workers=2, worker_type="auto")
    assert cached.worker_type == "thread" and "cached" in cached.worker_choice


def test_auto_keeps_processes_unmeasured_where_threads_cannot_run(
    photos: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _kind_measure(monkeypatch, {"process": 100.0, "thread": 1000.0})
    # torch's own dataset draws from the worker's streams: threads would share them
    loader = fastload.DataLoader(Tensors(), batch_size=8, num_workers=2, worker_type="auto")
    assert loader.worker_type == "process" and calls == []
    assert "its random draws would come from streams the threads share" in loader.worker_choice
    dataset = fastload.ImageFolder(photos, fastload.transforms.RandomResizedCrop(16))
    init = fastload.DataLoader(
        dataset, batch_size=8, num_workers=2, worker_type="auto", worker_init_fn=print
    )
    assert init.worker_type == "process" and "worker_init_fn" in init.worker_choice
    none = fastload.DataLoader(dataset, batch_size=8, num_workers=0, worker_type="auto")
    assert none.worker_type == "process" and "num_workers=0" in none.worker_choice
    assert calls == []
    given = fastload.DataLoader(dataset, batch_size=8, num_workers=2, worker_type="thread")
    assert given.worker_choice is None and calls == []


def test_auto_keeps_processes_unmeasured_where_torch_would_run_the_loader_as_it_is(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty dataset, and single samples (batch_size=None) that threads cannot run: the
    loader is torch's, with no error of fastload's and nothing measured."""
    calls = _kind_measure(monkeypatch, {"process": 100.0, "thread": 1000.0})
    empty = fastload.ImageList([], [], fastload.transforms.RandomResizedCrop(16))
    loader = fastload.DataLoader(empty, batch_size=8, num_workers=2, worker_type="auto")
    assert loader.worker_type == "process" and list(loader) == [] and calls == []
    assert loader.worker_choice is not None and "the dataset is empty" in loader.worker_choice
    assert "not measured" in loader.worker_choice
    samples = fastload.DataLoader(Tensors(), batch_size=None, num_workers=2, worker_type="auto")
    stock = torch.utils.data.DataLoader(Tensors(), batch_size=None, num_workers=2)
    assert samples.worker_type == "process" and calls == []
    for (image, label), (expected, its_label) in zip(samples, stock, strict=True):
        assert torch.equal(image, expected) and label == its_label
    # an answer that needs no measuring still checks what it was given
    with pytest.raises(ValueError, match="budget=0 must be a positive number"):
        tune.choose_worker_type(
            Tensors(), batch_size=8, num_workers=2, loader=fastload.DataLoader, budget=0
        )


def test_auto_needs_a_batch_size(photos: Path, cache: Path) -> None:
    dataset = fastload.ImageFolder(photos, fastload.transforms.RandomResizedCrop(16))
    with pytest.raises(ValueError, match="worker_type='auto' needs a batch_size"):
        fastload.DataLoader(dataset, batch_size=None, num_workers=2, worker_type="auto")
