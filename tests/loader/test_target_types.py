"""A fastload dataset's batches through ``fastload.DataLoader`` with none of its own options
have torch's types and values, target kind by target kind: what ``torch.utils.data.DataLoader``
gives over the same dataset (a caption batch is a tuple of str, a JSON target a dict of
columns, a label a tensor), with and without worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import webdataset as wds
from images import jpeg_bytes, photo

import fastload
from fastload import transforms as T

CAPTIONS = ["a red fox", "un café au lait", "東京の夜景", "", "two\nlines"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two shards of eight samples: a JPEG, a caption, a label and JSON metadata each."""
    folder = tmp_path_factory.mktemp("typed")
    paths = []
    for s in range(2):
        path = folder / f"typed-{s:02d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for k in range(s * 8, s * 8 + 8):
                writer.write(
                    {
                        "__key__": f"{k:05d}",
                        "jpg": jpeg_bytes(photo(48, 40, seed=k)),
                        "txt": CAPTIONS[k % len(CAPTIONS)],
                        "cls": str(k % 3),
                        "json": {"k": k, "name": f"n{k}", "size": [48, 40]},
                    }
                )
        paths.append(str(path))
    return paths


def structure(value: Any) -> Any:
    """The type of every container and leaf of a batch, and every leaf's value (a tensor's
    dtype, shape and bytes)."""
    if isinstance(value, torch.Tensor):
        return ("Tensor", str(value.dtype), tuple(value.shape), value.numpy().tobytes())
    if isinstance(value, dict):
        return (type(value).__name__, {k: structure(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [structure(v) for v in value])
    return (type(value).__name__, value)


def batches(loader: Any) -> list[Any]:
    return [structure(batch) for batch in loader]


TARGETS = ["txt", "cls", "json", None, ("cls", "txt")]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_every_kind_of_target_batches_as_torchs_loader_batches_it(
    shards: list[str], target: Any, workers: int
) -> None:
    dataset = fastload.ImageShards(shards, target=target, transform=T.Resize((32, 24)))
    theirs = batches(torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers))
    ours = batches(fastload.DataLoader(dataset, batch_size=4, num_workers=workers))
    assert ours == theirs
    if target == "txt":  # the case that differed: captions came as a list
        assert theirs[0][0] == "list" and theirs[0][1][1][0] == "tuple"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_folders_labels_batch_as_torchs_loader_batches_them(indexed: Path, workers: int) -> None:
    dataset = fastload.ImageFolder(indexed, T.Resize((32, 24)))
    theirs = batches(torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers))
    assert batches(fastload.DataLoader(dataset, batch_size=4, num_workers=workers)) == theirs
