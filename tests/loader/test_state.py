"""``fastload.DataLoader.state_dict`` / ``load_state_dict`` and per-sample seeding.

Every check compares an interrupted-and-resumed run with the uninterrupted one, batch for batch:
the same labels in the same order and, for fastload pipelines, the same pixels.
"""

from __future__ import annotations

import functools
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from images import jpeg_bytes, photo

import fastload
from fastload import backends, gpu
from fastload import transforms as T

N_IMAGES = 23  # batches of 4 leave a short last one
BATCH = 4
PER_EPOCH = (N_IMAGES + BATCH - 1) // BATCH


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("state")
    for k in range(N_IMAGES):
        cls = root / f"c{k % 3}"
        cls.mkdir(exist_ok=True)
        (cls / f"{k:02d}.jpg").write_bytes(jpeg_bytes(photo(96 + 4 * k, 80, seed=k)))
    return root


def augment() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])


def make(folder: Path, *, seed: int | None = 1, backend: str | None = None, **options):
    dataset = fastload.ImageFolder(folder, augment(), on_error=options.pop("on_error", "raise"))
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return fastload.DataLoader(
        dataset,
        batch_size=BATCH,
        shuffle=True,
        generator=generator,
        backend=backend,
        **options,
    )


def run(loader, epochs: int, *, stop_after: int | None = None):
    """Batches of ``epochs`` epochs; with ``stop_after``, stop after that many batches in all
    and return the loader's state too."""
    got = []
    for _ in range(epochs):
        for images, labels in loader:
            got.append((images.clone(), labels.clone()))
            if stop_after is not None and len(got) == stop_after:
                return got, loader.state_dict()
    return got, None


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(a, b, strict=True)
    )


def saved(state) -> dict:
    """The state through torch.save and torch.load(weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def resume(folder: Path, stop_after: int, epochs: int = 2, **options):
    """Uninterrupted, and interrupted then resumed by a new loader built the same way."""
    whole, _ = run(make(folder, **options), epochs)
    first, state = run(make(folder, **options), epochs, stop_after=stop_after)
    loader = make(folder, **options)
    loader.load_state_dict(saved(state))
    done = stop_after // PER_EPOCH  # epochs whose every batch the first run had
    rest, _ = run(loader, epochs - done)
    return whole, first + rest


# ---------------------------------------------------------------- resuming, every backend


@pytest.mark.parametrize("name", backends.names())
@pytest.mark.parametrize("stop_after", [3, PER_EPOCH, PER_EPOCH + 2])
def test_resumed_epoch_equals_the_uninterrupted_one(
    folder: Path, name: str, stop_after: int, require_backend
) -> None:
    require_backend(name)
    workers = 0 if name in backends.names("executor") else 2
    whole, resumed = resume(folder, stop_after, backend=name, num_workers=workers)
    assert len(whole) == 2 * PER_EPOCH
    assert same(whole, resumed)


@pytest.mark.parametrize("options", [{"persistent_workers": True}, {"seed": None}], ids=str)
def test_resume_with_persistent_workers_or_the_global_stream(folder: Path, options) -> None:
    torch.manual_seed(5)  # with seed=None the loader draws from torch's global stream
    whole, _ = run(make(folder, num_workers=2, **options), 3)
    torch.manual_seed(5)
    first, state = run(make(folder, num_workers=2, **options), 3, stop_after=PER_EPOCH + 2)
    global_after_stop = torch.get_rng_state()
    torch.manual_seed(99)  # a resumed process: its global stream is the trainer's to restore
    loader = make(folder, num_workers=2, **options)
    torch.set_rng_state(global_after_stop)
    loader.load_state_dict(saved(state))
    rest, _ = run(loader, 2)
    assert same(whole, first + rest)


def test_state_between_epochs_resumes_at_the_next_one(folder: Path) -> None:
    loader = make(folder)
    run(loader, 1)
    state = loader.state_dict()
    assert state["epochs"]["in_epoch"] is False
    following, _ = run(loader, 1)
    again = make(folder, seed=7)  # another generator: the state's replaces it
    again.load_state_dict(saved(state))
    assert same(run(again, 1)[0], following)


def test_state_during_an_epoch_is_not_changed_by_loading_it_twice(folder: Path) -> None:
    _, state = run(make(folder), 1, stop_after=2)
    loader = make(folder)
    loader.load_state_dict(state)
    again = loader.state_dict()  # not started yet: the same point
    assert again["epochs"]["batches"] == 2 and again["epochs"]["in_epoch"]
    assert torch.equal(again["epochs"]["sampler_state"], state["epochs"]["sampler_state"])


def test_resume_in_a_new_process(folder: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, torch, fastload
        from fastload import transforms as T
        ds = fastload.ImageFolder({str(folder)!r}, T.Compose([T.RandomResizedCrop(32),
                                  T.RandomHorizontalFlip()]))
        loader = fastload.DataLoader(ds, batch_size={BATCH}, shuffle=True, num_workers=2,
                                     generator=torch.Generator().manual_seed(1))
        if sys.argv[1] == "resume":
            loader.load_state_dict(torch.load(sys.argv[2], weights_only=True))
        out = []
        for i, (x, y) in enumerate(loader):
            out.append((x, y))
            if sys.argv[1] == "stop" and i == 2:
                torch.save(loader.state_dict(), sys.argv[2])
                break
        torch.save(out, sys.argv[3])
        """
    )
    (tmp_path / "s.py").write_text(script)
    state, part, rest = tmp_path / "state.pt", tmp_path / "a.pt", tmp_path / "b.pt"
    for mode, out in (("stop", part), ("resume", rest)):
        subprocess.run(
            [sys.executable, str(tmp_path / "s.py"), mode, str(state), str(out)],
            check=True,
            timeout=120,
        )
    whole, _ = run(make(folder, num_workers=2), 1)
    assert same(whole, torch.load(part) + torch.load(rest))


