"""The DALI backend under fastload.DataLoader, in DALI's CPU mode (no GPU needed).

Real JPEG files written here, real DALI pipelines, real processes for the two-rank test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from images import jpeg_bytes, photo, with_orientation
from ranks import run_ranks

import fastload
from fastload import backends
from fastload import transforms as T
from fastload.transforms import View

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _dali(require_backend) -> None:
    require_backend("dali")


def make_list(folder: Path, sizes: list[tuple[int, int]], **options) -> fastload.ImageList:
    """One JPEG per size; label i is sample i, so labels name the samples a batch holds."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (w, h) in enumerate(sizes):
        path = folder / f"img_{i:03d}.jpg"
        path.write_bytes(jpeg_bytes(photo(w, h, seed=i)))
        paths.append(path)
    return fastload.ImageList(paths, list(range(len(paths))), **options)


SIZES = [(160 + 7 * i % 90, 120 + 11 * i % 70) for i in range(23)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dali")
    make_list(path, SIZES)
    return path


CROP = T.RandomResizedCrop(32)


def dataset(folder: Path, transform=CROP, **options) -> fastload.ImageList:
    paths = sorted(folder.glob("img_*.jpg"))
    labels = [int(p.stem.split("_")[1]) for p in paths]
    return fastload.ImageList(paths, labels, transform, **options)


def epoch_labels(loader) -> list[list[int]]:
    return [labels.tolist() for _, labels in loader]


def mad(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    return float((a.to(torch.int16) - b.to(torch.int16)).abs().float().mean())


# ---------------------------------------------------------------- loader semantics


@pytest.mark.parametrize("drop_last", [False, True])
def test_len_coverage_and_the_last_batch(folder: Path, drop_last: bool) -> None:
    ds = dataset(folder)
    loader = fastload.DataLoader(
        ds, batch_size=5, shuffle=True, drop_last=drop_last, num_workers=2, backend="dali"
    )
    reference = torch.utils.data.DataLoader(ds, batch_size=5, drop_last=drop_last)
    assert len(loader) == len(reference) == (4 if drop_last else 5)
    for _ in range(3):  # several epochs in a row
        batches = list(loader)
        assert len(batches) == len(loader)
        images, labels = batches[-1]
        assert images.shape == (5 if drop_last else 3, 3, 32, 32) and images.dtype == torch.uint8
        assert images.device.type == "cpu" and labels.dtype == torch.int64
        seen = [x for _, y in batches for x in y.tolist()]
        assert len(seen) == len(set(seen))  # nothing twice
        if drop_last:
            assert len(seen) == 20
        else:
            assert sorted(seen) == list(range(len(SIZES)))  # everything once


def test_order_is_torchs_and_reshuffled_every_epoch(folder: Path) -> None:
    ds = dataset(folder)
    torch.manual_seed(7)
    dali = fastload.DataLoader(ds, batch_size=4, shuffle=True, backend="dali")
    dali_epochs = [epoch_labels(dali) for _ in range(3)]
    torch.manual_seed(7)
    plain = torch.utils.data.DataLoader(range(len(ds)), batch_size=4, shuffle=True)
    # the same draws from the global stream per epoch as torch's own loader: same orders
    assert dali_epochs == [[b.tolist() for b in plain] for _ in range(3)]
    assert dali_epochs[0] != dali_epochs[1] != dali_epochs[2]


def test_same_seed_same_batches_and_the_users_random_stream_is_untouched(folder: Path) -> None:
    def run() -> tuple[list[torch.Tensor], float]:
        torch.manual_seed(3)
        loader = fastload.DataLoader(dataset(folder), batch_size=6, shuffle=True, backend="dali")
        images = [x for x, _ in loader]
        return images, torch.rand(1).item()

    (first, after_first), (second, after_second) = run(), run()
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    # the crops' draws come from the loader's own stream: the global one moved only by the
    # two seeds an epoch draws (base seed and sampler), as with torch's DataLoader
    torch.manual_seed(3)
    torch.empty((), dtype=torch.int64).random_()
    torch.empty((), dtype=torch.int64).random_()
    assert after_first == after_second == torch.rand(1).item()


def test_breaking_out_then_a_full_epoch(folder: Path) -> None:
    loader = fastload.DataLoader(dataset(folder), batch_size=4, shuffle=True, backend="dali")
    for i, _ in enumerate(loader):
        if i == 1:
            break
    seen = sorted(x for _, y in loader for x in y.tolist())
    assert seen == list(range(len(SIZES)))
    it = iter(loader)
    next(it)
    newer = iter(loader)  # replaces the first: one epoch at a time
    with pytest.raises(RuntimeError, match="replaced by a newer iter"):
        next(it)
    assert sorted(x for _, y in newer for x in y.tolist()) == list(range(len(SIZES)))


def test_labels_targets_and_target_transform(folder: Path) -> None:
    ds = dataset(folder, target_transform=lambda y: y * 10)
    (_, labels), *_ = fastload.DataLoader(ds, batch_size=8, backend="dali")
    assert labels.tolist() == [10 * i for i in range(8)]


def test_imagefolder_with_backend_dali_is_read_by_dali(tmp_path: Path) -> None:
    from fastload.synthetic import make_image_folder

    root = make_image_folder(tmp_path / "set", images=12, classes=3)
    ds = fastload.ImageFolder(root, transform=T.RandomResizedCrop(48), backend="dali")
    loader = fastload.DataLoader(ds, batch_size=5, num_workers=3)
    assert loader.plan.backend == "dali" and loader.executor.options.num_threads == 3
    labels = torch.cat([y for _, y in loader]).tolist()
    assert labels == ds.targets  # not shuffled: the dataset's own order
    image, target = ds[0]  # the per-sample path: DALI's CPU decoder
    assert image.shape == (3, 48, 48) and target == ds.targets[0]


def test_num_workers_and_prefetch_factor_map_to_dali(folder: Path) -> None:
    for workers, threads in ((0, 1), (1, 1), (4, 4)):
        loader = fastload.DataLoader(
            dataset(folder), batch_size=4, num_workers=workers, backend="dali"
        )
        assert loader.num_workers == workers and loader.executor.options.num_threads == threads
        assert loader.executor.options.prefetch == 2
    # worker-only options are accepted (DALI keeps its threads), prefetch_factor sets the depth
    loader = fastload.DataLoader(
        dataset(folder),
        batch_size=4,
        num_workers=2,
        prefetch_factor=3,
        persistent_workers=True,
        backend="dali",
    )
    assert loader.executor.options.prefetch == 3 and len(list(loader)) == 6
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):  # torch
        fastload.DataLoader(dataset(folder), batch_size=4, num_workers=-1, backend="dali")


def test_batch_transforms_run_on_the_delivered_batch(folder: Path) -> None:
    normalize = fastload.gpu.Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    loader = fastload.DataLoader(
        dataset(folder),
        batch_size=4,
        backend="dali",
        batch_transforms=normalize,
        channels_last=True,
    )
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    assert labels.tolist() == [0, 1, 2, 3]


def test_leading_flips_and_normalize_fold_into_dali(folder: Path) -> None:
    """Folded into crop_mirror_normalize, the ops give what they give on the uint8 batch.

    ``seeding="worker"``: the ops draw from their generators' running streams, as when they are
    called on the batches here (``seeding="sample"`` gives each batch its own stream).
    """
    G = fastload.gpu

    def ops() -> G.Compose:
        return G.Compose(
            [
                G.RandomHorizontalFlip(generator=torch.Generator().manual_seed(5)),
                G.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                G.RandomErasing(p=1.0, generator=torch.Generator().manual_seed(6)),
            ]
        )

    torch.manual_seed(1)
    folded = fastload.DataLoader(
        dataset(folder),
        batch_size=6,
        shuffle=True,
        backend="dali",
        batch_transforms=ops(),
        seeding="worker",
    )
    assert [type(op).__name__ for op in folded.executor.folded.flips] == ["RandomHorizontalFlip"]
    assert type(folded.executor.folded.normalize).__name__ == "Normalize"
    assert type(folded.executor.remaining_ops).__name__ == "RandomErasing"
    got = list(folded)
    torch.manual_seed(1)
    plain = fastload.DataLoader(
        dataset(folder), batch_size=6, shuffle=True, backend="dali", seeding="worker"
    )
    reference_ops = ops()
    for (images, labels), (raw, raw_labels) in zip(got, plain, strict=True):
        expected, _ = reference_ops(raw, raw_labels)
        assert images.dtype == torch.float32 and torch.equal(labels, raw_labels)
        torch.testing.assert_close(images, expected, atol=1e-5, rtol=1e-5)


def test_an_error_comes_when_its_batch_does(tmp_path: Path) -> None:
    ds, _ = fault_list(tmp_path)
    loader = fastload.DataLoader(ds, batch_sampler=[[0, 1], [2, 4], [5, 3], [7, 8]], backend="dali")
    it = iter(loader)
    assert [next(it)[1].tolist() for _ in range(2)] == [[0, 1], [2, 4]]
    with pytest.raises(fastload.ImageDecodeError, match=r"f03\.jpg"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


# ---------------------------------------------------------------- pixels


def cpu_reference(ds: fastload.ImageList, index: int, view_of) -> np.ndarray:
    data = Path(ds.path(index)).read_bytes()
    return backends.create("pillow").decode(data, plan=view_of, render=ds.transform_split.render)


@pytest.mark.parametrize(
    "transform",
    [
        T.Compose([T.Resize(64), T.CenterCrop(56)]),  # validation: a fractional box
        T.Compose([T.Resize((40, 70)), T.RandomHorizontalFlip(p=1.0)]),
        T.CenterCrop(200),  # larger than most images: zeros around them
        T.Compose([T.CenterCrop((100, 120)), T.Resize(50, interpolation="bicubic")]),
    ],
    ids=["val", "resize-flip", "pad", "crop-bicubic"],
)
def test_deterministic_pipelines_match_the_cpu_backends(folder: Path, transform) -> None:
    ds = dataset(folder, transform)
    reference = dataset(folder, transform, backend="pillow")
    images = torch.cat([x for x, _ in fastload.DataLoader(ds, batch_size=7, backend="dali")])
    for i in range(len(ds)):
        expected, _ = reference[i]
        assert images[i].shape == expected.shape
        assert mad(images[i], expected) <= 2.0, i


def test_random_crops_are_the_cpu_backends_crops_for_the_same_seed(folder: Path) -> None:
    """Each sample draws from its own seed (seeding="sample"), whoever decodes it: DALI's batches
    are the CPU backend's, crop for crop."""
    transform = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])

    def epoch(backend: str, seed: int) -> torch.Tensor:
        loader = fastload.DataLoader(
            dataset(folder, transform),
            batch_size=5,
            shuffle=True,
            backend=backend,
            generator=torch.Generator().manual_seed(seed),
        )
        return torch.cat([x for x, _ in loader])

    images, reference = epoch("dali", 11), epoch("pillow", 11)
    errors = [mad(a, b) for a, b in zip(images, reference, strict=True)]
    assert np.mean(errors) <= 1.5 and max(errors) <= 3.0
    other = [mad(a, b) for a, b in zip(epoch("dali", 12), reference, strict=True)]
    assert np.mean(other) > 5.0  # another seed: other crops


