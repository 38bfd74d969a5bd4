"""fastload.pack and ``fastload pack``: the layout, the shuffle, re-encoding, and a run stopped
(by an error, and by SIGKILL in a real subprocess) that continues to the same bytes."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision
from shardsets import class_folder

import fastload
from fastload.backends.region import restart_interval
from fastload.shards.format import index as indexes
from fastload.shards.format.tar import scan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return class_folder(tmp_path_factory.mktemp("photos"), classes=4, per_class=10)


def _digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.suffix in (".tar", ".idx")
    }


def test_the_layout_of_a_pack(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = fastload.pack(folder, out, shard_size=30_000, workers=2, progress=False)
    reference = torchvision.datasets.ImageFolder(folder)
    assert manifest.classes == reference.classes and manifest.samples == 40
    listed = json.loads((out / "manifest.json").read_text())
    assert listed["format"] == "fastload-shards" and listed["version"] == 1
    assert not list(out.glob(".*"))  # no plan, log or partial file left behind
    labels = dict(reference.samples)
    keys = []
    for entry in manifest.shards:
        path = out / entry.name
        data = path.read_bytes()
        assert len(data) == entry.bytes <= 30_000
        assert hashlib.sha256(data).hexdigest() == entry.sha256
        with tarfile.open(path) as tar:
            names = [m.name for m in tar]
            members = {m.name: tar.extractfile(m).read() for m in tar}
        assert len(names) == 3 * entry.samples
        for k in range(0, len(names), 3):
            key = names[k].split(".")[0]
            keys.append(key)
            assert names[k : k + 3] == [f"{key}.jpg", f"{key}.cls", f"{key}.json"]
            meta = json.loads(members[f"{key}.json"])
            original = folder / meta["path"]
            assert members[f"{key}.jpg"] == original.read_bytes()  # bytes unchanged
            assert int(members[f"{key}.cls"]) == labels[str(original)]
            assert meta["size"] == original.stat().st_size and meta["width"] > 0
        found, problems = indexes.group(scan(str(path)).members)
        assert problems == [] and indexes.read_index(out / entry.index) == found
    assert keys == [f"{k:06d}" for k in range(40)]


def test_samples_are_shuffled_across_shards_by_seed(folder: Path, tmp_path: Path) -> None:
    def classes(out: Path, **options) -> list[int]:
        fastload.pack(folder, out, shard_size=10**6, workers=1, progress=False, **options)
        return fastload.ImageShards(out).targets

    shuffled = classes(tmp_path / "a")
    assert shuffled == classes(tmp_path / "b")  # the same seed, the same order
    assert shuffled != classes(tmp_path / "c", shuffle_seed=1)
    assert classes(tmp_path / "d", shuffle_seed=None) == sorted(shuffled)
    runs = sum(a != b for a, b in itertools.pairwise(shuffled))
    assert runs > 20  # neighbours are mostly of other classes


def test_sources_of_every_kind_pack_alike(folder: Path, tmp_path: Path) -> None:
    fastload.pack(folder, tmp_path / "path", workers=1, progress=False)
    expected = _digests(tmp_path / "path")
    for name, source in (
        ("tv", torchvision.datasets.ImageFolder(folder)),
        ("fl", fastload.ImageFolder(folder)),
    ):
        fastload.pack(source, tmp_path / name, workers=2, progress=False)
        assert _digests(tmp_path / name) == expected


def test_max_side_reencodes_only_larger_images(tmp_path: Path) -> None:
    from images import jpeg_bytes, photo, with_orientation

    source = tmp_path / "in" / "a"
    source.mkdir(parents=True)
    (source / "big.jpg").write_bytes(jpeg_bytes(photo(400, 300, seed=1)))
    (source / "turned.jpg").write_bytes(with_orientation(photo(400, 200, seed=2), 6))
    (source / "small.jpg").write_bytes(jpeg_bytes(photo(100, 80, seed=3)))
    manifest = fastload.pack(
        tmp_path / "in",
        tmp_path / "out",
        max_side=160,
        quality=85,
        shuffle_seed=None,
        progress=False,
    )
    assert (manifest.max_side, manifest.quality) == (160, 85)
    shards = fastload.ImageShards(tmp_path / "out")
    shapes = {}
    for i in range(len(shards)):
        meta = json.loads(_member(shards, i, "json"))
        image, _ = shards[i]
        shapes[meta["path"]] = tuple(image.shape[1:])
        if meta["path"] == "a/small.jpg":
            assert shards.read_sample(i)[0] == (source / "small.jpg").read_bytes()
            assert "stored_width" not in meta
        else:
            assert max(meta["stored_width"], meta["stored_height"]) == 160
    assert shapes == {"a/big.jpg": (120, 160), "a/turned.jpg": (160, 80), "a/small.jpg": (80, 100)}


def _member(shards: fastload.ImageShards, i: int, ext: str) -> bytes:
    with tarfile.open(shards.shard_of(i)) as tar:
        return tar.extractfile(f"{shards.key(i)}.{ext}").read()


def _batches(pack: Path, backend: str) -> list[Any]:
    """An epoch of a pack, RandomResizedCrop 40 + flip, seeded per sample, in a fixed order."""
    from fastload import transforms as fl

    op = fl.Compose([fl.RandomResizedCrop(40), fl.RandomHorizontalFlip()])
    loader = fastload.DataLoader(
        fastload.ImageShards(pack, transform=op),
        batch_size=8,
        backend=backend,
        seeding="sample",
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    return list(loader)


def _has_member(shards: fastload.ImageShards, i: int, ext: str) -> bool:
    with tarfile.open(shards.shard_of(i)) as tar:
        return f"{shards.key(i)}.{ext}" in tar.getnames()


def test_a_stopped_run_continues_to_the_same_shards(folder: Path, tmp_path: Path) -> None:
    fastload.pack(folder, tmp_path / "whole", shard_size=20_000, workers=2, progress=False)
    files = fastload.ImageFolder(folder)
    paths = [files.path(i) for i in range(len(files))]
    missing = Path(paths[25])
    kept = missing.read_bytes()
    missing.unlink()  # the reader stops there: the shards before it are complete
    try:
        with pytest.raises(FileNotFoundError):
            fastload.pack(files, tmp_path / "out", shard_size=20_000, workers=2, progress=False)
    finally:
        missing.write_bytes(kept)
    assert not (tmp_path / "out" / "manifest.json").exists()
    done = sorted(p.name for p in (tmp_path / "out").glob("shard-*.tar"))
    assert done and not list((tmp_path / "out").glob(".shard-*"))  # no partial left
    fastload.pack(files, tmp_path / "out", shard_size=20_000, workers=2, progress=False)
    assert _digests(tmp_path / "out") == _digests(tmp_path / "whole")


def test_running_again_says_why_not(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fastload.pack(folder, out, workers=1, progress=False)
    with pytest.raises(FileExistsError, match="already holds a complete pack"):
        fastload.pack(folder, out, workers=1, progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        fastload.pack(folder, tmp_path / "other", progress=False)
    for bad, match in (({"shard_size": 10}, "shard_size=10"), ({"quality": 101}, "quality=101")):
        with pytest.raises(ValueError, match=match):
            fastload.pack(folder, tmp_path / "x", progress=False, **bad)


_KILLED = """
import sys
import fastload
fastload.pack(
    sys.argv[1], sys.argv[2], shard_size=20_000, shuffle_seed=None, workers=2, progress=False
)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_killed_run_leaves_no_manifest_and_continues(folder: Path, tmp_path: Path) -> None:
    """A pipe in the source blocks the reader at sample 23 (in the folder's order), after
    shards have been written; the process is killed there."""
    source = tmp_path / "source"
    source.mkdir()
    for sub in folder.iterdir():
        os.symlink(sub, source / sub.name) if sub.name != "c02" else None
    blocked = source / "c02"
    blocked.mkdir()
    for file in sorted((folder / "c02").iterdir()):
        (blocked / file.name).write_bytes(file.read_bytes())
    fifo_at = blocked / "003.jpg"
    fifo_at.unlink()
    os.mkfifo(fifo_at)
    expected = tmp_path / "expected"
    script = tmp_path / "pack.py"
    script.write_text(_KILLED)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(source), str(out)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("shard-*.tar")) and time.monotonic() < deadline:
            assert proc.poll() is None, "pack ended before the pipe was read"
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert list(out.glob("shard-*.tar")) and not (out / "manifest.json").exists()
    fifo_at.unlink()
    (blocked / "003.jpg").write_bytes((folder / "c02" / "003.jpg").read_bytes())
    options = {"shard_size": 20_000, "shuffle_seed": None, "workers": 2, "progress": False}
    fastload.pack(source, out, **options)
    fastload.pack(source, expected, **options)
    assert _digests(out) == _digests(expected)
    assert fastload.ImageShards(out).manifest.samples == 40