# ---------------------------------------------------------------- per-sample seeding


@pytest.mark.parametrize("workers", [1, 2])
def test_num_workers_does_not_change_the_batches(folder: Path, workers: int) -> None:
    want, _ = run(make(folder, num_workers=0), 2)
    got, _ = run(make(folder, num_workers=workers), 2)
    assert same(want, got)


def batch_ops(generator: int | None = None) -> gpu.Compose:
    """Random batch ops: a flip (with its own generator, or torch's) and a colour jitter."""
    own = None if generator is None else torch.Generator().manual_seed(generator)
    return gpu.Compose([gpu.RandomHorizontalFlip(generator=own), gpu.ColorJitter(brightness=0.5)])


@pytest.mark.parametrize("name", backends.names())
def test_batch_ops_resume_with_the_same_draws(folder: Path, name: str, require_backend) -> None:
    require_backend(name)
    workers = 0 if name in backends.names("executor") else 2
    whole, _ = run(make(folder, backend=name, num_workers=workers, batch_transforms=batch_ops()), 2)
    first, state = run(
        make(folder, backend=name, num_workers=workers, batch_transforms=batch_ops()),
        2,
        stop_after=PER_EPOCH + 2,
    )
    loader = make(folder, backend=name, num_workers=workers, batch_transforms=batch_ops())
    loader.load_state_dict(saved(state))
    rest, _ = run(loader, 1)
    assert same(whole, first + rest)
    plain, _ = run(make(folder, backend=name, num_workers=workers), 2)
    assert not same(plain, whole)  # the ops did draw something


