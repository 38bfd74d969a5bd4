"""The nvImageCodec backend under fastload.DataLoader, in its CPU-only mode (no GPU needed).

Real JPEG files written here, real nvImageCodec decoders, real processes for the two-rank test.
The per-sample entry is also in the contract suite (tests/backends/test_contract.py).
"""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from images import jpeg_bytes, photo, with_orientation
from ranks import run_ranks

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.backends.nvimgcodec import decoder, engine
from fastload.backends.nvimgcodec.decoder import gpu_regions_exact, nvjpeg_version
from fastload.pixels.image import probe
from fastload.transforms import View

SIZES = [(150 + 9 * i % 80, 110 + 13 * i % 60) for i in range(19)]


@pytest.fixture(autouse=True)
def _nvimgcodec(require_backend) -> None:
    require_backend("nvimgcodec")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nvimgcodec")
    for i, (w, h) in enumerate(SIZES):
        (path / f"img_{i:03d}.jpg").write_bytes(jpeg_bytes(photo(w, h, seed=i)))
    return path


CROP = T.RandomResizedCrop(32)


def dataset(folder: Path, transform=CROP, **options) -> fastload.ImageList:
    paths = sorted(folder.glob("img_*.jpg"))
    return fastload.ImageList(paths, list(range(len(paths))), transform, **options)


def mad(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.to(torch.int16) - b.to(torch.int16)).abs().float().mean())


def labels_of(loader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


# ---------------------------------------------------------------- loader semantics


@pytest.mark.parametrize("drop_last", [False, True])
def test_epochs_are_torchs_batches(folder: Path, drop_last: bool) -> None:
    def make(backend):
        return fastload.DataLoader(
            dataset(folder),
            batch_size=4,
            shuffle=True,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(7),
            backend=backend,
        )

    ours, plain = make("nvimgcodec"), make(None)
    assert len(ours) == len(plain)
    epochs = [labels_of(ours) for _ in range(2)]
    assert epochs == [labels_of(plain) for _ in range(2)] and epochs[0] != epochs[1]
    assert all(len(b) == 4 for b in epochs[0]) or not drop_last


def test_same_seed_same_batches_and_threads_from_num_workers(folder: Path) -> None:
    def images(workers: int) -> torch.Tensor:
        loader = fastload.DataLoader(
            dataset(folder),
            batch_size=5,
            num_workers=workers,
            backend="nvimgcodec",
            generator=torch.Generator().manual_seed(3),
        )
        assert loader.num_workers == workers and loader.executor.options.num_threads == max(
            1, workers
        )
        return torch.cat([x for x, _ in loader])

    first = images(0)
    assert first.shape == (len(SIZES), 3, 32, 32) and first.dtype == torch.uint8
    assert torch.equal(first, images(2))


@pytest.mark.parametrize(
    "transform",
    [
        T.Compose([T.Resize(64), T.CenterCrop(56)]),
        T.Compose([T.Resize((40, 70)), T.RandomHorizontalFlip(p=1.0)]),
        T.CenterCrop(180),  # larger than most images: zeros around them
    ],
    ids=["val", "resize-flip", "pad"],
)
def test_pixels_agree_with_the_turbojpeg_backend(folder: Path, transform) -> None:
    ours = torch.cat(
        [
            x
            for x, _ in fastload.DataLoader(
                dataset(folder, transform), batch_size=6, backend="nvimgcodec"
            )
        ]
    )
    reference = dataset(folder, transform, backend="turbojpeg")
    errors = [mad(ours[i], reference[i][0]) for i in range(len(SIZES))]
    assert np.mean(errors) <= 2.0, errors


def test_random_crops_are_torchvisions_draws_decoded_as_regions(folder: Path) -> None:
    transform = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])
    ds = dataset(folder, transform)
    generator = torch.Generator().manual_seed(11)
    ours = torch.cat(
        [
            x
            for x, _ in fastload.DataLoader(
                ds, batch_size=5, backend="nvimgcodec", generator=generator, seeding="worker"
            )
        ]
    )
    # seeding="worker": the loader seeds its crops' stream with one draw from its generator
    seed = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(11))
    reference = fastload.backends.create("turbojpeg")
    errors = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed.item()))
        for i, (w, h) in enumerate(SIZES):
            view = transform.plan(View.full(w, h))
            data = Path(ds.path(i)).read_bytes()
            sample = engine.plan_sample(view, probe(data), (w, h))
            assert sample.region is not None  # a crop on whole pixels: only it is decoded
            whole = engine.plan_sample(view, probe(data), (w, h), regions=False)
            assert whole.region is None and whole.stored == sample.stored
            expected = reference.decode(data, plan=lambda v, view=view: view)
            errors.append(mad(ours[i], torch.from_numpy(expected).permute(2, 0, 1)))
    assert np.mean(errors) <= 2.0 and max(errors) <= 4.0, errors


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "rotated.jpg"
    path.write_bytes(with_orientation(photo(120, 80, seed=5), 6))
    crop = T.Compose([T.RandomResizedCrop(24, scale=(0.3, 0.5)), T.RandomHorizontalFlip()])
    for transform in (T.Resize((60, 40)), crop):
        ds = fastload.ImageList([path] * 4, [0, 1, 2, 3], transform)
        torch.manual_seed(0)
        images, _ = next(iter(fastload.DataLoader(ds, batch_size=4, backend="nvimgcodec")))
        assert images.shape[2:] == ((60, 40) if transform is not crop else (24, 24))
    expected, _ = fastload.ImageList([path], [0], T.Resize((60, 40)), backend="pillow")[0]
    ds = fastload.ImageList([path], [0], T.Resize((60, 40)))
    images, _ = next(iter(fastload.DataLoader(ds, batch_size=1, backend="nvimgcodec")))
    assert mad(images[0], expected) <= 2.0


