"""The random crops the region decoder draws and plans itself (``cropplans.h``,
``fastload.transforms.crop_recipes``): torch's draws and fastload's Python plan, number for
number, and every file that planner does not read left to Python."""

from __future__ import annotations

import importlib
import math
import random
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision.transforms as tv
from images import jpeg_bytes, photo, png_bytes, with_orientation
from PIL import Image

import fastload
from fastload import transforms as T
from fastload.backends import region
from fastload.backends.headers import read_header
from fastload.backends.plans import plan_jpeg
from fastload.sampling import SampleKey, seeded
from fastload.transforms import split_transform
from fastload.transforms.crop_recipes import CropRecipe, crop_recipe

BIG = 10**9  # max_pixels that refuses nothing


@pytest.fixture(autouse=True)
def _usable(require_backend) -> None:
    require_backend("region")


def _kernel() -> Any:
    return importlib.import_module(region.EXTENSION)


def _header(width: int, height: int, components: int = 3, app: bytes = b"") -> bytes:
    """A JPEG's markers up to its scan, then a stand-in scan and the end marker: all the
    planners read."""
    sof = struct.pack(">BHHB", 8, height, width, components) + bytes(3 * components)
    jfif = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    frame = b"\xff\xc0" + struct.pack(">H", 2 + len(sof)) + sof
    return b"\xff\xd8" + jfif + app + frame + b"\xff\xda\x00\x02" + bytes(40) + b"\xff\xd9"


def _recipe(ops: list[Any]) -> CropRecipe:
    recipe = crop_recipe(split_transform(T.Compose(ops)))
    assert recipe is not None
    return recipe


def _python_plan(data: bytes, seed: int, ops: list[Any], *, exif: bool = True) -> Any:
    """fastload's Python planner, drawing from torch's own generator seeded with ``seed``."""
    split = split_transform(T.Compose(ops))
    with seeded(seed):
        info, jpeg = read_header(data, max_pixels=BIG, exif_orientation=exif)
        assert jpeg
        jp = plan_jpeg(info, split.plan, split.render)
    if jp.region is None or jp.oriented_after:
        return None
    return (jp.reduce, *map(float, jp.region), jp.mirror)


def test_plans_are_the_python_planners_with_torchs_draws() -> None:
    rng = random.Random(5)
    planned = 0
    for _ in range(3000):
        size = rng.choice([224, 160, 96, 17, (120, 300)])
        ops: list[Any] = [
            T.RandomResizedCrop(
                size,
                scale=rng.choice([(0.08, 1.0), (0.5, 1.0), (0.001, 0.01), (1.0, 1.0)]),
                ratio=rng.choice([(3 / 4, 4 / 3), (1.0, 1.0), (0.1, 0.2), (5.0, 9.0)]),
                interpolation=rng.choice(["bilinear", "bicubic"]),
            )
        ]
        if rng.random() < 0.7:
            ops.append(T.RandomHorizontalFlip(rng.choice([0.5, 0.0, 1.0, 0.3])))
        width = rng.choice([rng.randint(1, 80), rng.randint(80, 5000), 500, 333])
        height = rng.choice([rng.randint(1, 80), rng.randint(80, 5000), 375, 251])
        data, seed = _header(width, height), rng.getrandbits(63)
        made = _recipe(ops).as_tuple(exif_orientation=True, max_pixels=BIG)
        mine = _kernel().plan_crop(data, seed, made)
        want = _python_plan(data, seed, ops)
        # a crop the kernel does not take as it is stays Python's to render
        assert mine == want or (mine is None and want is None), (width, height, ops, seed)
        planned += mine is not None
    assert planned > 2900


def test_a_box_the_kernel_does_not_take_as_it_is_is_left_to_python() -> None:
    # ten misses of the ratio: the centred 75 x 375, at 1/2 the whole image resized to 160 x
    # 32 and then sliced ("whole"), as torchvision resizes, then crops
    ops = [T.RandomResizedCrop(32, scale=(0.9, 1.0), ratio=(0.1, 0.2))]
    made = _recipe(ops).as_tuple(exif_orientation=True, max_pixels=BIG)
    data = _header(375, 375)
    assert _kernel().plan_crop(data, 7, made) is None
    assert _python_plan(data, 7, ops) is None


def test_crops_and_flips_are_torchvisions() -> None:
    # at 224 from at most 1.9x larger, nothing is decoded at a reduced scale: the box is
    # torchvision's crop, drawn by torchvision's own code
    ops = [T.RandomResizedCrop(224, scale=(0.3, 1.0)), T.RandomHorizontalFlip()]
    made = _recipe(ops).as_tuple(exif_orientation=True, max_pixels=BIG)
    crop, flip = tv.RandomResizedCrop(224, scale=(0.3, 1.0)), tv.RandomHorizontalFlip()
    picture = torch.zeros(1, 420, 400)
    for seed in range(200):
        torch.manual_seed(seed)
        top, left, h, w = crop.get_params(picture, crop.scale, crop.ratio)
        mirror = bool(torch.rand(1) < flip.p)
        plan = _kernel().plan_crop(_header(400, 420), seed, made)
        assert plan == (1, left, top, left + w, top + h, mirror)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (png_bytes(Image.fromarray(photo(64, 48))), "another format"),
        (_header(640, 480)[:-2], "no end marker: truncated"),
        (_header(640, 480, components=4), "CMYK"),
        (_header(0, 480), "no size"),
        (_header(5000, 5000), "over max_pixels"),
        (with_orientation(photo(64, 48), 6), "an orientation to apply"),
        (b"\xff\xd8\xff\xdb" + bytes(64), "no frame header"),
    ],
)
def test_files_the_python_planner_reads_are_left_to_it(data: bytes, why: str) -> None:
    made = _recipe([T.RandomResizedCrop(32)]).as_tuple(exif_orientation=True, max_pixels=10**7)
    assert _kernel().plan_crop(data, 1, made) is None, why