@pytest.mark.parametrize("generator", [None, 3], ids=["torch's stream", "own generator"])
def test_batch_ops_draw_the_same_for_any_num_workers(folder: Path, generator) -> None:
    want, _ = run(make(folder, num_workers=0, batch_transforms=batch_ops(generator)), 2)
    for workers in (1, 2):
        got, _ = run(make(folder, num_workers=workers, batch_transforms=batch_ops(generator)), 2)
        assert same(want, got), workers

    # each batch draws apart: were every batch seeded alike, all would flip the same samples
    own = None if generator is None else torch.Generator().manual_seed(generator)
    before = None if own is None else own.get_state()
    flipped = [x for x, _ in make(folder, batch_transforms=gpu.RandomHorizontalFlip(generator=own))]
    plain = [x for x, _ in make(folder)]
    patterns = set()
    for x, y in zip(flipped[:-1], plain[:-1], strict=True):  # the full batches
        pairs = list(zip(x, y, strict=True))
        assert all(torch.equal(a, b) or torch.equal(a, b.flip(-1)) for a, b in pairs)
        patterns.add(tuple(not torch.equal(a, b) for a, b in pairs))
    assert len(patterns) > 1
    if own is not None:  # the user's generator is lent to each batch, then put back
        assert torch.equal(own.get_state(), before)


@pytest.mark.gpu
def test_batch_ops_on_the_device_resume_and_ignore_num_workers(folder: Path) -> None:
    def loader(workers: int):
        return make(folder, num_workers=workers, device="cuda", batch_transforms=batch_ops())

    want, _ = run(loader(0), 2)
    got, _ = run(loader(2), 2)
    assert same(want, got)
    first, state = run(loader(2), 2, stop_after=PER_EPOCH + 2)
    again = loader(2)
    again.load_state_dict(saved(state))
    rest, _ = run(again, 1)
    assert same(want, first + rest)


def test_device_stage_applies_each_batch_under_its_own_seed() -> None:
    # the CUDA path's parts, without CUDA: tagged in the worker, untagged, staged after the copy
    from torch.utils.data import default_collate

    from fastload.gpu.stage import BatchStage, DeviceStage, SeedTag
    from fastload.sampling import SeededSamples

    stage = BatchStage(batch_ops(), channels_last=False)
    samples = [
        SeededSamples(
            [(torch.full((3, 4, 4), 10 * k + j, dtype=torch.uint8), j) for j in range(4)], k
        )
        for k in range(3)
    ]
    tagged = [SeedTag(default_collate, stage)(batch) for batch in samples]
    device = DeviceStage(stage)
    got = [device(batch) for batch in device.untag(iter(tagged))]
    want = [stage(default_collate(batch), seed=batch.seed) for batch in samples]
    for (x, y), (u, v) in zip(got, want, strict=True):
        assert torch.equal(x, u) and torch.equal(y, v)


def test_every_backend_draws_the_same_crops_for_the_same_seed(folder: Path, require_backend):
    want = torch.cat([x for x, _ in make(folder, backend="pillow")])
    for name in backends.names():
        require_backend(name)
        got = torch.cat([x for x, _ in make(folder, backend=name)])
        error = (got.float() - want.float()).abs().mean(dim=(1, 2, 3))
        assert error.mean() < 2.0 and error.max() < 6.0, name  # decoders differ a little


def test_epochs_and_seeds_give_other_crops(folder: Path) -> None:
    first, _ = run(make(folder), 2)
    one = torch.cat([x for x, _ in first[:PER_EPOCH]]).float()
    two = torch.cat([x for x, _ in first[PER_EPOCH:]]).float()
    other = torch.cat([x for x, _ in make(folder, seed=2)]).float()
    assert not torch.equal(one, two)  # a new epoch draws new crops
    assert not torch.equal(one, other)


def test_seeding_worker_is_torchs_behaviour(folder: Path) -> None:
    dataset = fastload.ImageFolder(folder, augment())

    def epoch(loader_class, **options):
        torch.manual_seed(3)
        loader = loader_class(
            dataset,
            batch_size=BATCH,
            shuffle=True,
            num_workers=2,
            generator=torch.Generator().manual_seed(1),
            **options,
        )
        return [(x, y) for x, y in loader]

    torch_batches = epoch(torch.utils.data.DataLoader)
    assert same(epoch(fastload.DataLoader, seeding="worker"), torch_batches)
    ours = epoch(fastload.DataLoader)
    assert [y.tolist() for _, y in ours] == [y.tolist() for _, y in torch_batches]
    assert not same(ours, torch_batches)  # the same samples, their own draws


