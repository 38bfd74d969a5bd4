"""The executors' shared planning: each sample's draws from its own seed."""

from __future__ import annotations

import gc
import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import timm.data as timm_data
import torch
from garbage import Finalized

from fastload import transforms as T
from fastload.accelerate import translate_transform
from fastload.backends.executor import plan_views
from fastload.backends.executor.reading import start_planner
from fastload.backends.executor.translation import translate
from fastload.pixels.resampling import View
from fastload.transforms import split_transform

SIZES = [(640, 480), (300, 500), (1000, 200), (64, 64)]
SEEDS: list[int | None] = [11, 12, 13, 14]


class JitteredCrop(T.Transform):
    """A Transform of one's own that draws from Python's ``random``."""

    def make_params(self, view: View) -> int:
        return random.randint(0, min(view.width, view.height) // 4)

    def apply_params(self, view: View, params: int) -> View:
        return view.crop(params, params, view.height - params, view.width - params)


def planned(transform, *, python_random: bool) -> list[View]:
    split = split_transform(transform)
    views, _ = plan_views(
        split.plan, SIZES, torch.Generator().get_state(), SEEDS, python_random=python_random
    )
    return views


def test_fastloads_own_ops_plan_the_same_without_pythons_random() -> None:
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    assert not split_transform(transform).draws_python
    random.seed(5)
    before = random.getstate()
    assert planned(transform, python_random=False) == planned(transform, python_random=True)
    assert random.getstate() == before  # the caller's stream, untouched


def test_an_op_that_draws_from_pythons_random_is_seeded_per_sample() -> None:
    transform = T.Compose([JitteredCrop(), T.RandomResizedCrop(32)])
    split = split_transform(transform)
    assert split.draws_python
    first = planned(transform, python_random=split.draws_python)
    random.seed(99)  # the caller's stream does not leak into the samples' draws
    assert planned(transform, python_random=split.draws_python) == first
    alone = []
    for (width, height), seed in zip(SIZES, SEEDS, strict=True):
        random.seed(seed)
        torch.manual_seed(seed)
        alone.append(transform.plan(View.full(width, height)))
    assert first == alone


def test_a_forked_planner_process_does_not_finalize_the_main_process_garbage(
    tmp_path: Path,
) -> None:
    """Planner processes fork while the loader may hold CUDA tensors in garbage, as the
    workers do: what they inherited is never collected there."""
    record = tmp_path / "finalized"
    context = multiprocessing.get_context("fork")
    gc.disable()  # the cycle stays uncollected until the planner has started
    try:
        Finalized(record)
        with ProcessPoolExecutor(
            1, mp_context=context, initializer=start_planner, initargs=(None,)
        ) as planners:
            assert planners.submit(gc.collect).result() == 0  # nothing of the parent's
    finally:
        gc.enable()
    gc.collect()
    assert record.read_text().split() == [str(os.getpid())]


def test_an_op_that_draws_its_interpolation_per_image_is_refused_by_name() -> None:
    """An executor renders a batch with one interpolation: timm's interpolation='random' is
    refused, naming the op, rather than rendered one way."""
    pipeline = timm_data.create_transform(64, is_training=True, interpolation="random")
    fused = translate_transform(pipeline.transforms[:2]).fused
    with pytest.raises(ValueError, match="draws the interpolation per image"):
        translate(split_transform(T.Compose(list(fused))), "dali")
    one_way = timm_data.create_transform(64, is_training=True, interpolation="bicubic")
    fused = translate_transform(one_way.transforms[:2]).fused
    assert translate(split_transform(T.Compose(list(fused))), "dali").interpolation == "bicubic"
