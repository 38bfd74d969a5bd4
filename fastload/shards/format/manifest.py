"""The manifest ``fastload pack`` writes beside its shards: what a reader needs to trust them.

It lists each shard (name, index, samples, bytes, SHA-256), the class names (or a COCO
dataset's categories), how the images were stored (bytes unchanged, re-encoded to
``max_side`` at ``quality``, or raw pixels) and a format version. It is written last, under a
temporary name first, so that a manifest never lists a shard that is not complete.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "Manifest",
    "ShardEntry",
    "encode",
    "parse",
    "read",
    "write",
]

MANIFEST = "manifest.json"  # its name inside a pack's folder
FORMAT = "fastload-shards"
VERSION = 1


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a pack.

    Attributes:
        name: The tar file's name, relative to the manifest's folder.
        index: Its index file's name (DALI's v1.2 format), relative to the same folder.
        samples: How many samples it holds.
        bytes: Its size.
        sha256: The SHA-256 of its bytes, in hex.
    """

    name: str
    index: str
    samples: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """A pack's manifest (see the module's notes).

    Attributes:
        shards: The shards, in order: sample ``i`` of the pack is found by counting through them.
        classes: The class names, indexed by label.
        max_side: The longest side images were re-encoded to, or ``None`` (bytes unchanged).
        quality: The JPEG quality of that re-encoding, or ``None``.
        fastload: The fastload version that wrote it.
        version: The manifest format's version.
        categories: A pack of a COCO dataset: its ``categories``, as its annotation file
            lists them (left out of the file when empty).
        pixels: How the image members hold their pixels: ``"encoded"`` (image files) or
            ``"raw"`` (binary PPMs, ``pack(pixels="raw")``); left out of the file when
            ``"encoded"``.
        raw_share: With ``pixels="raw"``, the share of the images stored raw when it was not
            all of them (``pack(raw_share=...)``); left out of the file when ``None``.
    """

    shards: list[ShardEntry]
    classes: list[str] = field(default_factory=list)
    max_side: int | None = None
    quality: int | None = None
    fastload: str = ""
    version: int = VERSION
    categories: list[dict[str, Any]] = field(default_factory=list)
    pixels: str = "encoded"
    raw_share: float | None = None

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        data = {"format": FORMAT, **asdict(self), "samples": self.samples}
        if not self.categories:
            del data["categories"]
        if self.pixels == "encoded":
            del data["pixels"]
        if self.raw_share is None:
            del data["raw_share"]
        return data


def read(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest.

    Raises:
        ValueError: The file is not a fastload shard manifest, or one of a newer format.
        OSError: It cannot be read.
    """
    with open(path, "rb") as file:
        return parse(file.read(), os.fspath(path))


def parse(text: bytes, where: str) -> Manifest:
    """A manifest from its bytes; ``where`` names it in errors.

    Raises:
        ValueError: It is not a fastload shard manifest, or one of a newer format.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where!r} is not a fastload shard manifest: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{where!r} is not a fastload shard manifest (no 'format': {FORMAT!r})")
    if data.get("version", 0) > VERSION:
        raise ValueError(
            f"{where!r} is of manifest version {data['version']}, newer than this fastload reads "
            f"({VERSION}): upgrade fastload"
        )
    return Manifest(
        [ShardEntry(**entry) for entry in data["shards"]],
        list(data.get("classes", [])),
        data.get("max_side"),
        data.get("quality"),
        data.get("fastload", ""),
        int(data.get("version", VERSION)),
        list(data.get("categories", [])),
        str(data.get("pixels", "encoded")),
        data.get("raw_share"),
    )


def encode(manifest: Manifest) -> bytes:
    """The manifest's bytes, as :func:`write` writes them."""
    return (json.dumps(manifest.to_dict(), indent=1) + "\n").encode()


def write(path: str | os.PathLike[str], manifest: Manifest) -> None:
    """Write a manifest under a temporary name, then rename it into place."""
    path = os.fspath(path)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as file:
            file.write(encode(manifest))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
