"""``ImageShards``: a map-style dataset of images stored in tar shards (the WebDataset layout).

Each shard's index (DALI's v1.2 format; made by a scan when a shard has none, see
:mod:`fastload.shards.format.index`) gives every member's offset, so that a sample is one positioned
read: its image and its ``.cls`` member, with their tar headers, which are checked against the
index. The bytes then take the decode path of every fastload dataset
(:class:`fastload.datasets.ImageDataset`): the same file bytes give the same pixels as from a
folder.

Problems are met where they are found. At construction: a missing shard, a file that is not an
uncompressed tar, a tar cut inside a header (what follows is lost), a shard shorter than its
manifest says (cut short: the samples that lie whole before the cut are read, and the shard is
recorded with the byte where it ends and the samples lost; its scan is not kept as its index,
so the loss is reported again next time), member names that make no sample or an ambiguous
one. At reading: a member cut short, an index that no longer matches its
shard, bytes that are not an image, a sample without ``.cls``. Each is one error naming the
shard and member, or with ``on_error="skip"`` costs only the samples concerned, which are
recorded in :attr:`ImageShards.bad_files` (at construction, with one warning; at reading, as the
folder datasets report them).

Remote shards (``s3://``, ``https://``, any fsspec URL) are read through a local cache of whole
shards (:mod:`fastload.shards.storage.cache`). When the cache can hold them all
(``cache_limit=None``, the default, or a limit above their size), a worker that needs a shard
not yet cached downloads it whole, and every later read is local. When it cannot, only the
read-ahead of :class:`fastload.ShardSampler` downloads whole shards, within the limit, ahead of
its order; a sample of a shard that is neither cached nor being downloaded (a random order,
which is not shard-aware) is read with one ranged request, and caches nothing.
:meth:`ImageShards.reading` says which way a dataset reads under a sampler.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastload import backends
from fastload.datasets import ImageDataset, OnError, check_options
from fastload.errors import UnreadableImageWarning
from fastload.memory.compact import Strings
from fastload.shards import indexing, sources
from fastload.shards.format import index as indexes
from fastload.shards.format import members
from fastload.shards.format.tar import BLOCK, Member, check_header
from fastload.shards.sampler import ShardSampler
from fastload.shards.storage.cache import ShardCache
from fastload.shards.storage.local import read_range
from fastload.shards.storage.readahead import ReadAhead
from fastload.shards.storage.remote import DEFAULT_TIMEOUT, Remote
from fastload.system import cache_dir as fastload_cache

__all__ = ["IMAGE_EXTENSIONS", "ImageShards", "ShardError"]

# the members taken as the image, in this order of preference (webdataset's image extensions)
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "pnm", "bmp", "tif", "tiff")


class ShardError(ValueError):
    """A shard, or a member of one, that cannot be read as samples; the message names it."""


@dataclass
class _Slot:
    """Where one target member of each sample is (``-1``: the sample lacks it)."""

    offset: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    ext: list[int] = field(default_factory=list)


@dataclass
class _Table:
    """The samples of all shards, as arrays (see :mod:`fastload.memory.compact` for why arrays)."""

    shard: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    image_offset: list[int] = field(default_factory=list)
    image_size: list[int] = field(default_factory=list)
    image_ext: list[int] = field(default_factory=list)
    slots: list[_Slot] = field(default_factory=list)
    exts: dict[str, int] = field(default_factory=dict)

    def code(self, ext: str) -> int:
        return self.exts.setdefault(ext, len(self.exts))

    def add(
        self, shard: int, key: str, image: indexes.Part, targets: Sequence[indexes.Part | None]
    ) -> None:
        self.shard.append(shard)
        self.keys.append(key)
        self.image_offset.append(image.offset)
        self.image_size.append(image.size)
        self.image_ext.append(self.code(image.ext))
        for slot, part in zip(self.slots, targets, strict=True):
            slot.offset.append(part.offset if part is not None else -1)
            slot.size.append(part.size if part is not None else 0)
            slot.ext.append(self.code(part.ext) if part is not None else -1)


def image_part(
    parts: Sequence[indexes.Part], names: Sequence[str] | None = None
) -> indexes.Part | None:
    """The member taken as a sample's image: the first of ``names`` it has; by default the
    first of :data:`IMAGE_EXTENSIONS` by extension, or else by the last part of a longer one
    (``left.jpg``)."""
    if names is not None:
        return members.choose(parts, names)
    by_ext = {p.ext.lower(): p for p in parts}
    for ext in IMAGE_EXTENSIONS:
        if ext in by_ext:
            return by_ext[ext]
    for part in parts:
        if part.ext.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS:
            return part
    return None


class ImageShards(ImageDataset):
    """Images and their targets (``.cls`` labels, ``.txt`` captions, any member) in tar
    shards, as a map-style dataset.

    ``ds[i]`` returns ``(image, target)``, the image as :class:`fastload.ImageFolder` gives it
    for the same bytes (just the image with ``target=None``). Samples are numbered shard by
    shard, in each shard's order; each is read with one positioned read (no tar scan at read
    time), through a few open files per thread however many shards there are. Everything
    fastload's loader does with a dataset (samplers, resume, DDP, the batch executors,
    ``batch_transforms``, ``device="cuda"``) works on it unchanged; :class:`fastload.ShardSampler`
    orders an epoch so that reading stays within a few shards at a time.

    Args:
        source: A folder written by :func:`fastload.pack` (or its ``manifest.json``), a folder
            of ``.tar`` files, a brace pattern (``"shards-{0000..0099}.tar"``), one ``.tar``
            file, or a list of shard paths; or any of these as URLs of remote storage
            (``"s3://bucket/pack"``, ``"https://host/shards-{0000..0099}.tar"``).
        transform: What to do with each image (see :class:`fastload.ImageList`).
        target_transform: Called on each target (a tokenizer on captions), where the image is
            decoded.
        backend: ``"auto"`` or any name in ``fastload.backends.names()``.
        on_error: ``"raise"``: a shard or sample that cannot be read raises an error naming
            the shard and member. ``"skip"``: its samples are left out and recorded in
            :attr:`bad_files` (see the module's notes). A sample without the image or target
            member asked for is such a sample (with ``"skip"``, left out at construction, so
            that the length counts only whole samples; with ``"raise"``, named when read).
        image: The image member's extension, with alternatives in webdataset's syntax
            (``"jpg;png;jpeg;webp"``: the first present wins); by default any image
            extension (:data:`IMAGE_EXTENSIONS`, in that order).
        target: The target member: ``"cls"`` (an ``int``), ``"txt"`` (a ``str``), ``"json"``
            (the parsed object), another extension (its bytes), alternatives
            (``"txt;caption"``), a tuple of these (a tuple of values), or ``None`` (samples
            are images alone).
        max_pixels: Refuse (as unreadable) images whose header claims more pixels.
        exif_orientation: Apply each image's EXIF orientation (the default).
        storage_options: For remote shards: passed to ``fsspec.filesystem`` (credentials,
            ``client_kwargs={"endpoint_url": ...}``); by default the library's environment
            variables and config files apply.
        cache_dir: For remote shards: the folder of the local shard cache, shared by every
            process of the machine that names it (default: ``shards`` in fastload's cache
            folder, see ``fastload.system.cache_dir``).
        cache_limit: For remote shards: the most bytes the cache's shards may take (default:
            no bound); see the module's notes for what a limit below the dataset's size does.
        timeout: For remote shards: seconds one request may take before it is cancelled and
            retried; two stalled requests for one shard fail it (see
            :mod:`fastload.shards.storage.remote`).

    Raises:
        ShardError: With ``on_error="raise"``, a shard or member that cannot be read as samples.
        FileNotFoundError: ``source`` does not exist, or (``on_error="raise"``) a shard it
            lists does not.
        ValueError: A bad option, or a ``source`` that names nothing readable.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        image: str | None = None,
        target: members.Target = "cls",
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        check_options(on_error, max_pixels)
        self._image = members.alternatives(image) if image is not None else None
        self._slots = members.target_slots(target)
        self.target = target
        self.has_targets = target is not None
        self._cache = _cache(source, storage_options, cache_dir, cache_limit, timeout)
        found = sources.resolve(source, self._cache.remote if self._cache else None)
        self._sizes, self._sha256 = found.sizes, found.sha256
        self.bad_files: dict[str, str] = {}
        self.manifest = found.manifest
        self.classes = list(found.classes)
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._index_files: list[str | None] = []
        table = self._read_indexes(found, on_error)
        self._set_table(found.shards, table)
        used = np.unique(self._shard).tolist()
        # the size of the remote shards that hold samples (0 for local shards)
        self.remote_bytes = sum(self._sizes[number] or 0 for number in used) if self._sizes else 0
        limit = self._cache.limit if self._cache is not None else None
        self._whole = limit is None or limit >= self.remote_bytes
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)

    # ------------------------------------------------------------ construction

    def _read_indexes(self, found: sources.Source, on_error: str) -> _Table:
        table = _Table(slots=[_Slot() for _ in self._slots])
        lost: list[tuple[str, str]] = []
        for number, (problems, index) in enumerate(indexing.index_all(found, self._cache)):
            shard = found.shards[number]
            self._index_files.append(index.index if index is not None else None)
            for key, parts in index.samples if index is not None else ():
                image = image_part(parts, self._image)
                if image is None:
                    exts = ", ".join(p.ext for p in parts)
                    problems.append((f"{shard}:{key}", f"sample has no image member ({exts})"))
                    continue
                targets = [members.choose(parts, names) for names in self._slots]
                if on_error == "skip" and None in targets:  # left out now: whole batches
                    wanted = ";".join(self._slots[targets.index(None)])
                    problems.append((f"{shard}:{image.name}", f"sample has no .{wanted} member"))
                    continue
                table.add(number, key, image, targets)
            if problems and on_error == "raise":
                where, why = problems[0]
                more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
                error = FileNotFoundError if why == indexing.MISSING else ShardError
                raise error(f"cannot read {where!r}: {why}{more}")
            lost += problems
        if lost:
            self.bad_files.update(lost)
            warnings.warn(
                f"left out what {len(lost)} problem(s) in the shards cost (missing or broken "
                f"shards, members that make no sample); see the dataset's bad_files",
                UnreadableImageWarning,
                stacklevel=3,
            )
        return table

    def _set_table(self, shards: list[str], table: _Table) -> None:
        self._shards = list(shards)
        self._shard = np.asarray(table.shard, dtype=np.int32)
        self._keys = Strings(table.keys)
        self._image_offset = np.asarray(table.image_offset, dtype=np.int64)
        self._image_size = np.asarray(table.image_size, dtype=np.int64)
        self._image_ext = np.asarray(table.image_ext, dtype=np.int16)
        self._target_offset = [np.asarray(s.offset, dtype=np.int64) for s in table.slots]
        self._target_size = [np.asarray(s.size, dtype=np.int64) for s in table.slots]
        self._target_ext = [np.asarray(s.ext, dtype=np.int16) for s in table.slots]
        self._exts = list(table.exts)
        self._labels: np.ndarray | None = None

    # ------------------------------------------------------------ what a sample is

    def __len__(self) -> int:
        return len(self._shard)

    @property
    def shards(self) -> list[str]:
        """The shards' paths, in order."""
        return list(self._shards)

    @property
    def shard_sizes(self) -> np.ndarray:
        """How many samples each shard holds (samples are numbered shard by shard).

        Raises:
            ValueError: A :meth:`subset` whose samples are not in shard order.
        """
        if len(self._shard) > 1 and not bool(np.all(np.diff(self._shard) >= 0)):
            raise ValueError(
                "this subset's samples are not in their shards' order: an order by shard "
                "(ShardSampler) needs a subset of ascending indices"
            )
        return np.bincount(self._shard, minlength=len(self._shards))

    def subset(self, indices: Sequence[int]) -> Any:
        """A copy holding the samples at ``indices``, in that order (what
        ``torch.utils.data.Subset(self, indices)`` serves, as a dataset of its own; with
        ascending indices, :class:`fastload.ShardSampler` still orders it by shard).

        The copy shares the shards, their cache, the transforms and :attr:`bad_files` with
        this dataset.
        """
        other = copy.copy(self)
        picked = np.asarray(indices, dtype=np.int64)
        other._shard = self._shard[picked]
        other._keys = Strings([self._keys[int(i)] for i in picked])
        other._image_offset = self._image_offset[picked]
        other._image_size = self._image_size[picked]
        other._image_ext = self._image_ext[picked]
        other._target_offset = [offsets[picked] for offsets in self._target_offset]
        other._target_size = [sizes[picked] for sizes in self._target_size]
        other._target_ext = [exts[picked] for exts in self._target_ext]
        other._labels = self._labels[picked] if self._labels is not None else None
        return other

    def shard_of(self, index: int) -> str:
        """The path of the shard that holds sample ``index``."""
        return self._shards[int(self._shard[index])]

    def key(self, index: int) -> str:
        """Sample ``index``'s key (its members' name up to the first dot)."""
        return self._keys[index]

    def path(self, index: int) -> str:
        """Sample ``index``'s image member, named as ``SHARD:MEMBER``."""
        return f"{self.shard_of(index)}:{self._member(index, None).name}"

    def _member(self, index: int, slot: int | None) -> Member:
        """The image member (``slot=None``) or target ``slot``'s member of sample ``index``.

        Raises:
            ValueError: The sample lacks that target member.
        """
        if slot is None:
            offsets, sizes, ext = self._image_offset, self._image_size, self._image_ext[index]
        else:
            offsets, sizes, ext = (
                self._target_offset[slot],
                self._target_size[slot],
                self._target_ext[slot][index],
            )
            if offsets[index] < 0:
                wanted = ";".join(self._slots[slot])
                raise ValueError(f"sample {self._keys[index]!r} has no .{wanted} member")
        name = f"{self._keys[index]}.{self._exts[int(ext)]}"
        return Member(name, int(offsets[index]), int(sizes[index]))

    def read_sample(self, index: int) -> tuple[bytes, Any]:
        """Sample ``index``'s image bytes and target (see ``target``), read with one positioned
        read (a sample's members are next to each other in its shard).

        Raises:
            ValueError: It lacks the target member, the shard is cut short inside it, the
                index no longer matches the shard, or a target member cannot be read as its
                extension says (see :func:`fastload.shards.format.members.value`).
            OSError: The shard cannot be read.
        """
        parts = [self._member(index, None)]
        parts += [self._member(index, slot) for slot in range(len(self._slots))]
        start = min(p.offset for p in parts) - BLOCK
        end = max(p.end for p in parts)
        data = self._read(int(self._shard[index]), start, end - start)
        if len(data) < end - start:
            raise ValueError(
                f"the shard is cut short: it ends at byte {start + len(data)}, inside this "
                f"sample (which ends at byte {end})"
            )
        view = memoryview(data)
        for member in parts:
            at = member.offset - start
            why = check_header(bytes(view[at - BLOCK : at]), member)
            if why is not None:
                raise ValueError(f"{self._stale(index)} at member {member.name!r}: {why}")
        image, *targets = (bytes(view[p.offset - start : p.end - start]) for p in parts)
        exts = [self._exts[int(codes[index])] for codes in self._target_ext]
        values = [members.value(ext, t) for ext, t in zip(exts, targets, strict=True)]
        if not isinstance(self.target, tuple):
            return image, values[0] if values else None
        return image, tuple(values)

    def _read(self, shard: int, offset: int, size: int) -> bytes:
        if self._cache is None:
            return read_range(self._shards[shard], offset, size)
        shard_size = self._sizes[shard]
        assert shard_size is not None  # a shard without a size has no samples
        return self._cache.read(
            self._shards[shard],
            offset,
            size,
            shard_size=shard_size,
            sha256=self._sha256[shard] if self._sha256 else None,
            whole=self._whole,
        )

    # ------------------------------------------------------------ remote shards

    @property
    def cache(self) -> ShardCache | None:
        """The local cache of remote shards (``None`` for local shards)."""
        return self._cache

    def read_ahead(
        self, indices: Sequence[int] | np.ndarray, position: Callable[[], int], *, window: int = 1
    ) -> ReadAhead | None:
        """Start downloading the remote shards of ``indices``, in their order, into the cache
        (``None`` for local shards). :class:`fastload.ShardSampler` calls this each epoch.

        Args:
            indices: The samples a rank will read, in order.
            position: How many of them have been handed out so far.
            window: Shards the order reads together (its sampler's ``window``).
        """
        if self._cache is None or not len(indices):
            return None
        wanted = [
            (url, size or 0, self._sha256[number] if self._sha256 else None)
            for number, (url, size) in enumerate(zip(self._shards, self._sizes, strict=True))
        ]
        sequence = self._shard[np.asarray(indices, dtype=np.int64)]
        lag = max(256, 2 * int(np.median(self.shard_sizes)))
        return ReadAhead(self._cache, wanted, sequence, position, lag=lag, window=window)

    def reading(self, sampler: Any = None) -> str:
        """How the samples are read under ``sampler`` (one line, for ``explain``)."""
        if self._cache is None:
            return f"reads {len(self._shards)} local shards with positioned reads"
        cache = self._cache
        limit = "no limit" if cache.limit is None else f"limit {cache.limit / 2**30:.2f} GiB"
        where = f"{len(self._shards)} remote shards ({self.remote_bytes / 2**30:.2f} GiB)"
        head = f"reads {where} through the cache {str(cache.folder)!r} ({limit}): "
        shard_aware = isinstance(sampler, ShardSampler)
        if self._whole:
            if shard_aware:
                return head + "whole shards downloaded ahead of ShardSampler's order"
            return head + (
                "whole shards downloaded when first needed (a ShardSampler would download them "
                "ahead of its order)"
            )
        if shard_aware:
            return head + "whole shards downloaded ahead of ShardSampler's order, within the limit"
        return head + (
            f"the cache holds less than the dataset and {type(sampler).__name__}'s order is not "
            "shard-aware, so each sample not cached is one ranged request (use ShardSampler)"
        )

    def _stale(self, index: int) -> str:
        where = self._index_files[int(self._shard[index])]
        if where is None:
            return "the shard changed while it was being read"
        return f"the index {where!r} no longer matches the shard (delete it to have it made again)"

    # ------------------------------------------------------------ torchvision's attributes

    @property
    def labels(self) -> np.ndarray:
        """Every sample's label (an int64 array), read from the ``.cls`` members on first use
        (one small read per sample).

        Raises:
            ValueError: The target is not ``"cls"``, or a sample has no ``.cls`` member, or one
                that is not an integer.
        """
        if self._slots != [("cls",)]:
            raise ValueError(
                f"labels are the .cls members; this dataset's target is {self.target!r}"
            )
        if self._labels is None:
            labels = np.empty(len(self), dtype=np.int64)
            for i in range(len(self)):
                member = self._member(i, 0)
                text = self._read(int(self._shard[i]), member.offset, member.size)
                labels[i] = members.value("cls", text)
            self._labels = labels
        view = self._labels.view()
        view.flags.writeable = False
        return view

    @property
    def targets(self) -> list[int]:
        """The labels as a list of ints (see :attr:`labels`)."""
        return self.labels.tolist()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} images in {len(self._shards)} shards, "
            f"backend={self.backend!r}, on_error={self.on_error!r}, transform={self.transform!r})"
        )


def _cache(
    source: Any,
    storage_options: dict[str, Any] | None,
    cache_dir: str | os.PathLike[str] | None,
    cache_limit: int | None,
    timeout: float,
) -> ShardCache | None:
    """The cache that reads remote shards, or ``None`` for local ones (which take none of the
    remote options)."""
    protocol = sources.remote_protocol(source)
    if protocol is None:
        given: dict[str, object] = {"storage_options": storage_options, "cache_dir": cache_dir}
        given |= {"cache_limit": cache_limit, "timeout": timeout != DEFAULT_TIMEOUT or None}
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise ValueError(f"{', '.join(named)} apply to remote shards; {source!r} is local")
        return None
    if cache_limit is not None and (not isinstance(cache_limit, int) or cache_limit < 1):
        raise ValueError(f"cache_limit={cache_limit!r} must be a number of bytes, at least 1")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout={timeout!r} must be a number of seconds above 0")
    folder = cache_dir if cache_dir is not None else fastload_cache() / "shards"
    return ShardCache(folder, cache_limit, Remote(protocol, storage_options, float(timeout)))
