"""What a user names as shards, turned into shard paths.

A pack's folder or its manifest, a folder of ``.tar`` files, a brace pattern in webdataset's
convention (``shards-{0000..0099}.tar``, expanded by the ``braceexpand`` package webdataset uses),
one ``.tar`` file, or a list of any of these.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fastload.shards import manifest as manifests

__all__ = ["Source", "is_shards", "resolve"]


@dataclass(frozen=True)
class Source:
    """Shards to read.

    Attributes:
        shards: Their paths, in order.
        classes: The class names, when a manifest gives them.
        manifest: The manifest, when the shards come from one.
        expected: The manifest's size in bytes of each shard (``None`` without a manifest).
    """

    shards: list[str]
    classes: list[str] = field(default_factory=list)
    manifest: manifests.Manifest | None = None
    expected: list[int] | None = None


def is_shards(source: str | os.PathLike[str]) -> bool:
    """Whether a path names shards rather than a folder of images: a ``.tar`` file, a brace
    pattern, a manifest, or a folder holding a manifest or ``.tar`` files and no sub-folder."""
    text = os.fspath(source)
    if "{" in text or text.endswith((".tar", ".json")) or text.startswith("file://"):
        return True
    path = Path(text)
    if not path.is_dir():
        return False
    if (path / manifests.MANIFEST).is_file():
        return True
    entries = list(path.iterdir())
    return any(p.suffix == ".tar" for p in entries) and not any(p.is_dir() for p in entries)


def _remote(text: str) -> bool:
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme != "file" and scheme.isidentifier()


def resolve(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Source:
    """The shards that ``source`` names (see the module's notes).

    Raises:
        ValueError: ``source`` is empty, names a remote store, or a manifest that cannot be
            read.
        FileNotFoundError: A folder holds no ``.tar`` file, or ``source`` does not exist.
    """
    if isinstance(source, (str, os.PathLike)):
        return _one(os.fspath(source))
    paths: list[str] = []
    for each in source:
        found = _one(os.fspath(each), listed=True)
        if found.manifest is not None:
            raise ValueError(
                f"{os.fspath(each)!r} is a pack: pass it alone, not in a list of shards"
            )
        paths += found.shards
    if not paths:
        raise ValueError("no shards given: the list is empty")
    return Source(paths)


def _one(text: str, *, listed: bool = False) -> Source:
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif _remote(text):
        raise ValueError(
            f"{text!r}: shards on remote storage are not read yet; copy them to a local "
            "folder and pass that"
        )
    if "{" in text:
        from braceexpand import braceexpand

        return Source(list(braceexpand(text)))
    path = Path(text)
    if path.is_dir():
        manifest = path / manifests.MANIFEST
        if manifest.is_file():
            return _from_manifest(manifest)
        shards = sorted(str(p) for p in path.iterdir() if p.suffix == ".tar" and p.is_file())
        if not shards:
            raise FileNotFoundError(f"no .tar shards (and no {manifests.MANIFEST}) in {text!r}")
        return Source(shards)
    if path.suffix == ".json":
        return _from_manifest(path)
    if not path.exists() and not listed:  # one of several: the dataset reports it (on_error)
        raise FileNotFoundError(f"no such shard, folder or manifest: {text!r}")
    return Source([text])


def _from_manifest(path: Path) -> Source:
    manifest = manifests.read(path)
    folder = path.parent
    return Source(
        [str(folder / entry.name) for entry in manifest.shards],
        list(manifest.classes),
        manifest,
        [entry.bytes for entry in manifest.shards],
    )