def test_random_resized_crops_are_fastloads_draws(folder: Path) -> None:
    """The crops are fastload's (torchvision's) draws, rendered by DALI; with seeding="worker",
    from one stream per epoch."""
    transform = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])
    ds = dataset(folder, transform)
    generator = torch.Generator().manual_seed(11)
    loader = fastload.DataLoader(
        ds, batch_size=5, backend="dali", generator=generator, seeding="worker"
    )
    images = torch.cat([x for x, _ in loader])
    # the loader seeds its crops' stream with one draw from its generator per epoch
    seed = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(11))
    errors = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed.item()))
        for i in range(len(ds)):
            w, h = SIZES[i]
            view = transform.plan(View.full(w, h))
            expected = cpu_reference(ds, i, lambda v, view=view: view)
            errors.append(mad(images[i], torch.from_numpy(expected).permute(2, 0, 1)))
    # DALI resizes from the full decode, the CPU backends from a DCT-reduced one when the crop
    # is 2x the output or more: strong shrinks differ a little more than plain decodes do
    assert np.mean(errors) <= 1.5 and max(errors) <= 3.0


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "rotated.jpg"
    path.write_bytes(with_orientation(photo(120, 80, seed=5), 6))
    ds = fastload.ImageList([path, path], [0, 1], T.Resize((60, 40)))
    images, _ = next(iter(fastload.DataLoader(ds, batch_size=2, backend="dali")))
    expected, _ = fastload.ImageList([path], [0], T.Resize((60, 40)), backend="pillow")[0]
    assert images.shape == (2, 3, 60, 40) and mad(images[0], expected) <= 2.0