def flipped(images: torch.Tensor, plain: torch.Tensor) -> list[bool]:
    """Which images are their plain counterparts mirrored (each must be one or the other)."""
    out = []
    for x, y in zip(images, plain, strict=True):
        assert torch.equal(x, y) or torch.equal(x, y.flip(-1))
        out.append(not torch.equal(x, y))
    return out


@pytest.mark.parametrize("seeding", ["worker", "sample"])
def test_leading_flips_fold_with_their_own_draws(folder: Path, seeding: str) -> None:
    def run(ops, backend: str = "nvimgcodec") -> torch.Tensor:
        loader = fastload.DataLoader(
            dataset(folder, T.Resize((24, 24))),
            batch_size=6,
            backend=backend,
            batch_transforms=ops,
            seeding=seeding,
            generator=torch.Generator().manual_seed(2),
        )
        return torch.cat([x for x, _ in loader])

    folded = run(gpu.RandomHorizontalFlip(generator=torch.Generator().manual_seed(4)))
    plain = run(None)
    if seeding == "worker":  # the op's own stream, batch after batch
        flips = gpu.RandomHorizontalFlip(generator=torch.Generator().manual_seed(4))
        expected = torch.cat([flips(plain[i : i + 6]) for i in range(0, len(plain), 6)])
        assert torch.equal(folded, expected)
    else:  # each batch's own stream: the flips the CPU backends draw in their batch stage
        on_cpu = run(gpu.RandomHorizontalFlip(generator=torch.Generator().manual_seed(4)), "pillow")
        assert flipped(folded, plain) == flipped(on_cpu, run(None, "pillow"))
        assert any(flipped(folded, plain)) and not all(flipped(folded, plain))


# ---------------------------------------------------------------- faults