def test_the_command_packs_and_explains(folder: Path, tmp_path: Path) -> None:
    fastload_cli = [sys.executable, "-m", "fastload"]
    shown = subprocess.run([*fastload_cli, "pack", "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "--max-side" in shown.stdout and "SOURCE" in shown.stdout
    done = subprocess.run(
        [*fastload_cli, "pack", str(folder), str(tmp_path / "out"), "--shard-size", "40KB"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "packed 40 images into" in done.stdout
    assert all(
        e["bytes"] <= 40_000
        for e in json.loads((tmp_path / "out" / "manifest.json").read_text())["shards"]
    )
    again = subprocess.run(
        [*fastload_cli, "pack", str(folder), str(tmp_path / "out")], capture_output=True, text=True
    )
    assert again.returncode == 1
    assert again.stderr.startswith("fastload pack: error:") and "complete pack" in again.stderr
    bad = subprocess.run(
        [*fastload_cli, "pack", str(folder), str(tmp_path / "y"), "--shard-size", "lots"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "is not a size" in bad.stderr


def test_raw_pixels_read_as_the_files_pixels(folder: Path, tmp_path: Path) -> None:
    """``pixels="raw"``: each image as its decoded pixels (a PPM member), read back with the
    same draws and the same pixels as the JPEG pack decoded by Pillow (the library that made
    the raw pixels), with fused ops that do not resample."""
    from fastload import transforms as fl

    encoded = fastload.pack(folder, tmp_path / "encoded", progress=False)
    raw = fastload.pack(folder, tmp_path / "raw", pixels="raw", progress=False)
    assert (encoded.pixels, raw.pixels) == ("encoded", "raw")
    assert json.loads((tmp_path / "raw" / "manifest.json").read_text())["pixels"] == "raw"
    assert "pixels" not in json.loads((tmp_path / "encoded" / "manifest.json").read_text())
    op = fl.Compose([fl.RandomCrop(48), fl.RandomHorizontalFlip()])
    jpeg = fastload.ImageShards(tmp_path / "encoded", transform=op, backend="pillow")
    ppm = fastload.ImageShards(tmp_path / "raw", transform=op)
    assert len(ppm) == len(jpeg) == 40 and ppm.key(0) == jpeg.key(0)
    assert _member(ppm, 0, "ppm").startswith(b"P6\n")
    for i in range(len(ppm)):
        torch.manual_seed(i)
        expected = jpeg[i]
        torch.manual_seed(i)
        image, label = ppm[i]
        assert label == expected[1] and torch.equal(image, expected[0]), i
    whole = fastload.ImageShards(tmp_path / "raw")[0][0]  # 3 bytes a pixel, and the header
    height, width = whole.shape[1:]
    assert len(_member(ppm, 0, "ppm")) == len(b"P6\n%d %d\n255\n" % (width, height)) + whole.numel()


def test_a_share_of_raw_pixels_goes_to_the_files_with_most_bytes_a_pixel(
    folder: Path, tmp_path: Path
) -> None:
    """``raw_share``: that share of the images raw, the files with the most bytes per pixel
    (by their headers, ties to the earlier file); each sample reads as the same sample of the
    all-raw pack or of the encoded pack, with the same draws."""
    from PIL import Image

    from fastload import transforms as fl

    share = 0.3
    packed = fastload.pack(
        folder, tmp_path / "mixed", pixels="raw", raw_share=share, progress=False
    )
    fastload.pack(folder, tmp_path / "raw", pixels="raw", progress=False)
    fastload.pack(folder, tmp_path / "encoded", progress=False)
    assert packed.raw_share == share
    assert json.loads((tmp_path / "mixed" / "manifest.json").read_text())["raw_share"] == share
    assert "raw_share" not in json.loads((tmp_path / "raw" / "manifest.json").read_text())
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    density = {}
    for path in files:
        with Image.open(path) as image:
            density[path.relative_to(folder).as_posix()] = path.stat().st_size / (
                image.width * image.height
            )
    ranked = sorted(density, key=lambda name: -density[name])
    expected = set(ranked[: round(share * len(files))])
    op = fl.Compose([fl.RandomResizedCrop(40), fl.RandomHorizontalFlip()])
    mixed = fastload.ImageShards(tmp_path / "mixed", transform=op)
    alike = {
        "ppm": fastload.ImageShards(tmp_path / "raw", transform=op),
        "jpg": fastload.ImageShards(tmp_path / "encoded", transform=op),
    }
    stored_raw = set()
    for i in range(len(mixed)):
        path = json.loads(_member(mixed, i, "json"))["path"]
        kind = "ppm" if _has_member(mixed, i, "ppm") else "jpg"
        if kind == "ppm":
            stored_raw.add(path)
        torch.manual_seed(i)
        expected_sample = alike[kind][i]
        torch.manual_seed(i)
        image, label = mixed[i]
        assert label == expected_sample[1] and torch.equal(image, expected_sample[0]), i
    assert stored_raw == expected and len(expected) == round(share * len(files))


def test_a_raw_share_is_checked(folder: Path, tmp_path: Path) -> None:
    for bad in (0, 1.5, True, "half"):
        with pytest.raises(ValueError, match=r"raw_share=.* must be a number in \(0, 1\]"):
            fastload.pack(folder, tmp_path / "x", pixels="raw", raw_share=bad, progress=False)
    with pytest.raises(ValueError, match=r"raw_share=0.5 applies to pixels='raw'"):
        fastload.pack(folder, tmp_path / "x", raw_share=0.5, progress=False)
    assert not (tmp_path / "x").exists()


def test_raw_pixels_at_max_side_are_upright_and_smaller(tmp_path: Path) -> None:
    from images import jpeg_bytes, photo, with_orientation

    source = tmp_path / "in" / "a"
    source.mkdir(parents=True)
    (source / "big.jpg").write_bytes(jpeg_bytes(photo(400, 300, seed=1)))
    (source / "turned.jpg").write_bytes(with_orientation(photo(400, 200, seed=2), 6))
    (source / "small.jpg").write_bytes(jpeg_bytes(photo(100, 80, seed=3)))
    fastload.pack(tmp_path / "in", tmp_path / "out", max_side=160, pixels="raw", progress=False)
    shards = fastload.ImageShards(tmp_path / "out")
    shapes = {}
    for i in range(len(shards)):
        meta = json.loads(_member(shards, i, "json"))
        shapes[meta["path"]] = tuple(shards[i][0].shape[1:])
        assert (meta["stored_width"], meta["stored_height"]) == shapes[meta["path"]][::-1]
    assert shapes == {"a/big.jpg": (120, 160), "a/turned.jpg": (160, 80), "a/small.jpg": (80, 100)}


def test_raw_pixels_are_webdatasets_images_too(folder: Path, tmp_path: Path) -> None:
    import webdataset

    fastload.pack(folder, tmp_path / "raw", pixels="raw", shuffle_seed=None, progress=False)
    shards = fastload.ImageShards(tmp_path / "raw")
    urls = [str(p) for p in sorted((tmp_path / "raw").glob("*.tar"))]
    theirs = webdataset.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("ppm", "cls")
    for i, (image, label) in enumerate(theirs):
        ours, our_label = shards[i]
        assert label == our_label and np.array_equal(image, ours.permute(1, 2, 0).numpy())


def test_raw_pixels_are_refused_for_coco_and_checked(folder: Path, tmp_path: Path) -> None:
    from fastload.synthetic import make_coco

    with pytest.raises(ValueError, match=r"pixels='RAW' is not valid; valid: 'encoded', 'raw'"):
        fastload.pack(folder, tmp_path / "x", pixels="RAW", progress=False)
    images, annotations = make_coco(tmp_path / "coco", images=2)
    coco = fastload.detection.CocoDetection(images, annotations)
    with pytest.raises(ValueError, match=r"upright.*pack it with pixels='encoded'"):
        fastload.pack(coco, tmp_path / "y", pixels="raw", progress=False)


def test_the_command_packs_raw_pixels(folder: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "fastload", "pack", str(folder), str(tmp_path / "out")]
    done = subprocess.run([*command, "--pixels", "raw"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["pixels"] == "raw"
    bad = subprocess.run([*command, "--pixels", "png"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'png'" in bad.stderr
    share = [*command[:-1], str(tmp_path / "half"), "--pixels", "raw", "--raw-share", "0.5"]
    done = subprocess.run(share, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "half" / "manifest.json").read_text())["raw_share"] == 0.5


@pytest.mark.parametrize("backend", ["dali", "nvimgcodec"])
def test_raw_pixels_on_the_batch_executors(folder: Path, tmp_path: Path, backend: str) -> None:
    """The executors' libraries decode the PPM members themselves (CPU mode here): the same
    batches as the per-sample path, pixels within their resize's rounding."""

    fastload.pack(folder, tmp_path / "raw", pixels="raw", progress=False)
    batches = {name: _batches(tmp_path / "raw", name) for name in ("region", backend)}
    for (ours, labels), (theirs, their_labels) in zip(*batches.values(), strict=True):
        assert torch.equal(labels, their_labels) and ours.shape == theirs.shape
        assert (ours.float() - theirs.float()).abs().max() <= 2


def test_a_raw_member_shorter_than_its_header_is_one_error(folder: Path, tmp_path: Path) -> None:
    fastload.pack(folder, tmp_path / "raw", pixels="raw", shuffle_seed=None, progress=False)
    shards = fastload.ImageShards(tmp_path / "raw")
    member = _member(shards, 3, "ppm")
    width, height = member.split(b"\n")[1].split()
    assert len(height) == 2  # the test photos are 2-digit tall: the header keeps its length
    tar = Path(shards.shard_of(3))
    content = tar.read_bytes()
    start = content.index(member)
    lying = member.replace(b"%s %s\n" % (width, height), b"%s 99\n" % width, 1)
    tar.write_bytes(content[:start] + lying + content[start + len(member) :])
    with pytest.raises(fastload.ImageDecodeError, match=rf"{shards.key(3)}\.ppm.*truncated PPM"):
        fastload.ImageShards(tmp_path / "raw")[3]
    assert isinstance(fastload.ImageShards(tmp_path / "raw", on_error="skip")[3], fastload.Skipped)


def test_seekable_jpegs_hold_the_files_pixels(
    folder: Path, tmp_path: Path, require_backend
) -> None:
    """``pixels="seekable"``: each JPEG rewritten with restart markers that the region backend
    cuts a crop at; the samples are the encoded pack's, draw for draw, pixel for pixel, read by
    the region backend (which cuts) and by Pillow (which decodes all of it)."""
    from fastload import backends
    from fastload import transforms as fl

    require_backend("region")
    fastload.pack(folder, tmp_path / "encoded", progress=False)
    manifest = fastload.pack(folder, tmp_path / "seek", pixels="seekable", progress=False)
    assert manifest.pixels == "seekable"
    assert json.loads((tmp_path / "seek" / "manifest.json").read_text())["pixels"] == "seekable"
    op = fl.Compose([fl.RandomResizedCrop(40), fl.RandomHorizontalFlip()])
    for backend in ("region", "pillow"):
        jpeg = fastload.ImageShards(tmp_path / "encoded", transform=op, backend=backend)
        seek = fastload.ImageShards(tmp_path / "seek", transform=op, backend=backend)
        assert len(seek) == len(jpeg) == 40 and seek.key(0) == jpeg.key(0)
        for i in range(len(seek)):
            torch.manual_seed(i)
            expected = jpeg[i]
            torch.manual_seed(i)
            image, label = seek[i]
            assert label == expected[1] and torch.equal(image, expected[0]), (backend, i)
    decoder = backends.create("region")
    member = _member(seek, 0, "jpg")
    assert restart_interval(member) > 0
    decoder.decode_jpeg_region(member, 1, (30, 30, 40, 40), max_pixels=10**8)
    assert decoder.counts == {"restarts": 1}  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:left out what")  # the empty file makes no sample
def test_seekable_reads_every_kind_of_file_alike(tmp_path: Path, require_backend) -> None:
    """Progressive, grey, CMYK, EXIF-rotated JPEGs: the same samples as the encoded pack's;
    PNGs and files libjpeg-turbo cannot read whole are stored as they are, for their readers
    to report."""
    from images import READABLE, UNREADABLE, fault_files

    require_backend("region")
    fault_files(tmp_path / "in" / "a")
    packs = {}
    for pixels in ("encoded", "seekable"):
        fastload.pack(tmp_path / "in", tmp_path / pixels, pixels=pixels, progress=False)
        shards = fastload.ImageShards(tmp_path / pixels, on_error="skip")
        packs[pixels] = {
            Path(json.loads(_member(shards, i, "json"))["path"]).stem: (
                shards.read_sample(i)[0],
                shards[i],
            )
            for i in range(len(shards))
        }
    for kind in READABLE:
        (data, (image, _)), (ours, (our_image, _)) = packs["encoded"][kind], packs["seekable"][kind]
        assert torch.equal(our_image, image), kind
        assert (restart_interval(ours) > 0) == (data[:2] == b"\xff\xd8"), kind  # JPEGs rewritten
    assert packs["seekable"].keys() == packs["encoded"].keys()  # the empty file in neither
    for kind in set(UNREADABLE) & packs["encoded"].keys():
        assert packs["seekable"][kind][0] == packs["encoded"][kind][0], kind


def test_seekable_at_max_side_rewrites_the_reencoded_jpeg(tmp_path: Path, require_backend) -> None:
    from images import jpeg_bytes, photo
    from PIL import Image

    require_backend("region")
    source = tmp_path / "in" / "a"
    source.mkdir(parents=True)
    (source / "big.jpg").write_bytes(jpeg_bytes(photo(400, 300, seed=1)))
    for pixels in ("encoded", "seekable"):
        fastload.pack(
            tmp_path / "in", tmp_path / pixels, pixels=pixels, max_side=160, progress=False
        )
    encoded = fastload.ImageShards(tmp_path / "encoded").read_sample(0)[0]
    ours = fastload.ImageShards(tmp_path / "seekable").read_sample(0)[0]
    assert restart_interval(ours) > 0 and restart_interval(encoded) == 0
    with Image.open(io.BytesIO(ours)) as image, Image.open(io.BytesIO(encoded)) as reference:
        assert image.size == (160, 120)
        np.testing.assert_array_equal(np.asarray(image), np.asarray(reference))


def test_the_command_packs_seekable_jpegs(folder: Path, tmp_path: Path, require_backend) -> None:
    require_backend("region")
    command = [sys.executable, "-m", "fastload", "pack", str(folder), str(tmp_path / "out")]
    done = subprocess.run([*command, "--pixels", "seekable"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["pixels"] == "seekable"


@pytest.mark.parametrize("backend", ["dali", "nvimgcodec"])
def test_seekable_jpegs_on_the_batch_executors(folder: Path, tmp_path: Path, backend: str) -> None:
    """The executors' libraries decode the rewritten JPEGs themselves (CPU mode here): the same
    batches as from the encoded pack."""

    for pixels in ("encoded", "seekable"):
        fastload.pack(folder, tmp_path / pixels, pixels=pixels, progress=False)
    batches = {pixels: _batches(tmp_path / pixels, backend) for pixels in ("encoded", "seekable")}
    for (ours, labels), (theirs, their_labels) in zip(*batches.values(), strict=True):
        assert torch.equal(labels, their_labels) and torch.equal(ours, theirs)