# ---------------------------------------------------------------- faults


def fault_list(tmp_path: Path, **options) -> tuple[fastload.ImageList, dict[int, str]]:
    """Ten good files, with bad ones among them; returns the dataset and index -> kind."""
    good = jpeg_bytes(photo(96, 80, seed=1))
    kinds = {
        3: ("truncated", good[: len(good) // 2]),
        6: ("not an image", b"hello, world" * 20),
        # passes every header check (a frame header, an end marker) and only fails in DALI's
        # decoder: the image data is missing
        9: ("undecodable", good[: good.find(b"\xff\xda")] + b"\xff\xd9"),
    }
    paths, labels = [], []
    for i in range(13):
        path = tmp_path / f"f{i:02d}.jpg"
        path.write_bytes(kinds[i][1] if i in kinds else jpeg_bytes(photo(96, 80, seed=i)))
        paths.append(path)
        labels.append(i)
    return fastload.ImageList(paths, labels, T.RandomResizedCrop(24), **options), {
        i: kind for i, (kind, _) in kinds.items()
    }


def test_skip_drops_bad_files_warns_once_and_records_them(tmp_path: Path) -> None:
    ds, bad = fault_list(tmp_path, on_error="skip")
    loader = fastload.DataLoader(ds, batch_size=4, shuffle=True, backend="dali")
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seen = sorted(x for _, y in loader for x in y.tolist())
        assert seen == [i for i in range(13) if i not in bad]
        messages = [str(w.message) for w in caught if w.category is fastload.UnreadableImageWarning]
        assert messages == [
            "skipped 3 unreadable image(s) this epoch; "
            "see the dataset's bad_files for the paths and reasons"
        ]
    assert sorted(ds.bad_files) == sorted(ds.path(i) for i in bad)
    assert "truncated JPEG" in ds.bad_files[ds.path(3)]
    assert "DALI could not decode it" in ds.bad_files[ds.path(9)]


@pytest.mark.parametrize("index", [3, 9])
def test_raise_names_the_file_the_backend_and_the_reason(tmp_path: Path, index: int) -> None:
    ds, bad = fault_list(tmp_path)
    chosen = [i for i in range(index + 2) if i == index or i not in bad]  # one bad file
    ds = fastload.ImageList([ds.path(i) for i in chosen], chosen, T.RandomResizedCrop(24))
    loader = fastload.DataLoader(ds, batch_size=4, backend="dali")
    with pytest.raises(fastload.ImageDecodeError) as info:
        list(loader)
    message = str(info.value)
    path = str(tmp_path / f"f{index:02d}.jpg")
    assert repr(path) in message and "dali backend" in message
    assert ("truncated JPEG" if index == 3 else "DALI could not decode it") in message
    # the failure does not poison the loader: a dataset without the bad file runs again after
    good = [i for i in chosen if i != index]
    clean = fastload.ImageList(
        [tmp_path / f"f{i:02d}.jpg" for i in good], good, T.RandomResizedCrop(24)
    )
    assert (
        sorted(
            torch.cat(
                [y for _, y in fastload.DataLoader(clean, batch_size=4, backend="dali")]
            ).tolist()
        )
        == good
    )


def test_a_batch_of_only_bad_files_is_left_out(tmp_path: Path) -> None:
    ds, _ = fault_list(tmp_path, on_error="skip")
    order = [[3, 6, 9], [0, 1]]  # the first batch has nothing readable
    loader = fastload.DataLoader(ds, batch_sampler=order, backend="dali")
    with pytest.warns(fastload.UnreadableImageWarning, match="skipped 3"):
        assert epoch_labels(loader) == [[0, 1]]


# ---------------------------------------------------------------- refusals


def test_refusals_name_the_problem(folder: Path) -> None:
    ds = dataset(folder)
    with pytest.raises(
        ValueError, match="backend='jpeg2000' is not valid; valid: None, 'auto', 'dali'"
    ):
        fastload.DataLoader(ds, batch_size=4, backend="jpeg2000")
    with pytest.raises(
        ValueError, match=r"must be a fastload\.ImageFolder or fastload\.ImageList, got list"
    ):
        fastload.DataLoader([1, 2, 3], batch_size=2, backend="dali")
    with pytest.raises(ValueError, match=r"collate_fn=.* would not run"):
        fastload.DataLoader(ds, batch_size=4, backend="dali", collate_fn=lambda b: b)
    with pytest.raises(ValueError, match="batch_size=None is not supported"):
        fastload.DataLoader(ds, batch_size=None, backend="dali")
    unknown = T.Compose([T.RandomResizedCrop(32), lambda x: x.flip(-1)])
    with pytest.raises(ValueError, match="the dali backend cannot run <function"):
        fastload.DataLoader(dataset(folder, unknown), batch_size=4, backend="dali")
    import torchvision.transforms as tvT

    with pytest.raises(ValueError, match="cannot run RandomResizedCrop\\(size=\\(32, 32\\)"):
        fastload.DataLoader(
            dataset(folder, tvT.RandomResizedCrop(32)), batch_size=4, backend="dali"
        )


def test_images_of_different_sizes_need_a_transform(folder: Path) -> None:
    loader = fastload.DataLoader(dataset(folder, None), batch_size=4, backend="dali")
    with pytest.raises(ValueError, match=r"images of different sizes .* cannot form a batch"):
        next(iter(loader))


def test_missing_dali_names_the_install_command(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import fails as if not installed
    with pytest.raises(fastload.MissingDependencyError, match='pip install "fastload\\[dali\\]"'):
        fastload.DataLoader(dataset(folder), batch_size=4, backend="dali")


_FORK_AFTER_DALI = textwrap.dedent(
    """
    import gc, io, os, signal, sys, time
    from PIL import Image
    from fastload.backends.dali import DaliBackend

    out = io.BytesIO()
    Image.new("RGB", (32, 24), (10, 200, 30)).save(out, "JPEG")
    gc.disable()

    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage
    garbage.backend = DaliBackend()
    garbage.backend.decode(out.getvalue())  # a pipeline with live threads
    del garbage  # in a reference cycle: only the garbage collector frees it
    pid = os.fork()  # as a DataLoader worker is forked
    if pid == 0:
        gc.collect()
        os._exit(0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            print("child exited")
            sys.exit(0)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    print("child hung")
    sys.exit(1)
    """
)


def test_fed_files_live_until_their_batch_is_collected(folder: Path) -> None:
    """DALI reads the fed arrays in place: the engine keeps each batch's inputs until that batch
    is collected, and lets them go then."""
    import gc
    import weakref

    from fastload.backends.dali import DaliEngine
    from fastload.backends.executor import ExecutorOptions, Folded, translate
    from fastload.pixels.image import probe

    transform = T.Resize((24, 32))
    engine = DaliEngine(
        ExecutorOptions(torch.device("cpu"), num_threads=1, batch_size=3),
        translate(dataset(folder, transform).transform_split, "dali"),
        Folded(),
    )
    paths = sorted(folder.glob("img_*.jpg"))

    def feed(batch: list[Path]) -> list[weakref.ref]:
        data = [np.frombuffer(bytearray(p.read_bytes()), np.uint8) for p in batch]
        infos = [probe(p.read_bytes()) for p in batch]
        sizes = [(info.width, info.height) for info in infos]
        views = [transform.plan(View.full(w, h)) for w, h in sizes]
        engine.feed(engine.inputs(data, views, sizes, infos))
        return [weakref.ref(a) for a in data]

    first, second = feed(paths[:3]), feed(paths[3:6])
    gc.collect()
    assert all(ref() is not None for ref in first + second)  # queued: kept for DALI
    # the same batches through the loader (whose engine feeds its own reads)
    loader = fastload.DataLoader(dataset(folder, transform), batch_size=3, backend="dali")
    for refs, (expected, _) in zip((first, second), loader, strict=False):
        images = engine.collect()
        gc.collect()
        assert all(ref() is None for ref in refs)  # collected: let go
        assert torch.equal(images, expected)
    engine.discard()


def test_a_forked_worker_does_not_hang_on_an_inherited_pipeline(tmp_path: Path) -> None:
    """A worker forked after DALI ran must not wait forever in a pipeline's destructor.

    Seen in CI: a DataLoader worker's garbage collector finalized a DALI pipeline copied from
    the parent, and the destructor waited for threads that do not exist in a forked child.
    """
    script = tmp_path / "fork.py"
    script.write_text(_FORK_AFTER_DALI)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "child exited" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- torch.distributed

_RANK = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    import fastload
    from fastload import transforms as T
    from pathlib import Path

    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    paths = sorted(folder.glob("img_*.jpg"))
    ds = fastload.ImageList(paths, list(range(len(paths))), T.RandomResizedCrop(16))
    loader = fastload.DataLoader(ds, batch_size=4, shuffle=True, backend="dali")
    epochs = [[y for _, labels in loader for y in labels.tolist()] for _ in range(2)]
    out.write_text(json.dumps({"len": len(loader), "epochs": epochs}))
    dist.destroy_process_group()
    # only the interpreter's teardown is left, where torch's gloo and autograd threads can
    # still abort a rank whose work is done (pytorch/pytorch#190489): skip it
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
    """
)


def test_two_ranks_read_disjoint_equal_shards(folder: Path, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    run_ranks(script, lambda r: [str(folder), str(tmp_path / f"rank{r}.json")])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    n = len(SIZES)
    per_rank = -(-n // 2)  # DistributedSampler: ceil(n / world), padded with repeats
    assert [r["len"] for r in ranks] == [-(-per_rank // 4)] * 2
    for epoch in range(2):
        a, b = (r["epochs"][epoch] for r in ranks)
        assert len(a) == len(b) == per_rank
        assert set(a) | set(b) == set(range(n))
        assert len(set(a) & set(b)) == 2 * per_rank - n  # only the padding repeats
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # reshuffled per epoch


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_device_decodes_with_nvjpeg_and_matches_cpu_mode(folder: Path) -> None:
    transform = T.Compose([T.Resize(64), T.CenterCrop(56)])
    gpu = fastload.DataLoader(
        dataset(folder, transform), batch_size=8, backend="dali", device="cuda"
    )
    cpu = fastload.DataLoader(dataset(folder, transform), batch_size=8, backend="dali")
    for (xg, yg), (xc, yc) in zip(gpu, cpu, strict=True):
        assert xg.device.type == "cuda" and yg.device.type == "cuda"
        assert torch.equal(yg.cpu(), yc)
        assert mad(xg.cpu(), xc) <= 3.0  # nvJPEG's upsampling differs a little from libjpeg's


def test_the_dali_modules_older_names_still_answer() -> None:
    from fastload import gpu
    from fastload.backends import dali

    folded, rest = dali.fold_batch_ops(
        gpu.Compose([gpu.RandomHorizontalFlip(), gpu.Normalize([0.5], [0.5]), gpu.GaussianBlur(3)])
    )
    assert len(folded.flips) == 1 and folded.normalize is not None
    assert type(rest).__name__ == "GaussianBlur"
    translation = dali.translate(T.Compose([T.Resize(10), T.CenterCrop(8)]))
    assert translation.may_pad and translation.plan is not None
    assert dali.DaliOptions is fastload.backends.executor.ExecutorOptions