def fault_list(tmp_path: Path, **options) -> tuple[fastload.ImageList, dict[int, str]]:
    good = jpeg_bytes(photo(96, 80, seed=1))
    kinds = {
        2: ("truncated", good[: len(good) // 2]),
        5: ("not an image", b"hello, world" * 20),
        # passes every header check and only fails in the decoder: no image data
        8: ("undecodable", good[: good.find(b"\xff\xda")] + b"\xff\xd9"),
    }
    paths = []
    for i in range(11):
        path = tmp_path / f"f{i:02d}.jpg"
        path.write_bytes(kinds[i][1] if i in kinds else jpeg_bytes(photo(96, 80, seed=i)))
        paths.append(path)
    ds = fastload.ImageList(paths, list(range(11)), T.RandomResizedCrop(24), **options)
    return ds, {i: kind for i, (kind, _) in kinds.items()}


def test_skip_costs_the_bad_files_only(tmp_path: Path) -> None:
    ds, bad = fault_list(tmp_path, on_error="skip")
    loader = fastload.DataLoader(ds, batch_size=4, shuffle=True, backend="nvimgcodec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = sorted(y for _, labels in loader for y in labels.tolist())
    assert seen == [i for i in range(11) if i not in bad]
    skipped = [str(w.message) for w in caught if w.category is fastload.UnreadableImageWarning]
    assert len(skipped) == 1 and skipped[0].startswith("skipped 3 unreadable image(s)")
    assert sorted(ds.bad_files) == sorted(ds.path(i) for i in bad)
    assert "nvImageCodec could not decode it" in ds.bad_files[ds.path(8)]


@pytest.mark.parametrize("index", [2, 8])
def test_raise_names_the_file_and_the_backend(tmp_path: Path, index: int) -> None:
    ds, bad = fault_list(tmp_path)
    loader = fastload.DataLoader(ds, batch_size=4, backend="nvimgcodec")
    with pytest.raises(fastload.ImageDecodeError) as info:
        list(loader)
    message = str(info.value)
    first_bad = min(bad)
    assert repr(ds.path(first_bad)) in message and "nvimgcodec backend" in message


# ---------------------------------------------------------------- refusals


def test_wrong_use_is_refused_with_the_reason(folder: Path) -> None:
    import torchvision.transforms as tvT

    with pytest.raises(
        ValueError, match=r"the nvimgcodec backend cannot run RandomResizedCrop\(size"
    ):
        fastload.DataLoader(
            dataset(folder, tvT.RandomResizedCrop(32)), batch_size=4, backend="nvimgcodec"
        )
    for option in ("collate_fn", "worker_init_fn"):
        with pytest.raises(ValueError, match=rf"{option}=.* would not run"):
            fastload.DataLoader(
                dataset(folder), batch_size=4, backend="nvimgcodec", **{option: print}
            )
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"device='cuda' needs CUDA"):
            fastload.DataLoader(dataset(folder), batch_size=4, backend="nvimgcodec", device="cuda")


# ---------------------------------------------------------------- torch.distributed

_RANK = textwrap.dedent(
    """
    import json, os, sys
    import torch.distributed as dist
    import fastload
    from fastload import transforms as T
    from pathlib import Path

    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    paths = sorted(folder.glob("img_*.jpg"))
    ds = fastload.ImageList(paths, list(range(len(paths))), T.RandomResizedCrop(16))
    loader = fastload.DataLoader(ds, batch_size=4, shuffle=True, backend="nvimgcodec")
    out.write_text(json.dumps([y for _, labels in loader for y in labels.tolist()]))
    dist.destroy_process_group()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


def test_two_ranks_read_disjoint_shards(folder: Path, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    run_ranks(script, lambda r: [str(folder), str(tmp_path / f"rank{r}.json")])
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    per_rank = -(-len(SIZES) // 2)
    assert len(a) == len(b) == per_rank
    assert set(a) | set(b) == set(range(len(SIZES)))


@pytest.mark.parametrize(
    ("transform", "seeding"),
    [(CROP, "sample"), (T.Compose([T.Resize(40), T.CenterCrop(32)]), "worker")],
    ids=["seeded crops", "no draws"],
)
def test_planner_processes_plan_what_one_thread_plans(
    folder: Path, transform, seeding: str
) -> None:
    def run(threads: int) -> tuple[torch.Tensor, list[int], Any]:
        loader = fastload.DataLoader(
            dataset(folder, transform),
            batch_size=4,
            shuffle=True,
            num_workers=threads,
            backend="nvimgcodec",
            seeding=seeding,
            generator=torch.Generator().manual_seed(3),
        )
        batches = list(loader)
        images = torch.cat([x for x, _ in batches])
        return images, torch.cat([y for _, y in batches]).tolist(), loader.executor

    alone, order, executor = run(1)
    assert executor.planner_processes == 0
    spread, spread_order, executor = run(4)
    assert executor.planner_processes == 2  # they read and planned every batch
    assert spread_order == order and torch.equal(spread, alone)
    executor.close()


def test_on_the_cpu_normalize_runs_in_the_batch_stage(folder: Path) -> None:
    ops = gpu.Normalize([0.5] * 3, [0.25] * 3)
    loader = fastload.DataLoader(
        dataset(folder), batch_size=8, backend="nvimgcodec", batch_transforms=ops
    )
    plain = fastload.DataLoader(dataset(folder), batch_size=8, backend="nvimgcodec")
    assert loader.executor.folded.normalize is None and loader.executor.remaining_ops is ops
    for (x, _), (u, _) in zip(loader, plain, strict=True):
        assert torch.equal(x, ops(u))


def test_a_file_left_out_of_its_slot_is_decoded_again_and_copied_in(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on a GPU, a file the GPU decoders refuse falls to a decoder that may not write into
    # device slots: nvImageCodec leaves it out (None); the engine decodes it again its own way
    def plain():
        return fastload.DataLoader(
            dataset(folder),
            batch_size=8,
            backend="nvimgcodec",
            generator=torch.Generator().manual_seed(5),
        )

    want = torch.cat([x for x, _ in plain()])
    real = engine.into_slots

    def leaves_one_out(decoder, streams, slots, **kwargs):
        images = real(decoder, streams, slots, **kwargs)
        return [None if k == 1 else image for k, image in enumerate(images)]

    monkeypatch.setattr(engine, "into_slots", leaves_one_out)
    got = torch.cat([x for x, _ in plain()])
    assert torch.equal(got, want)


def test_running_out_of_memory_is_one_error_naming_the_batch_size(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def short_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(engine, "render_array", short_of_memory)
    loader = fastload.DataLoader(dataset(folder), batch_size=8, backend="nvimgcodec")
    with pytest.raises(RuntimeError, match=r"out of GPU memory .* a batch of 8 images") as caught:
        next(iter(loader))
    assert "smaller batch_size" in str(caught.value)
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)


@pytest.mark.parametrize(
    ("value", "load"), [(None, decoder.DEFAULT_HW_LOAD), ("0.6", 0.6), ("1", 1.0), (" 0 ", 0.0)]
)
def test_the_hardware_decoder_share_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, load: float
) -> None:
    if value is None:
        monkeypatch.delenv(decoder.HW_LOAD_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(decoder.HW_LOAD_VARIABLE, value)
    assert decoder.hardware_load() == load


@pytest.mark.parametrize("value", ["1.5", "most", "-0.1"])
def test_a_bad_hardware_decoder_share_is_named(monkeypatch: pytest.MonkeyPatch, value) -> None:
    monkeypatch.setenv(decoder.HW_LOAD_VARIABLE, value)
    with pytest.raises(ValueError, match=rf"FASTLOAD_HW_DECODER_LOAD='{value}': give a number"):
        decoder.hardware_load()


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_device_decodes_on_the_gpu_and_matches_cpu_mode(folder: Path) -> None:
    for transform in (T.Compose([T.Resize(64), T.CenterCrop(56)]), T.RandomResizedCrop(48)):

        def make(device, transform=transform):
            return fastload.DataLoader(
                dataset(folder, transform),
                batch_size=8,
                backend="nvimgcodec",
                device=device,
                generator=torch.Generator().manual_seed(1),
            )

        for (xg, yg), (xc, yc) in zip(make("cuda"), make("cpu"), strict=True):
            assert xg.device.type == "cuda" and yg.device.type == "cuda"
            assert torch.equal(yg.cpu(), yc)
            assert mad(xg.cpu(), xc) <= 3.0  # nvJPEG's upsampling differs a little from libjpeg's


@pytest.mark.gpu
def test_cuda_folds_normalize_into_the_renderer_with_the_same_result(folder: Path) -> None:
    ops = gpu.Compose([gpu.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def make(batch_transforms):
        return fastload.DataLoader(
            dataset(folder, T.RandomResizedCrop(48)),
            batch_size=8,
            backend="nvimgcodec",
            device="cuda",
            batch_transforms=batch_transforms,
            generator=torch.Generator().manual_seed(1),
        )

    folded = make(ops)
    assert folded.executor.folded.normalize is not None and folded.executor.remaining_ops is None
    for (xf, _), (xu, _) in zip(folded, make(None), strict=True):
        assert xf.dtype == torch.float32
        assert torch.equal(xf, ops(xu))


_ORDER = textwrap.dedent(
    """
    import json, sys, torch
    if sys.argv[2] == "nvimgcodec first":
        import nvidia.nvimgcodec
    import torchvision
    import fastload
    from fastload import transforms as T
    from fastload.backends.nvimgcodec.decoder import nvjpeg_version
    from pathlib import Path

    paths = sorted(Path(sys.argv[1]).glob("img_*.jpg"))
    ds = fastload.ImageList(paths, list(range(len(paths))), T.RandomResizedCrop(48))
    loader = fastload.DataLoader(ds, batch_size=8, backend="nvimgcodec", device="cuda",
        generator=torch.Generator().manual_seed(1))
    images = torch.cat([x.cpu() for x, _ in loader])
    torch.save(images, sys.argv[3])
    print(json.dumps({"regions": loader.executor.engine.regions, "nvjpeg": nvjpeg_version()}))
    """
)


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["torchvision first", "nvimgcodec first"])
def test_cuda_crops_are_exact_and_quiet_whichever_nvjpeg_loads_first(
    folder: Path, tmp_path: Path, order: str
) -> None:
    # torchvision bundles an nvJPEG (13.0 in CUDA 13 builds) that nvImageCodec then uses, and
    # nvImageCodec 0.9 refuses GPU region decodes with it: each crop fell back to its CPU
    # decoder, with two warnings a file on stderr (seen on an H100, 6.9 MB in one benchmark)
    import subprocess
    import sys

    script, out = tmp_path / "order.py", tmp_path / "images.pt"
    script.write_text(_ORDER)
    done = subprocess.run(
        [sys.executable, str(script), str(folder), order, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    version = tuple(found["nvjpeg"]) if found["nvjpeg"] else None
    assert found["regions"] == gpu_regions_exact(version)
    if order == "torchvision first":
        assert version is not None and not found["regions"], found
    assert "WARNING" not in done.stderr and "ROI decode" not in done.stderr, done.stderr[-2000:]
    plain = fastload.DataLoader(
        dataset(folder, T.RandomResizedCrop(48)),
        batch_size=8,
        backend="nvimgcodec",
        generator=torch.Generator().manual_seed(1),
    )
    assert mad(torch.load(out), torch.cat([x for x, _ in plain])) <= 3.0


# ---------------------------------------------------------------- which nvJPEG


@pytest.mark.parametrize(
    ("version", "exact"),
    [
        (None, True),
        ((13, 3, 2), True),
        ((13, 2, 0), True),
        ((13, 0, 1), False),
        ((12, 4, 0), False),
    ],
)
def test_gpu_regions_are_decoded_only_with_an_nvjpeg_that_decodes_them_exactly(
    version: tuple[int, int, int] | None, exact: bool
) -> None:
    assert gpu_regions_exact(version) is exact


_LOADED = textwrap.dedent(
    """
    import ctypes, json, sys
    from fastload.backends.nvimgcodec.decoder import nvjpeg_version

    def mapped():
        return sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnvjpeg" in line})

    before = nvjpeg_version(soname="libnvjpeg.so.13"), nvjpeg_version()
    unloaded = mapped()
    import torchvision  # a CUDA build carries its own nvJPEG, named libnvjpeg.so.13
    tv = nvjpeg_version(soname="libnvjpeg.so.13")
    ctypes.CDLL(sys.argv[1])  # the nvidia-nvjpeg wheel's, as nvImageCodec opens it
    wheel = nvjpeg_version()
    print(json.dumps({"before": before, "unloaded": unloaded, "tv": tv, "wheel": wheel,
        "mapped": mapped()}))
    """
)


def test_nvjpeg_version_names_the_library_already_loaded_and_loads_none(tmp_path: Path) -> None:
    import importlib.util
    import subprocess
    import sys

    from fastload._optional import version_of
    from fastload.backends.nvimgcodec.decoder import DISTRIBUTIONS

    major = 13 if version_of(DISTRIBUTIONS[0]) is not None else 12
    spec = importlib.util.find_spec("nvidia.nvjpeg") or importlib.util.find_spec("nvidia.cu13")
    assert spec is not None and spec.submodule_search_locations, "nvidia-nvjpeg is not installed"
    roots = [Path(p) for p in spec.submodule_search_locations]
    wheel = next(f for r in roots for f in r.glob(f"lib/libnvjpeg.so.{major}"))
    script = tmp_path / "loaded.py"
    script.write_text(_LOADED)
    done = subprocess.run(
        [sys.executable, str(script), str(wheel)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["before"] == [None, None] and found["unloaded"] == []  # asking loads nothing
    assert found["tv"] is not None and found["tv"][0] == 13  # torchvision's own copy
    assert found["wheel"] is not None and found["wheel"][0] == major
    assert str(wheel.resolve()) in {str(Path(p).resolve()) for p in found["mapped"]}


# ---------------------------------------------------------------- info and autotune


def test_info_says_which_gpu_decoders_and_which_nvjpeg_it_finds() -> None:
    from fastload.commands.info import collect

    entry = next(b for b in collect()["backends"] if b["name"] == "nvimgcodec")
    assert entry["usable"] and entry["kind"] == "executor"
    details = entry["details"]
    assert set(details) == {"cuda_decoder", "hardware_decoder", "nvjpeg"}
    if not torch.cuda.is_available():
        assert details["cuda_decoder"] == details["hardware_decoder"] == "no (no CUDA device)"
    version = nvjpeg_version()
    if version is None:
        assert details["nvjpeg"] == "not loaded"
    else:
        assert details["nvjpeg"].startswith(".".join(map(str, version)))
        assert ("regions on the GPU" in details["nvjpeg"]) is gpu_regions_exact(version)


def test_autotune_tunes_its_thread_count(folder: Path) -> None:
    from fastload.autotune import autotune

    ds = dataset(folder, backend="nvimgcodec")  # the loader runs it as an executor
    result = autotune(
        ds, batch_size=4, max_workers=2, budget=3.0, cache=False, loader=fastload.DataLoader
    )
    assert {m.num_workers for m in result.table} <= {0, 1, 2} and result.images_per_sec > 0
    loader = fastload.DataLoader(ds, batch_size=4, num_workers=result.num_workers)
    assert loader.plan.backend == "nvimgcodec"
    assert loader.executor.options.num_threads == max(1, result.num_workers)