class NumpyNoise:
    """An op of one's own that draws from numpy's global stream (as albumentations' do)."""

    def __call__(self, image):
        import numpy as np

        return image // 2 + int(np.random.randint(0, 50))


def test_per_sample_seeding_seeds_numpys_stream_too(folder: Path) -> None:
    """An op run as written that draws from numpy gives the same batches for any worker
    count under seeding='sample', and the caller's numpy stream is left where it was."""
    import numpy as np

    dataset = fastload.ImageFolder(folder, T.Compose([T.RandomResizedCrop(32), NumpyNoise()]))

    def epoch(workers: int) -> torch.Tensor:
        loader = fastload.DataLoader(
            dataset,
            batch_size=BATCH,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(1),
            seeding="sample",
        )
        return torch.cat([x for x, _ in loader])

    np.random.seed(7)
    alone = epoch(0)
    assert np.random.randint(0, 2**31) == np.random.RandomState(7).randint(0, 2**31)
    assert torch.equal(epoch(2), alone)
    assert len({int(x.max()) for x in alone}) > 3  # the noise differs from sample to sample


def test_bad_seeding_is_refused(folder: Path) -> None:
    valid = r"valid: 'auto', 'sample', 'worker'"
    with pytest.raises(ValueError, match=rf"seeding='per-sample' is not valid; {valid}"):
        make(folder, seeding="per-sample")


def test_the_global_stream_is_untouched_by_loading(folder: Path) -> None:
    torch.manual_seed(0)
    list(make(folder, num_workers=0))
    after_loading = torch.rand(3)
    torch.manual_seed(0)
    list(
        torch.utils.data.DataLoader(
            range(N_IMAGES),
            batch_size=BATCH,
            shuffle=True,
            generator=torch.Generator().manual_seed(1),
        )
    )
    assert torch.equal(torch.rand(3), after_loading)  # the per-sample draws put it back


# ---------------------------------------------------------------- what the state holds


def test_state_holds_the_skipped_files(folder: Path, tmp_path: Path) -> None:
    root = tmp_path / "broken"
    for path in folder.rglob("*.jpg"):
        target = root / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    bad = sorted(root.rglob("*.jpg"))[4]
    bad.write_bytes(b"not a jpeg")
    loader = make(root, on_error="skip", num_workers=0)
    _, state = run(loader, 1, stop_after=PER_EPOCH)  # every batch, before the epoch's warning
    assert state["bad_files"] == {str(bad): loader.dataset.bad_files[str(bad)]}
    again = make(root, on_error="skip")
    again.load_state_dict(saved(state))
    assert str(bad) in again.dataset.bad_files
    assert state["num_workers"] == 0


def test_autotuned_worker_count_is_restored(folder: Path, monkeypatch, tmp_path: Path) -> None:
    from fastload.loader import core

    monkeypatch.setenv("FASTLOAD_CACHE_DIR", str(tmp_path))
    # the real search on a short budget: what is restored is its answer, whatever it is
    monkeypatch.setattr(core, "autotune", functools.partial(core.autotune, budget=3.0))
    loader = make(folder, num_workers="auto")
    _, state = run(loader, 1, stop_after=1)
    state = saved(state)
    state["num_workers"] = loader.num_workers + 1  # as if another machine had chosen
    again = make(folder, num_workers="auto")
    again.load_state_dict(state)
    assert again.num_workers == loader.num_workers + 1
    fixed = make(folder, num_workers=0)
    fixed.load_state_dict(state)
    assert fixed.num_workers == 0  # a count the user gave is kept


