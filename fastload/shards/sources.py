"""What a user names as shards, turned into shard paths.

A pack's folder or its manifest, a folder of ``.tar`` files, a brace pattern in webdataset's
convention (``shards-{0000..0099}.tar``, expanded by the ``braceexpand`` package webdataset
uses), one ``.tar`` file, or a list of any of these; each may be the URL of remote storage
instead (``s3://bucket/pack``, ``https://host/shards-{0000..0099}.tar``), read through
:class:`fastload.shards.storage.remote.Remote`: a remote "folder" is a prefix, whose
``manifest.json`` is read when it has one, else its ``.tar`` objects are listed. The size of
each remote shard comes from its manifest, its listing, or one request per shard (where the
listing gives none: an HTTP server's index page).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fastload.shards.format import manifest as manifests
from fastload.shards.storage.remote import Remote, is_remote

__all__ = ["LOOKUPS", "Source", "is_shards", "remote_protocol", "resolve"]

LOOKUPS = 16  # requests in flight while the sizes or indexes of remote shards are looked up


@dataclass(frozen=True)
class Source:
    """Shards to read.

    Attributes:
        shards: Their paths, in order.
        classes: The class names, when a manifest gives them.
        manifest: The manifest, when the shards come from one.
        expected: The manifest's size in bytes of each shard (``None`` without a manifest).
        sizes: The size of each remote shard (``None`` for a missing one); empty for local
            shards.
        indexes: The URL of each remote shard's index, when its manifest gives one.
        sha256: Each shard's SHA-256, when its manifest gives it.
    """

    shards: list[str]
    classes: list[str] = field(default_factory=list)
    manifest: manifests.Manifest | None = None
    expected: list[int] | None = None
    sizes: list[int | None] = field(default_factory=list)
    indexes: list[str | None] = field(default_factory=list)
    sha256: list[str | None] = field(default_factory=list)


def is_shards(source: str | os.PathLike[str]) -> bool:
    """Whether a path names shards rather than a folder of images: a ``.tar`` file, a brace
    pattern, a manifest, or a folder holding a manifest or ``.tar`` files and no sub-folder."""
    text = os.fspath(source)
    if is_remote(text):
        return True
    if "{" in text or text.endswith((".tar", ".json")) or text.startswith("file://"):
        return True
    path = Path(text)
    if not path.is_dir():
        return False
    if (path / manifests.MANIFEST).is_file():
        return True
    entries = list(path.iterdir())
    return any(p.suffix == ".tar" for p in entries) and not any(p.is_dir() for p in entries)


def remote_protocol(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> str | None:
    """The URL scheme of remote shards (``"s3"``), or ``None`` for local ones.

    Raises:
        ValueError: A list mixes local and remote shards, or two schemes.
    """
    texts = [os.fspath(source)] if isinstance(source, (str, os.PathLike)) else list(source)
    schemes = {os.fspath(t).partition("://")[0] if is_remote(os.fspath(t)) else None for t in texts}
    if len(schemes) > 1:
        named = sorted(str(s) if s else "local" for s in schemes)
        raise ValueError(f"the shards must all be in one place, got {', '.join(named)}")
    return schemes.pop() if schemes else None


def resolve(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    remote: Remote | None = None,
) -> Source:
    """The shards that ``source`` names (see the module's notes).

    Args:
        source: What the user names.
        remote: How to reach remote shards (see :func:`remote_protocol`).

    Raises:
        ValueError: ``source`` is empty, or names a manifest that cannot be read.
        FileNotFoundError: A folder holds no ``.tar`` file, or ``source`` does not exist.
        RemoteError: Remote storage cannot be reached.
    """
    if remote is not None:
        return _remote(source, remote)
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


def _remote(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], remote: Remote
) -> Source:
    texts = [os.fspath(source)] if isinstance(source, (str, os.PathLike)) else list(source)
    urls: list[str] = []
    for text in [os.fspath(t) for t in texts]:
        if "{" in text:
            from braceexpand import braceexpand

            urls += braceexpand(text)
        elif text.endswith(".json"):
            if len(texts) > 1:
                raise ValueError(f"{text!r} is a pack: pass it alone, not in a list of shards")
            return _remote_manifest(text, remote)
        elif text.endswith(".tar"):
            urls.append(text)
        else:  # a prefix: a pack, or a "folder" of shards
            prefix = text.rstrip("/")
            if remote.exists(f"{prefix}/{manifests.MANIFEST}") and len(texts) == 1:
                return _remote_manifest(f"{prefix}/{manifests.MANIFEST}", remote)
            listed = [(url, size) for url, size in remote.listing(prefix) if url.endswith(".tar")]
            named_file = "." in prefix.rsplit("/", 1)[-1]
            if not listed and named_file and remote.exists(prefix):  # an object, not a prefix
                raise ValueError(
                    f"{text!r} is not a .tar shard: shards are read by offset, which needs "
                    "uncompressed .tar files (decompress a .tgz or .tar.gz first)"
                )
            if not listed:
                raise FileNotFoundError(f"no .tar shards (and no {manifests.MANIFEST}) at {text!r}")
            if len(texts) == 1:
                sizes = [s for _, s in listed]
                if None in sizes:  # an HTTP server's index page lists names alone
                    sizes = _sizes([u for u, _ in listed], remote)
                return Source([u for u, _ in listed], sizes=sizes)
            urls += [u for u, _ in listed]
    if not urls:
        raise ValueError("no shards given: the list is empty")
    return Source(urls, sizes=_sizes(urls, remote))


def _sizes(urls: list[str], remote: Remote) -> list[int | None]:
    def size(url: str) -> int | None:
        try:
            return remote.size(url)
        except FileNotFoundError:
            return None  # the dataset reports it (on_error)

    with ThreadPoolExecutor(LOOKUPS, thread_name_prefix="fastload-lookup") as pool:
        return list(pool.map(size, urls))


def _remote_manifest(url: str, remote: Remote) -> Source:
    manifest = manifests.parse(remote.read_all(url), url)
    folder = url.rsplit("/", 1)[0]
    return Source(
        [f"{folder}/{entry.name}" for entry in manifest.shards],
        list(manifest.classes),
        manifest,
        [entry.bytes for entry in manifest.shards],
        sizes=[entry.bytes for entry in manifest.shards],
        indexes=[f"{folder}/{entry.index}" for entry in manifest.shards],
        sha256=[entry.sha256 for entry in manifest.shards],
    )