def test_an_orientation_is_planned_where_it_is_not_applied() -> None:
    data = with_orientation(photo(64, 48), 6)
    ops = [T.RandomResizedCrop(32)]
    made = _recipe(ops).as_tuple(exif_orientation=False, max_pixels=BIG)
    assert _kernel().plan_crop(data, 3, made) == _python_plan(data, 3, ops, exif=False)


def test_only_the_recipe_it_draws_is_a_recipe() -> None:
    def recipe(transform: Any) -> CropRecipe | None:
        return crop_recipe(split_transform(transform))

    class Mine(T.RandomResizedCrop):
        pass

    crop = T.RandomResizedCrop((8, 12), scale=(0.5, 1.0), interpolation="bicubic")
    made = recipe(T.Compose([crop, T.RandomHorizontalFlip(0.25)]))
    assert made is not None and (made.width, made.height, made.scale) == (12, 8, (0.5, 1.0))
    assert (made.ratio, made.cubic, made.flip) == ((3 / 4, 4 / 3), True, 0.25)
    assert recipe(T.RandomResizedCrop(8)) == replace(
        made, width=8, height=8, scale=(0.08, 1.0), cubic=False, flip=None
    )
    for other in [
        T.Compose([T.RandomHorizontalFlip(), T.RandomResizedCrop(8)]),  # flipped first
        T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.CenterCrop(4)]),
        T.Compose([T.RandomResizedCrop(8, interpolation="nearest")]),
        T.Compose([T.RandomResizedCrop(8, antialias=False)]),
        T.Compose([Mine(8)]),  # a subclass may draw otherwise
        T.RandomResizedCrop(8, scale=(-0.5, 1.0)),  # Python's sqrt refuses the area
        T.RandomResizedCrop(8, ratio=(0.0, 1.0)),  # ... and its log the ratio
        T.RandomResizedCrop(8, ratio=(1.0, math.inf)),
        T.Compose([T.RandomResizedCrop(8), lambda image: image]),
        T.Resize(8),
        None,
    ]:
        assert recipe(other) is None, other


def test_bad_recipes_and_jobs_are_refused_by_value() -> None:
    kernel = _kernel()
    out = np.zeros((2, 3, 8, 8), np.uint8)
    good = _recipe([T.RandomResizedCrop(8)]).as_tuple(exif_orientation=True, max_pixels=BIG)
    with pytest.raises(ValueError, match=r"bad recipe \(8, 0, "):
        kernel.decode_drawn_many([], (8, 0, *good[2:]), out)
    with pytest.raises(ValueError, match="bad job 1: slot 2 of 384 output bytes"):
        kernel.decode_drawn_many([(0, b"", 1), (2, b"", 1)], good, out)
    with pytest.raises(TypeError, match="job 0 is a list"):
        kernel.decode_drawn_many([[0, b"", 1]], good, out)


def _folder(root: Path) -> Path:
    """JPEGs of several sizes and kinds, and files the planner leaves to Python."""
    for k in range(20):
        array = photo(150 + 41 * (k % 6), 120 + 33 * (k % 5), seed=k)
        data = jpeg_bytes(array, quality=75 + k, subsampling=k % 3, progressive=k % 6 == 4)
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"c{k % 2}" / f"{k:03d}.jpg").write_bytes(data)
    (root / "c0" / "rotated.jpg").write_bytes(with_orientation(photo(260, 180, seed=40), 6))
    (root / "c1" / "flat.png").write_bytes(png_bytes(Image.fromarray(photo(240, 200, seed=41))))
    return root


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_a_batch_drawn_by_the_decoder_is_the_samples_loaded_alone(
    tmp_path: Path, interpolation: str
) -> None:
    geometry = T.Compose(
        [T.RandomResizedCrop(48, interpolation=interpolation), T.RandomHorizontalFlip()]
    )
    dataset = fastload.ImageFolder(_folder(tmp_path), geometry, backend="region")
    drawn = region.RegionBackend.decode_drawn_many
    written: list[int] = []

    def counted(self: Any, jobs: list[Any], *args: Any, **kwargs: Any) -> Any:
        done = drawn(self, jobs, *args, **kwargs)
        written.append(sum(done))
        return done

    for seed in range(4):
        keys = [SampleKey(i, seed * 100 + i) for i in range(len(dataset))]
        region.RegionBackend.decode_drawn_many = counted  # type: ignore[method-assign]
        try:
            batch = dataset.load_stacked(keys)
        finally:
            region.RegionBackend.decode_drawn_many = drawn  # type: ignore[method-assign]
        alone = [dataset[k] for k in keys]
        assert torch.equal(batch.images, torch.stack([image for image, _ in alone]))
        assert batch.targets == [target for _, target in alone]
    # the 20 JPEGs drawn by the decoder; the rotated one and the PNG by Python
    assert written == [20] * 4


def test_with_float64_as_torchs_default_the_batch_is_drawn_as_torch_draws_it(
    tmp_path: Path,
) -> None:
    # torch's uniform_ then draws float64 numbers, which the C planner does not reproduce
    geometry = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])
    dataset = fastload.ImageFolder(_folder(tmp_path), geometry, backend="region")
    keys = [SampleKey(i, 900 + i) for i in range(len(dataset))]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        batch = dataset.load_stacked(keys)
        alone = [dataset[k] for k in keys]
    finally:
        torch.set_default_dtype(before)
    assert torch.equal(batch.images, torch.stack([image for image, _ in alone]))
