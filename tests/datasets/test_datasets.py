"""fastload.ImageFolder and ImageList: torchvision's bookkeeping, fastload's decoding."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from images import fault_files, jpeg_bytes, photo
from PIL import Image

import fastload
from fastload import transforms as fl
from fastload.loader.collate import collate_chain


def make_folder(root: Path, per_class: int = 5) -> Path:
    for c, name in enumerate(["cat", "Dog", "ant", "bee_2"]):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            ext = [".jpg", ".JPEG", ".jpeg", ".png"][i % 4]
            path = folder / f"{i:03d}{ext}"
            if ext == ".png":
                Image.fromarray(photo(60 + i, 50, seed=c * 10 + i)).save(path)
            else:
                path.write_bytes(jpeg_bytes(photo(60 + i, 50, seed=c * 10 + i)))
        (folder / "notes.txt").write_text("not an image")
        (folder / "nested").mkdir()
        (folder / "nested" / "deep.jpg").write_bytes(jpeg_bytes(photo(40, 40, seed=99)))
    return root


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path / "data")


def test_same_bookkeeping_as_torchvision(folder: Path) -> None:
    ours = fastload.ImageFolder(folder)
    theirs = torchvision.datasets.ImageFolder(folder)
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.imgs == theirs.imgs
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 4 * 6


def test_is_valid_file_as_torchvision(folder: Path) -> None:
    def only_png(p: str) -> bool:
        return p.endswith(".png")

    ours = fastload.ImageFolder(folder, is_valid_file=only_png)
    assert ours.samples == torchvision.datasets.ImageFolder(folder, is_valid_file=only_png).samples


def test_empty_root_is_torchvisions_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fastload.ImageFolder(tmp_path)


@pytest.mark.parametrize("backend", ["pillow", "opencv", "turbojpeg"])
def test_items_are_chw_uint8_rgb_tensors_and_labels(
    folder: Path, backend: str, require_backend
) -> None:
    require_backend(backend)
    ds = fastload.ImageFolder(folder, backend=backend)
    reference = torchvision.datasets.ImageFolder(folder)
    for i in range(len(ds)):
        image, target = ds[i]
        pil, expected_target = reference[i]
        assert target == expected_target and isinstance(target, int)
        assert image.dtype == torch.uint8 and image.shape == (3, pil.height, pil.width)
        diff = (image.permute(1, 2, 0).int() - torch.from_numpy(np.array(pil)).int()).abs()
        assert diff.float().mean() <= 2.0


def test_fused_transform_and_target_transform(folder: Path) -> None:
    ds = fastload.ImageFolder(
        folder, transform=fl.RandomResizedCrop(32), target_transform=lambda t: t * 10
    )
    image, target = ds[7]
    assert (
        image.shape == (3, 32, 32)
        and target == 10 * torchvision.datasets.ImageFolder(folder).targets[7]
    )


def test_other_callables_get_a_pil_image_like_torchvision(folder: Path) -> None:
    seen = []
    pipeline = torchvision.transforms.Compose(
        [lambda im: seen.append(type(im)) or im, torchvision.transforms.ToTensor()]
    )
    image, _ = fastload.ImageFolder(folder, transform=pipeline)[0]
    assert seen == [Image.Image] and image.dtype == torch.float32


def test_compose_runs_other_callables_on_the_fused_tensor(folder: Path) -> None:
    pipeline = fl.Compose([fl.Resize(40), fl.CenterCrop(36), lambda t: t.float() / 255])
    image, _ = fastload.ImageFolder(folder, transform=pipeline)[0]
    assert image.shape == (3, 36, 36) and image.dtype == torch.float32


def test_image_list_from_paths_and_labels(folder: Path) -> None:
    paths = [str(p) for p in sorted(folder.rglob("*.jpg"))]
    ds = fastload.ImageList(paths, list(range(len(paths))), classes=["a"])
    assert len(ds) == len(paths) and ds.samples == [(p, i) for i, p in enumerate(paths)]
    assert ds[3][1] == 3 and ds.class_to_idx == {"a": 0}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"backend": "webgpu"},
            "backend='webgpu' is not valid; valid: "
            + ", ".join(repr(n) for n in fastload.backends.choices()),
        ),
        ({"on_error": "ignore"}, "on_error='ignore' is not valid; valid: 'raise', 'skip'"),
        ({"max_pixels": 0}, "max_pixels=0 must be an int >= 1"),
    ],
)
def test_bad_options(folder: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        fastload.ImageFolder(folder, **kwargs)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        fastload.ImageList([], [], **kwargs)


def test_paths_and_labels_must_pair_up() -> None:
    with pytest.raises(ValueError, match="got 2 paths but 1 labels"):
        fastload.ImageList(["a", "b"], [0])


def test_samples_are_kept_in_arrays_not_python_lists(folder: Path) -> None:
    ds = fastload.ImageFolder(folder)
    for value in vars(ds).values():
        assert not (isinstance(value, (list, tuple)) and len(value) == len(ds)), value
    assert ds._paths.nbytes < 2000


def test_dataset_pickles_without_library_handles(folder: Path) -> None:
    ds = fastload.ImageFolder(folder, backend="pillow")
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._decoder is None and copy.samples == ds.samples
    assert torch.equal(copy[0][0], ds[0][0])


# ---------------------------------------------------------------- errors through the loader


@pytest.fixture
def mixed(tmp_path: Path) -> fastload.ImageList:
    faults = fault_files(tmp_path / "faults")
    good = [faults["good"]] * 6
    bad = [faults["truncated"], faults["random_bytes"], faults["empty"]]
    paths = good[:2] + bad[:1] + good[2:4] + bad[1:] + good[4:]  # 9 files, 3 bad
    return paths


def test_raise_policy_in_workers_names_the_file_and_keeps_the_pool(mixed, require_backend) -> None:
    ds = fastload.ImageList(mixed, list(range(len(mixed))), transform=fl.CenterCrop(64))
    loader = fastload.DataLoader(ds, batch_size=1, num_workers=2)
    errors, labels = [], []
    it = iter(loader)
    while True:
        try:
            _, label = next(it)
            labels.append(int(label))
        except StopIteration:
            break
        except fastload.ImageDecodeError as exc:
            errors.append(str(exc))
    # every good sample still arrived after the errors: no worker died, nothing hung
    assert sorted(labels) == [0, 1, 3, 4, 7, 8]
    assert len(errors) == 3
    assert all("Caught ImageDecodeError in DataLoader worker" in e for e in errors)
    assert any("truncated.jpg" in e and f"the {ds.backend} backend" in e for e in errors)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skip_policy_drops_from_batches_and_warns_once_per_epoch(mixed, num_workers: int) -> None:
    ds = fastload.ImageList(
        mixed, list(range(len(mixed))), transform=fl.CenterCrop(64), on_error="skip"
    )
    loader = fastload.DataLoader(ds, batch_size=3, num_workers=num_workers)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = list(loader)
        skipped = [w for w in caught if issubclass(w.category, fastload.UnreadableImageWarning)]
        assert len(skipped) == 1 and "skipped 3 unreadable image(s)" in str(skipped[0].message)
        assert [b[1].tolist() for b in batches] == [[0, 1], [3, 4], [7, 8]]
        assert all(b[0].shape[1:] == (3, 64, 64) and b[0].dtype == torch.uint8 for b in batches)
    assert sorted(Path(p).name for p in ds.bad_files) == [
        "empty.jpg",
        "random_bytes.jpg",
        "truncated.jpg",
    ]
    assert all(ds.bad_files.values())


def test_skip_policy_drops_whole_bad_batches_and_unbatched_samples(mixed) -> None:
    ds = fastload.ImageList(mixed[2:3] * 2 + mixed[:1], [0, 1, 2], on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastload.UnreadableImageWarning)
        assert [b[1].tolist() for b in fastload.DataLoader(ds, batch_size=2)] == [[2]]
        assert [s[1] for s in fastload.DataLoader(ds, batch_size=None)] == [2]


def test_skip_policy_batches_pin(mixed, require_backend) -> None:
    ds = fastload.ImageList(
        mixed, list(range(len(mixed))), transform=fl.CenterCrop(8), on_error="skip"
    )
    chain = collate_chain(  # what the loader's workers collate with, for on_error="skip"
        torch.utils.data.default_collate,
        stage=None,
        on_device=False,
        skipping=True,
        batched=True,
        keyed=False,
    )
    collated = chain([ds[0], ds[2]])
    assert collated.skipped and collated.batch[0].shape == (1, 3, 8, 8)
    if torch.cuda.is_available():
        assert collated.pin_memory().batch[0].is_pinned()


def test_default_collate_makes_one_uint8_batch(folder: Path) -> None:
    ds = fastload.ImageFolder(folder, transform=fl.RandomResizedCrop(24))
    images, labels = next(iter(fastload.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)))
    assert images.shape == (8, 3, 24, 24) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64


@pytest.mark.timeout(60)
def test_workers_do_not_deadlock_after_opencv_threads_started(folder: Path) -> None:
    """A forked worker that reaches OpenCV's thread pool, started in the parent, can hang."""
    import cv2

    cv2.setNumThreads(2)
    cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (1000, 1000))  # the pool now has threads
    ds = fastload.ImageFolder(folder, transform=fl.Resize((300, 300)))  # enlarging: OpenCV
    batches = list(fastload.DataLoader(ds, batch_size=4, num_workers=2))
    assert sum(len(b[1]) for b in batches) == len(ds)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_bug_in_the_users_transform_is_not_blamed_on_the_image(folder: Path, on_error) -> None:
    """Only reading and decoding fall under on_error; the user's own code raises as it is."""

    def broken(image):
        raise KeyError("bug in the user's transform")

    for transform in (broken, fl.Compose([fl.CenterCrop(8), broken])):
        ds = fastload.ImageFolder(folder, transform=transform, on_error=on_error)
        with pytest.raises(KeyError, match="bug in the user's transform"):
            ds[0]
        assert ds.bad_files == {}