def test_whole_batch_skipped_is_counted(folder: Path, tmp_path: Path) -> None:
    root = tmp_path / "all-bad"
    (root / "a").mkdir(parents=True)
    for k in range(8):
        data = b"garbage" if k < 4 else jpeg_bytes(photo(64, 48, seed=k))
        (root / "a" / f"{k}.jpg").write_bytes(data)

    def loader():
        ds = fastload.ImageFolder(root, augment(), on_error="skip")
        # the first batch is all garbage
        return fastload.DataLoader(ds, batch_size=4, generator=torch.Generator().manual_seed(3))

    with pytest.warns(fastload.UnreadableImageWarning):
        whole = [(x, y) for x, y in loader()]
    assert len(whole) == 1
    first = loader()
    it = iter(first)
    with pytest.warns(fastload.UnreadableImageWarning):
        got = next(it)
        state = first.state_dict()
        assert next(it, None) is None
    assert state["epochs"]["in_epoch"] is False  # both batches are behind the user
    assert torch.equal(got[0], whole[0][0])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 5}, "batch_size 4 in the state, 5 here"),
        ({"backend": "opencv"}, "backend"),
        ({"drop_last": True}, "drop_last False in the state, True here"),
        ({"subset": True}, "dataset length 23 in the state, 20 here"),
        ({"seed": None}, "generator 'given' in the state"),
    ],
    ids=["batch_size", "backend", "drop_last", "length", "generator"],
)
def test_a_state_of_another_loader_is_refused(folder: Path, change: dict, named: str) -> None:
    _, state = run(make(folder, backend="pillow"), 1, stop_after=2)
    options: dict = {"backend": "pillow", "seed": 1}
    subset = change.pop("subset", False)
    options.update(change)
    batch_size = options.pop("batch_size", BATCH)
    dataset = fastload.ImageFolder(folder, augment())
    if subset:
        dataset = fastload.ImageList(
            [dataset.path(i) for i in range(20)], dataset.targets[:20], augment()
        )
    seed = options.pop("seed")
    loader = fastload.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        generator=None if seed is None else torch.Generator().manual_seed(seed),
        **options,
    )
    with pytest.raises(ValueError, match="of a different loader") as caught:
        loader.load_state_dict(state)
    assert named in str(caught.value)


def test_not_a_state_and_iterable_datasets_are_refused(folder: Path) -> None:
    with pytest.raises(ValueError, match=r"not a fastload\.DataLoader state"):
        make(folder).load_state_dict({"epoch": 3})

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(TypeError, match="IterableDataset"):
        fastload.DataLoader(Stream()).state_dict()


def test_distributed_sampler_epoch_is_restored(folder: Path) -> None:
    dataset = fastload.ImageFolder(folder, augment())

    def loader():
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1, seed=4)
        return fastload.DataLoader(dataset, batch_size=BATCH, sampler=sampler), sampler

    whole_loader, sampler = loader()
    sampler.set_epoch(3)
    torch.manual_seed(0)  # no generator: the epoch's seed comes from torch's global stream
    whole = [(x, y) for x, y in whole_loader]
    first_loader, sampler = loader()
    sampler.set_epoch(3)
    torch.manual_seed(0)
    it = iter(first_loader)
    first = [next(it)]
    state = first_loader.state_dict()
    again, sampler = loader()  # a resumed run that has not set the epoch yet
    again.load_state_dict(saved(state))
    assert sampler.epoch == 3
    assert same(whole, first + [(x, y) for x, y in again])


def test_sample_key_is_an_int_with_a_seed() -> None:
    from fastload.sampling import KeyedBatch, SampleKey

    key = SampleKey(7, 123)
    assert key == 7 and np.arange(10)[key] == 7 and key.seed == 123
    import pickle

    batch = pickle.loads(pickle.dumps(KeyedBatch([key, SampleKey(2, 5)], 99)))
    assert [(int(k), k.seed) for k in batch] == [(7, 123), (2, 5)] and batch.seed == 99
