"""``worker_type="thread"``: the workers as threads give the worker processes' batches, resume,
skip and fail as they do, and refuse what threads cannot run with the same meaning."""

from __future__ import annotations

import json
import random
import sys
import threading
from pathlib import Path

import pytest
import torch
import torchvision
from torch.utils.data import default_collate

import fastload
from fastload import gpu
from fastload import transforms as T
from fastload.datasets import ImageDataset
from fastload.synthetic import make_image_folder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("threads"), images=30, classes=3)


def _dataset(folder: Path, **options: object) -> fastload.ImageFolder:
    geometry = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
    return fastload.ImageFolder(folder, geometry, **options)


def _loader(
    dataset: object, *, kind: str, workers: int, shuffle: bool = True, **options: object
) -> fastload.DataLoader:
    return fastload.DataLoader(
        dataset,
        batch_size=4,
        shuffle=shuffle,
        num_workers=workers,
        worker_type=kind,
        generator=torch.Generator().manual_seed(5),
        **options,
    )


def _epoch(loader: fastload.DataLoader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x, y) for x, y in loader]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_give_the_worker_processes_batches(folder: Path, threads: int) -> None:
    """uint8 crops, and float32 normalized by batch ops, over two epochs (persistent or not)."""
    dataset = _dataset(folder)
    for options in ({}, {"batch_transforms": gpu.Normalize(MEAN, STD)}):
        for persistent in (False, True):
            processes = _loader(
                dataset, kind="process", workers=2, persistent_workers=persistent, **options
            )
            threaded = _loader(
                dataset, kind="thread", workers=threads, persistent_workers=persistent, **options
            )
            want = [_epoch(processes), _epoch(processes)]
            assert want[0][0][0].dtype == (torch.float32 if options else torch.uint8)
            assert not _same(want[0], want[1])  # the second epoch draws again
            assert _same(_epoch(threaded), want[0]), (options, persistent)
            assert _same(_epoch(threaded), want[1]), (options, persistent)


def test_a_resumed_epoch_gives_the_rest_of_the_same_batches(folder: Path) -> None:
    dataset = _dataset(folder)
    whole = _epoch(_loader(dataset, kind="thread", workers=2))
    first = _loader(dataset, kind="thread", workers=2)
    batches = iter(first)
    head = [next(batches) for _ in range(3)]
    state = first.state_dict()
    again = _loader(dataset, kind="thread", workers=2)
    again.load_state_dict(state)
    assert _same(head + _epoch(again), whole)


def test_unreadable_files_are_skipped_as_the_processes_skip_them(
    folder: Path, tmp_path: Path
) -> None:
    broken = make_image_folder(tmp_path / "broken", images=12, classes=2)
    victim = sorted(broken.rglob("*.jpg"))[3]
    victim.write_bytes(victim.read_bytes()[:200])  # a truncated JPEG
    dataset = _dataset(broken, on_error="skip")
    with pytest.warns(UserWarning, match="skipped 1"):
        want = _epoch(_loader(dataset, kind="process", workers=2))
    with pytest.warns(UserWarning, match="skipped 1"):
        got = _epoch(_loader(dataset, kind="thread", workers=2))
    assert _same(got, want) and sum(len(y) for _, y in got) == 11


class _Refuses:
    """A user's transform that fails on one file."""

    def __call__(self, image: object) -> object:
        raise KeyError("the user's own error")


def test_an_exception_in_a_users_transform_keeps_its_type(folder: Path) -> None:
    dataset = fastload.ImageFolder(folder, T.Compose([T.Resize((16, 16)), _Refuses()]))
    loader = _loader(dataset, kind="thread", workers=2)
    with pytest.raises(KeyError, match="the user's own error") as caught:
        next(iter(loader))
    if sys.version_info >= (3, 11):
        assert "in a fastload worker thread, reading samples [" in str(caught.value.__notes__)


