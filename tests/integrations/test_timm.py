"""timm's training input on fastload: timm's own ``create_dataset`` / ``create_loader`` (its
folder dataset, ``create_transform``'s recipes, ``fast_collate``, ``PrefetchLoader``, its mixup
collate), swapped by :mod:`fastload.integrations.timm`; a script that builds its loaders as
timm's ``train.py`` does, run unchanged under ``python -m fastload.integrations.timm``."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import timm.data
import torch
from images import jpeg_bytes, photo

import fastload
from fastload.integrations import timm as swap

SCRIPT = Path(__file__).with_name("timm_train.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """timm's layout: a train split of two class folders of real JPEGs, 16 images."""
    root = tmp_path_factory.mktemp("timm")
    for c in range(2):
        (root / "train" / f"class_{c}").mkdir(parents=True)
        for k in range(8):
            w, h = (120, 96) if k % 2 else (90, 110)
            image = photo(w, h, seed=10 * c + k)
            (root / "train" / f"class_{c}" / f"img_{k}.jpg").write_bytes(jpeg_bytes(image))
    return root


def _loader(data: Path, create, *, workers: int, **recipe):
    dataset = timm.data.create_dataset("", root=str(data), split="train", is_training=True)
    return create(
        dataset,
        input_size=(3, 64, 64),
        batch_size=4,
        is_training=True,
        num_workers=workers,
        device=torch.device("cpu"),
        **recipe,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_timms_loader_is_fastloads_with_timms_draws(data: Path, workers: int) -> None:
    """``create_loader`` builds fastload's loader under timm's PrefetchLoader; the crops,
    interpolations and flips are timm's draws for the same seeds, so the normalized batches are
    stock timm's within the resampling tolerance."""
    recipe = {"interpolation": "random", "color_jitter": 0.4}
    fast = _loader(data, swap.create_loader, workers=workers, **recipe)
    assert isinstance(fast, timm.data.loader.PrefetchLoader)
    assert isinstance(fast.loader, fastload.DataLoader)
    acceleration = fast.loader.acceleration
    assert acceleration.fused[0].startswith("RandomResizedCropAndInterpolation")
    assert acceleration.rest[0].startswith("ColorJitter")

    def epoch(loader) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(7)
        random.seed(11)  # no workers: timm draws its crops from this process's Python stream
        batches = list(loader)
        return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])

    want = epoch(_loader(data, timm.data.create_loader, workers=workers, **recipe))
    got = epoch(fast)
    assert torch.equal(want[1], got[1]) and got[1].dtype == torch.int64
    assert got[0].dtype == torch.float32 and got[0].shape == (16, 3, 64, 64)
    scale = torch.tensor(timm.data.IMAGENET_DEFAULT_STD).view(1, 3, 1, 1) * 255
    per_image = ((want[0] - got[0]).abs() * scale).mean(dim=(1, 2, 3))  # 0..255 units
    assert per_image.mean() < 1.0 and per_image.max() < 2.5, per_image


def test_the_swap_leaves_torchs_loader_in_place_and_names_a_missing_timm(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _loader(data, swap.create_loader, workers=0)
    assert torch.utils.data.DataLoader is torch.utils.data.dataloader.DataLoader
    monkeypatch.setitem(sys.modules, "timm.data", None)
    with pytest.raises(fastload.MissingDependencyError, match="pip install timm"):
        swap.create_loader(None, input_size=64, batch_size=1)


def test_a_timm_dataset_read_another_way_runs_as_timm_wrote_it(data: Path) -> None:
    dataset = timm.data.create_dataset("", root=str(data), split="train", load_bytes=True)
    dataset.transform = timm.data.create_transform(64)
    loader = fastload.DataLoader(dataset, batch_size=2, accelerate=True)
    assert not loader.acceleration.accelerated
    assert "bytes" in str(loader.acceleration)


def _train(data: Path, tmp_path: Path, *args: str) -> str:
    command = [sys.executable, "-m", "fastload.integrations.timm", str(SCRIPT)]
    command += ["--data-dir", str(data), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    return log


def test_a_train_py_style_script_runs_unchanged_with_the_prefetcher(
    data: Path, tmp_path: Path
) -> None:
    """train.py's loader with the prefetcher (FastCollateMixup, PrefetchLoader's normalize and
    random erasing), RandAugment and random interpolation, two epochs with timm's
    MultiEpochsDataLoader asked for, in worker processes."""
    log = _train(data, tmp_path, "--epochs", "2", "--multi-epochs-loader")
    assert "loader: fastload.loader.core.DataLoader" in log
    assert "RandomResizedCropAndInterpolation" in log.split("why the rest")[0]
    assert log.count("done: 2 steps") == 2
    losses = [float(x) for x in re.findall(r" loss ([-\d.naninf]+)", log)]
    assert len(losses) == 4 and np.isfinite(losses).all()
    assert "(8, 3, 64, 64) torch.float32" in log


def test_a_train_py_style_script_runs_unchanged_without_the_prefetcher(
    data: Path, tmp_path: Path
) -> None:
    """``--no-prefetcher``: timm's MaybeToTensor, Normalize and per-pixel RandomErasing in the
    transform, Mixup in the loop, no workers."""
    log = _train(data, tmp_path, "--no-prefetcher", "--workers", "0")
    assert "loader: fastload.loader.core.DataLoader" in log
    assert "done: 2 steps" in log
    assert "RandomErasing" in log
