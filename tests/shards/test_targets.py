"""Any member as the target, against the real webdataset package as the oracle of which samples a
shard holds: image-text shards written by webdataset's own TarWriter, with captions missing,
non-ASCII captions, JSON metadata and PNG images among JPEGs; and image-only samples through
every backend."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from images import jpeg_bytes, photo
from PIL import Image

import fastload
from fastload import transforms as T
from fastload.errors import ImageDecodeError, UnreadableImageWarning

CAPTIONS = ["a red fox", "un café au lait", "東京の夜景", "", "emoji 🦊 fox", "two\nlines"]
MISSING = {7, 12}  # samples written without a caption


def _png(k: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.asarray(photo(40, 36, seed=k))).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("pairs")
    paths = []
    for s in range(3):
        path = folder / f"pairs-{s:02d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for k in range(s * 6, s * 6 + 6):
                sample = {"__key__": f"{k:05d}", "json": {"k": k, "url": f"https://x/{k}.jpg"}}
                sample["png" if k % 5 == 0 else "jpg"] = (
                    _png(k) if k % 5 == 0 else jpeg_bytes(photo(40, 36, seed=k))
                )
                if k not in MISSING:
                    sample["txt"] = CAPTIONS[k % len(CAPTIONS)]
                writer.write(sample)
        paths.append(str(path))
    return paths


def _oracle(shards: list[str]) -> list[dict]:
    return list(wds.WebDataset(shards, shardshuffle=False, empty_check=False))


def test_captions_are_webdatasets_strings_key_by_key(shards: list[str]) -> None:
    dataset = fastload.ImageShards(shards, target="txt")
    truth = _oracle(shards)
    assert [dataset.key(i) for i in range(len(dataset))] == [s["__key__"] for s in truth]
    for i, sample in enumerate(truth):
        if "txt" not in sample:
            continue
        image, caption = dataset.read_sample(i)
        assert caption == sample["txt"].decode("utf-8")
        assert image == sample.get("jpg", sample.get("png"))


def test_a_sample_without_its_caption_is_named_or_skipped(shards: list[str]) -> None:
    raising = fastload.ImageShards(shards, T.CenterCrop(32), target="txt")
    with pytest.raises(ImageDecodeError, match=r"pairs-01\.tar:00007\.jpg.*no \.txt member"):
        raising[7]
    with pytest.warns(UnreadableImageWarning, match="left out"):  # at construction
        skipping = fastload.ImageShards(shards, T.CenterCrop(32), target="txt", on_error="skip")
    assert len(skipping) == 16  # whole samples only: the loader's batches are whole
    loader = fastload.DataLoader(skipping, batch_size=4, num_workers=2)
    captions = [c for _, batch in loader for c in batch]
    expected = [CAPTIONS[k % len(CAPTIONS)] for k in range(18) if k not in MISSING]
    assert captions == expected  # strings collate to lists of str, as torch's default collate
    assert sorted(skipping.bad_files) == [f"{shards[1]}:00007.jpg", f"{shards[2]}:00012.jpg"]


def test_json_tuples_and_bytes(shards: list[str]) -> None:
    truth = _oracle(shards)
    both = fastload.ImageShards(shards, target=("txt", "json"))
    _, (caption, meta) = both.read_sample(0)
    assert caption == CAPTIONS[0] and meta == json.loads(truth[0]["json"])
    raw = fastload.ImageShards(shards, target="json;txt")
    assert raw.read_sample(3)[1] == {"k": 3, "url": "https://x/3.jpg"}
    as_bytes = fastload.ImageShards(shards, target="jpg", image="png;jpg")
    image, data = as_bytes.read_sample(1)
    assert data == image == truth[1]["jpg"]


def test_image_alternatives_take_the_first_present(shards: list[str]) -> None:
    truth = _oracle(shards)
    dataset = fastload.ImageShards(shards, image="png;jpg", target=None)
    for i, sample in enumerate(truth):
        assert dataset.read_sample(i)[0] == sample.get("png", sample.get("jpg"))
    with pytest.warns(UnreadableImageWarning, match="left out"):  # the PNG-only samples
        jpeg_only = fastload.ImageShards(shards, image="jpg", target=None, on_error="skip")
    assert len(jpeg_only) == len(truth) - sum(1 for s in truth if "png" in s)


def test_a_tokenizer_runs_as_target_transform_in_the_workers(shards: list[str]) -> None:
    def tokenize(text: str) -> torch.Tensor:
        codes = list(text.encode("utf-8"))[:8]
        return torch.tensor(codes + [0] * (8 - len(codes)))

    with pytest.warns(UnreadableImageWarning):
        dataset = fastload.ImageShards(
            shards, T.CenterCrop(32), tokenize, target="txt", on_error="skip"
        )
    batches = list(fastload.DataLoader(dataset, batch_size=4, num_workers=2))
    tokens = torch.cat([t for _, t in batches])
    assert tokens.shape == (16, 8) and tokens.dtype == torch.int64
    assert bytes(tokens[0][tokens[0] > 0].tolist()).decode() == CAPTIONS[0][:8]


@pytest.mark.parametrize(
    "backend", ["region", "turbojpeg", "opencv", "pillow", "dali", "nvimgcodec"]
)
def test_image_only_samples_batch_as_tensors_on_every_backend(
    shards: list[str], backend: str, require_backend
) -> None:
    require_backend(backend)
    dataset = fastload.ImageShards(shards, T.CenterCrop(32), target=None, image="jpg;png")
    assert isinstance(dataset[0], torch.Tensor)
    batches = list(fastload.DataLoader(dataset, batch_size=6, backend=backend))
    assert all(isinstance(b, torch.Tensor) for b in batches)
    assert torch.cat(batches).shape == (18, 3, 32, 32)


def test_labels_are_for_cls_targets_only(shards: list[str]) -> None:
    captions = fastload.ImageShards(shards, target="txt")
    with pytest.raises(ValueError, match=r"labels are the \.cls members; .* target is 'txt'"):
        _ = captions.labels
    with pytest.raises(ValueError, match="names no member extension"):
        fastload.ImageShards(shards, target="txt;")
    with pytest.raises(ValueError, match="must be a member's extension"):
        fastload.ImageShards(shards, target=3)  # type: ignore[arg-type]


def test_scan_checks_the_images_of_image_text_shards(shards: list[str]) -> None:
    folder = str(Path(shards[0]).parent)
    done = subprocess.run(
        [sys.executable, "-m", "fastload", "scan", folder],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"unreadable\s+0\s", done.stdout), done.stdout  # no '.cls' asked of them