class _Waits:
    """A dataset whose samples wait until released (a stalled read)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sample_keys = True  # takes per-sample seeds, as fastload's datasets do

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        self.release.wait()
        return torch.zeros(2)


def test_timeout_is_raised_as_torchs_when_a_batch_does_not_come() -> None:
    dataset = _Waits()
    loader = fastload.DataLoader(
        dataset, batch_size=2, num_workers=2, worker_type="thread", timeout=0.2, seeding="sample"
    )
    try:
        with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.2 seconds"):
            next(iter(loader))
    finally:
        dataset.release.set()  # lets the stalled threads end


class _SlowDraws:
    """A transform run as written that draws from torch's global stream, slowly, and counts
    the samples being made at any moment."""

    def __init__(self) -> None:
        self.making = 0
        self.lock = threading.Lock()

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        import time

        with self.lock:
            self.making += 1
        time.sleep(0.01)  # long enough that a batch is still being made after a break
        shift = int(torch.randint(0, 9, ()))
        with self.lock:
            self.making -= 1
        return image.roll(shift, dims=-1)


def test_an_epoch_left_early_stops_its_threads_before_the_consumer_goes_on(folder: Path) -> None:
    """Leaving the loop (as torch's processes are shut down when their iterator goes) waits for
    the batches being made and drops the rest: no thread draws afterwards, so the consumer's
    own seeding right after is not undone by a sample's streams swapped in and out."""
    slow = _SlowDraws()
    dataset = fastload.ImageFolder(folder, T.Compose([T.RandomResizedCrop(32), slow]))
    loader = _loader(dataset, kind="thread", workers=2)
    before = set(threading.enumerate())
    for _ in loader:
        break
    assert slow.making == 0
    torch.manual_seed(7)
    assert torch.equal(torch.rand(8), torch.rand(8, generator=torch.Generator().manual_seed(7)))
    started = [t for t in threading.enumerate() if t not in before]
    assert not [t.name for t in started if t.name.startswith("fastload-worker")]


LEFT_AT_EXIT = """
import torch, fastload

class Zeros(torch.utils.data.Dataset):
    sample_keys = True
    def __len__(self):
        return 64
    def __getitem__(self, index):
        return torch.zeros(3, 8, 8), int(index)

batches = iter(fastload.DataLoader(Zeros(), batch_size=4, num_workers=2, worker_type="thread"))
next(batches)
print("read")
"""


def test_a_pass_still_open_when_the_script_ends_exits_quietly() -> None:
    """A script that ends holding a pass's iterator (a loop left by ``break``, at module level)
    exits with nothing on stderr, as it does with torch's worker processes: the iterator is
    collected as the interpreter takes its modules down, after their names are gone."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", LEFT_AT_EXIT], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "read\n", "")


def test_what_threads_cannot_run_the_same_is_refused_by_name(folder: Path) -> None:
    dataset = _dataset(folder)

    def refused(data: object = dataset, **options: object) -> str:
        with pytest.raises(ValueError) as caught:
            _ = _loader(data, kind="thread", workers=2, **options).plan
        return str(caught.value)

    assert "worker_init_fn" in refused(worker_init_fn=lambda worker: None)
    assert "executor" in refused(backend="dali")
    stock = torchvision.datasets.ImageFolder(folder, torchvision.transforms.PILToTensor())
    assert "streams the threads share" in refused(stock)  # torch's per-worker streams

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    assert "get_worker_info" in refused(Stream(), shuffle=False)


def test_a_swapped_torchvision_dataset_runs_on_threads_with_per_sample_seeds(
    folder: Path,
) -> None:
    import torchvision.transforms as TV

    pipeline = TV.Compose([TV.RandomResizedCrop(32), TV.PILToTensor()])
    stock = torchvision.datasets.ImageFolder(folder, pipeline)
    options = {"accelerate": True, "seeding": "sample"}
    want = _epoch(_loader(stock, kind="process", workers=2, **options))
    loader = _loader(stock, kind="thread", workers=2, **options)
    assert _same(_epoch(loader), want)
    assert "num_workers=2 (threads of this process)" in fastload.explain(loader)


class _Jitter:
    """A transform of one's own, run as written, drawing from all three global streams."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        import random

        import numpy as np

        shift = int(torch.randint(0, 9, ())) + random.randrange(9) + int(np.random.randint(9))
        return image.roll(shift, dims=-1)


def _label_noise(label: int) -> tuple[int, float]:
    import random

    return label, random.random()


def test_draws_of_ops_run_as_written_are_each_samples_own_on_any_thread(folder: Path) -> None:
    """torchvision's random ops as written, a transform of one's own drawing from torch's,
    Python's and numpy's global streams, a random target transform and random batch ops: the
    threads give the processes' batches, and leave the process's own streams as they were."""
    import random

    import numpy as np
    import torchvision.transforms as TV

    geometry = T.Compose([T.RandomResizedCrop(32), _Jitter()])
    pil = TV.Compose([TV.RandomResizedCrop(24), TV.RandomHorizontalFlip(), TV.PILToTensor()])
    datasets = [
        fastload.ImageFolder(folder, geometry, target_transform=_label_noise),
        fastload.ImageFolder(folder, pil, target_transform=_label_noise),
    ]
    flips = {"batch_transforms": gpu.RandomHorizontalFlip()}

    def streams() -> tuple[float, float, float]:
        return float(torch.rand(())), random.random(), float(np.random.rand())

    for dataset in datasets:
        want = _epoch(_loader(dataset, kind="process", workers=2, **flips))
        torch.manual_seed(11), random.seed(11), np.random.seed(11)
        untouched = streams()
        torch.manual_seed(11), random.seed(11), np.random.seed(11)
        got = _epoch(_loader(dataset, kind="thread", workers=4, **flips))
        assert _same_nested(got, want) and streams() == untouched


def _same_nested(a: list, b: list) -> bool:
    def same(u: object, v: object) -> bool:
        if isinstance(u, torch.Tensor):
            return isinstance(v, torch.Tensor) and torch.equal(u, v)
        if isinstance(u, (list, tuple)):
            return len(u) == len(v) and all(map(same, u, v))  # type: ignore[arg-type]
        return u == v

    return same(a, b)


@pytest.fixture
def ring_memory(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The addresses of the buffers every BatchRing hands out from now on."""
    from fastload.memory.buffers import BatchRing

    taken: set[int] = set()
    take = BatchRing.take

    def spied(ring: BatchRing, shape: object, dtype: torch.dtype) -> torch.Tensor:
        buffer = take(ring, shape, dtype)  # type: ignore[arg-type]
        taken.add(buffer.data_ptr())
        return buffer

    monkeypatch.setattr(BatchRing, "take", spied)
    return taken


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize(("kind", "workers"), [("thread", 2), ("process", 0)])
def test_batches_reuse_memory_the_consumer_let_go_of_and_keep_what_it_holds(
    folder: Path, kind: str, workers: int, dtype: str, ring_memory: set[int]
) -> None:
    """Where batches are made in the loader's own process: worker threads, or no workers; the
    float32 batches of batch ops, and the uint8 batches decoded straight into one tensor."""
    dataset = _dataset(folder)
    ops = {"batch_transforms": gpu.Normalize(MEAN, STD)} if dtype == "float32" else {}
    loader = _loader(dataset, kind=kind, workers=workers, **ops)
    kept, copy = None, None
    for _ in range(3):
        for k, (images, _) in enumerate(loader):
            assert images.data_ptr() in ring_memory
            if kept is None and k == 1:
                kept, copy = images, images.clone()
    assert torch.equal(kept, copy)  # held through three epochs: never written again
    assert len(ring_memory) < 3 * len(loader)  # the rest came back to the ring


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize(("kind", "workers"), [("thread", 2), ("process", 0)])
def test_a_users_samples_are_stacked_into_the_ring(
    folder: Path, kind: str, workers: int, dtype: str, ring_memory: set[int]
) -> None:
    """Samples made by torchvision's transforms as written, collated by torch's
    default_collate in the loader's own process: their images are stacked into the ring, not
    into memory made anew for each batch; the batches are torch's loader's, and a batch held
    is never written again."""
    import torchvision.transforms as TV

    last = [TV.ToTensor(), TV.Normalize(MEAN, STD)] if dtype == "float32" else [TV.PILToTensor()]
    dataset = fastload.ImageFolder(folder, TV.Compose([TV.Resize((24, 24)), *last]))
    stock = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    loader = _loader(dataset, kind=kind, workers=workers, shuffle=False)
    kept, copy = None, None
    for _ in range(3):
        got = []
        for k, (images, labels) in enumerate(loader):
            assert images.data_ptr() in ring_memory
            got.append((images.clone(), labels))
            if kept is None and k == 1:
                kept, copy = images, images.clone()
        assert _same(got, stock)
    assert torch.equal(kept, copy)  # held through three epochs: never written again
    assert len(ring_memory) < 3 * len(loader)  # the rest came back to the ring


class _Segmentation(torch.utils.data.Dataset):
    """Samples of an image, a class mask and a label (a segmentation set's), read through an
    ImageFolder that draws each sample from its own streams."""

    sample_keys = True

    def __init__(self, images: fastload.ImageFolder) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        image, label = self.images[key]
        return image, (image[0] * 20).long(), label


@pytest.mark.parametrize(("kind", "workers"), [("thread", 2), ("process", 0)])
def test_every_field_too_large_to_go_by_value_is_stacked_into_the_ring(
    folder: Path, kind: str, workers: int, ring_memory: set[int]
) -> None:
    """Beside the images, a field whose batch is past the inline size (a segmentation mask)
    goes into the ring too, where made anew a batch past malloc's largest threshold would be
    fresh pages every batch; the labels are torch's. The batches are torch's loader's, and a
    batch held is never written again."""
    import torchvision.transforms as TV

    # float32 images and int64 masks of 4 x 96 x 96: both past the size stacked into a ring
    dataset = _Segmentation(
        fastload.ImageFolder(folder, TV.Compose([TV.Resize((96, 96)), TV.ToTensor()]))
    )
    stock = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    loader = _loader(dataset, kind=kind, workers=workers, shuffle=False)
    kept = None
    for _ in range(3):
        for batch, want in zip(loader, stock, strict=True):
            images, masks, labels = batch
            assert images.data_ptr() in ring_memory and masks.data_ptr() in ring_memory
            assert labels.data_ptr() not in ring_memory
            assert all(torch.equal(got, w) for got, w in zip(batch, want, strict=True))
            if kept is None:
                kept = masks, masks.clone()
    assert torch.equal(*kept)  # held through three epochs: never written again
    assert len(ring_memory) < 2 * 3 * len(loader)  # the rest came back to the ring


def test_with_no_workers_dict_samples_are_stacked_into_the_ring(
    folder: Path, ring_memory: set[int]
) -> None:
    """Samples that are dicts (as Hugging Face image pipelines make them): their images go into
    the ring too, and the batches are torch's loader's."""
    import torchvision.transforms as TV

    images = fastload.ImageFolder(folder, TV.Compose([TV.Resize((24, 24)), TV.ToTensor()]))
    records = [{"pixel_values": image, "label": label} for image, label in images]
    stock = list(torch.utils.data.DataLoader(records, batch_size=4))
    loader = _loader(records, kind="process", workers=0, shuffle=False)
    for _ in range(2):
        for batch, want in zip(loader, stock, strict=True):  # each let go of before the next
            assert batch["pixel_values"].data_ptr() in ring_memory
            assert list(batch) == list(want)
            assert torch.equal(batch["pixel_values"], want["pixel_values"])
            assert torch.equal(batch["label"], want["label"])
    assert len(ring_memory) < 2 * len(loader)


def test_with_no_workers_batches_are_made_in_the_iterators_ring(folder: Path) -> None:
    """The consumer's thread collates in a ring of the iterator's own (so float batches reuse
    the memory the consumer let go of, above), and keeps none of its own between batches."""
    from torch.utils.data import default_collate

    from fastload.memory import buffers

    seen = []

    def collate(samples: list) -> object:
        seen.append(buffers.current())
        return default_collate(samples)

    loader = _loader(_dataset(folder), kind="process", workers=0, collate_fn=collate)
    batches = iter(loader)
    next(batches), next(batches)
    assert buffers.current() is None
    assert isinstance(seen[0], buffers.BatchRing) and seen[1] is seen[0]
    assert next(iter(loader)) is not None and seen[2] is not seen[0]  # each pass its own


def test_worker_threads_run_torchs_ops_on_one_thread_each_and_leave_the_rest(
    folder: Path,
) -> None:
    """As torch sets one intra-op thread in each worker process: N threads fanning out over
    every core would oversubscribe them. The consumer's thread and threads started later
    keep torch's count."""
    seen: list[int] = []

    def record(image: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return image

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # more than one, whatever the suite's OMP_NUM_THREADS says
    try:
        main = torch.get_num_threads()
        dataset = fastload.ImageFolder(folder, T.Compose([T.RandomResizedCrop(16), record]))
        assert len(_epoch(_loader(dataset, kind="thread", workers=2))) == 8
        assert seen and set(seen) == {1} and main == 2
        assert torch.get_num_threads() == main
        later: list[int] = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start(), thread.join()
        assert later == [main]
    finally:
        torch.set_num_threads(before)


_RANK = """
import hashlib, json, os, sys

import torch
import torch.distributed as dist

import fastload
from fastload import gpu
from fastload import transforms as T

folder, out = sys.argv[1:3]
dist.init_process_group("gloo")
rank = dist.get_rank()
geometry = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
dataset = fastload.ImageFolder(folder, geometry)
sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=3)
epochs = {}
for kind in ("process", "thread"):
    loader = fastload.DataLoader(
        dataset, batch_size=4, sampler=sampler, num_workers=2, worker_type=kind,
        batch_transforms=gpu.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
        generator=torch.Generator().manual_seed(5),  # the same generator: the same draws
    )
    digests = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        digest = hashlib.sha256()
        for images, labels in loader:
            digest.update(images.numpy().tobytes()), digest.update(labels.numpy().tobytes())
        digests.append(digest.hexdigest())
    epochs[kind] = digests
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"epochs": epochs, "indices": list(sampler)}, f)
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # no interpreter teardown for gloo's threads (pytorch/pytorch#190489)
"""


def test_ranks_under_ddp_get_the_processes_batches_from_their_own_shard(
    folder: Path, tmp_path: Path
) -> None:
    """Two gloo ranks, each with a DistributedSampler: thread workers give each rank the worker
    processes' batches, epoch by epoch, and the ranks read disjoint halves."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from ranks import run_ranks

    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    run_ranks(script, lambda rank: [str(folder), str(tmp_path)])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for found in ranks:
        assert found["epochs"]["thread"] == found["epochs"]["process"]
        assert found["epochs"]["thread"][0] != found["epochs"]["thread"][1]  # drawn anew
    assert ranks[0]["epochs"]["thread"] != ranks[1]["epochs"]["thread"]
    assert not set(ranks[0]["indices"]) & set(ranks[1]["indices"])


def _alone(dataset: object) -> fastload.DataLoader:
    """The loader's own process, with a collate of the user's: each sample loaded alone."""
    return _loader(dataset, kind="process", workers=0, collate_fn=lambda b: default_collate(b))


@pytest.fixture
def stacked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each batch a thread asked of ``load_stacked`` came back as."""
    made: list[str] = []
    load_stacked = ImageDataset.load_stacked

    def recorded(self: ImageDataset, keys: list) -> object:
        samples = load_stacked(self, keys)
        made.append(type(samples).__name__)
        return samples

    monkeypatch.setattr(ImageDataset, "load_stacked", recorded)
    return made


def test_a_batch_is_decoded_into_one_tensor_where_the_collate_takes_it_so(
    folder: Path, stacked: list[str]
) -> None:
    """torch's collate: the batch is asked of ``load_stacked`` (no tensor a sample); a collate
    of the user's gets the samples as ``__getitems__`` makes them; the same batches."""
    dataset = _dataset(folder)
    want = _epoch(_alone(dataset))
    stacked.clear()
    assert _same(_epoch(_loader(dataset, kind="thread", workers=2)), want)
    assert stacked and set(stacked) == {"StackedSamples"}
    stacked.clear()
    users = _loader(dataset, kind="thread", workers=2, collate_fn=lambda b: default_collate(b))
    assert _same(_epoch(users), want) and not stacked


class _PythonFlip(T.RandomHorizontalFlip):
    """A planned op of the user's that draws from Python's ``random``."""

    def make_params(self, view: object) -> bool:
        return random.random() < self.p


def test_a_stacked_batch_draws_a_planned_ops_python_numbers_from_the_samples_streams(
    folder: Path, stacked: list[str]
) -> None:
    geometry = T.Compose([T.RandomResizedCrop(32), _PythonFlip()])
    dataset = fastload.ImageFolder(folder, geometry)
    assert dataset.transform_split.draws_python
    want = _epoch(_alone(dataset))
    random.seed(0)  # the process's own stream: no sample draws from it
    assert _same(_epoch(_loader(dataset, kind="thread", workers=2)), want)
    assert set(stacked) == {"StackedSamples"}


def _relabelled(samples: list) -> dict:
    """A collate function of one's own that changes default_collate's batch (a dict of its
    own)."""
    images, labels = default_collate(samples)
    return {"images": images, "labels": labels, "odd": labels % 2 == 1}


def _flipped(samples: list) -> dict:
    """One that drops the images default_collate stacked for new ones."""
    images, labels = default_collate(samples)
    return {"images": images.flip(-1), "labels": labels}


class _Hoarding:
    """One that keeps every batch's images it collated (and a copy of each, to compare)."""

    def __init__(self) -> None:
        self.held: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, samples: list) -> dict:
        images, labels = default_collate(samples)
        self.held.append((images, images.clone()))
        return {"images": images, "labels": labels}


@pytest.mark.parametrize("kind", ["relabelled", "flipped", "hoarding"])
@pytest.mark.parametrize(("worker_type", "workers"), [("thread", 2), ("process", 0)])
def test_what_default_collate_stacks_inside_ones_own_collate_goes_into_the_ring(
    folder: Path, worker_type: str, workers: int, kind: str, ring_memory: set[int]
) -> None:
    """In the loader's own process, the images torch's default_collate stacks inside a collate
    function of the user's own go into the ring (the labels, too small to, are torch's); the
    batches are torch's loader's with the same function, an image batch the function drops is
    written again, and one it keeps never is."""
    import torchvision.transforms as TV

    collate_fn = {"relabelled": _relabelled, "flipped": _flipped, "hoarding": _Hoarding()}[kind]
    # float32 images of 4 x 3 x 96 x 96: past the size of a field stacked into a ring
    dataset = fastload.ImageFolder(folder, TV.Compose([TV.Resize((96, 96)), TV.ToTensor()]))
    stock = list(torch.utils.data.DataLoader(dataset, batch_size=4, collate_fn=collate_fn))
    loader = _loader(dataset, kind=worker_type, workers=workers, shuffle=False)
    loader.collate_fn = collate_fn
    for _ in range(3):
        ring_memory.clear()  # each pass has a ring of its own
        for batch, want in zip(loader, stock, strict=True):
            assert list(batch) == list(want)
            for field in want:
                assert batch[field].dtype == want[field].dtype
                assert torch.equal(batch[field], want[field])
            if kind != "flipped":
                assert batch["images"].data_ptr() in ring_memory
            assert batch["labels"].data_ptr() not in ring_memory
        assert ring_memory
        if kind == "flipped":  # each let go of as the function returned: written again
            assert len(ring_memory) < len(loader) // 2
    if kind == "hoarding":
        assert all(torch.equal(images, copy) for images, copy in collate_fn.held)
