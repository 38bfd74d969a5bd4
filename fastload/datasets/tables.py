""":class:`ImageTable`: images stored as encoded bytes in a column of a table, read where they
are: Parquet files (the Hugging Face Hub's layout, local or at any fsspec URL) or a Hugging Face
``datasets.Dataset``, decoded by fastload's backends fused with the transform."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from fastload import backends
from fastload._optional import MissingDependencyError
from fastload.backends.files import read_file
from fastload.datasets.image_dataset import ImageDataset, OnError, check_options
from fastload.datasets.row_groups import RowGroups

__all__ = ["ImageTable", "ImageTableStream", "TableRows", "is_hf_dataset", "is_hf_stream"]

Source = Any  # a path, URL or glob (or a list of them), a pyarrow.Table, a datasets.Dataset


class ImageTable(ImageDataset):
    """Images from a column of encoded image files in a table, with an optional target column.

    ``ds[i]`` returns ``(image, target)`` (see :class:`ImageDataset` for the image), or the
    image alone with ``target=None``. The image column holds each image's encoded bytes: a
    binary column, or the ``{"bytes", "path"}`` struct of Hugging Face's ``Image`` feature,
    whose rows without bytes are read from their ``path`` (what
    ``datasets.load_dataset("imagefolder")`` stores). The bytes are never decoded by Pillow
    whole before the crop: they go to fastload's backend with the transform's planned ops.

    Parquet files are read once into memory (the image and target columns only), in the
    process that makes the dataset; worker processes forked from it share those pages. With
    ``in_memory=False`` they are read a row group at a time as samples ask for them, each
    process keeping the last few (:mod:`fastload.datasets.row_groups`), for tables larger than
    memory: the row groups are the table's shards (``shard_sizes``), so that
    ``fastload.ShardSampler(table)`` orders the samples a few row groups at a time (with
    ``shuffle=True`` every sample would read a row group of its own). A ``datasets.Dataset``
    is read row by row from its own memory-mapped Arrow files, in its order (``select``,
    ``shuffle`` and ``train_test_split`` kept).

    Args:
        source: A Parquet file, a folder of them, a glob, a list of those (local paths or
            fsspec URLs: ``s3://``, ``hf://``, ``https://``), a ``pyarrow.Table``, or a
            ``datasets.Dataset``.
        transform: What to do with each image (see :class:`ImageDataset`).
        target_transform: Called on each target.
        image: The image column.
        target: The target column (a class index, a string, any value), several columns (the
            target is then a dict of their values, by name), or ``None``.
        storage_options: Passed to fsspec for a URL (credentials, endpoint).
        backend: As :class:`fastload.ImageList`'s.
        on_error: As :class:`fastload.ImageList`'s; an unreadable row is named by its row and,
            where the table has one, its file's path.
        max_pixels: Refuse images whose header claims more pixels.
        exif_orientation: Apply each image's EXIF orientation, as ``datasets`` does when it
            decodes an image; ``False`` keeps the stored pixels.
        in_memory: Read Parquet files whole into memory once (``False``: a row group at a
            time, see above).

    Attributes:
        classes: The class names of a Hugging Face ``ClassLabel`` target column (from the
            ``datasets.Dataset``'s features, or the Parquet files' Hugging Face metadata);
            empty otherwise.
        shard_sizes: With ``in_memory=False``, each row group's number of rows (what
            :class:`fastload.ShardSampler` orders by); ``None`` otherwise.

    Raises:
        ValueError: A column that is not in the table (with the columns it has), no Parquet
            file at ``source``, ``in_memory=False`` for a source that is no Parquet files, or
            a bad option.
        TypeError: A streaming ``datasets.IterableDataset``, which has no random access
            (:class:`ImageTableStream` reads it; its Parquet files with ``in_memory=False``
            are read a row group at a time).
        fastload.MissingDependencyError: pyarrow (or fsspec, for a URL) is not installed.
    """

    def __init__(
        self,
        source: Source,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        image: str = "image",
        target: str | Sequence[str] | None = "label",
        storage_options: dict[str, Any] | None = None,
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        in_memory: bool = True,
    ) -> None:
        check_options(on_error, max_pixels)
        _check_source(source, in_memory)
        self.image, self.target = image, target
        self.has_targets = target is not None
        self._targets = (
            [] if target is None else [target] if isinstance(target, str) else list(target)
        )
        columns = [image, *self._targets]
        one = target if isinstance(target, str) else None  # a ClassLabel's names: one column's
        self._rows: Any = None
        self._table: Any = None
        self._groups: RowGroups | None = None
        self.shard_sizes: list[int] | None = None
        if is_hf_dataset(source):
            self._rows = _hf_rows(source, columns)
            self.classes = _class_names(source.features.get(one) if one else None)
            self._parts = [("dataset", len(self._rows))]
        elif not in_memory:
            self._groups = _row_groups(source, columns, storage_options)
            self.classes = _classes_from_metadata(self._groups.metadata, one)
            self._parts, self.shard_sizes = self._groups.parts, list(self._groups.sizes)
        else:
            self._table, metadata, self._parts = _arrow_table(source, columns, storage_options)
            self.classes = _classes_from_metadata(metadata, one)
        self._starts = np.cumsum([0] + [rows for _, rows in self._parts])
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)

    def __len__(self) -> int:
        if self._groups is not None:
            return len(self._groups)
        return len(self._rows) if self._table is None else self._table.num_rows

    def _cell(self, index: int) -> tuple[Any, Any]:
        """Row ``index``'s image cell and target, as Python values."""
        if self._table is None:
            row = self._rows[index] if self._groups is None else self._groups.row(index)
            image, values = row[self.image], [row[name] for name in self._targets]
        else:
            image = self._table.column(self.image)[index].as_py()
            values = [self._table.column(name)[index].as_py() for name in self._targets]
        if isinstance(self.target, str):
            return image, values[0]
        return image, dict(zip(self._targets, values, strict=True)) if self._targets else None

    def path(self, index: int) -> str:
        """Row ``index``, named by its row and, where the table has it, its file's path."""
        try:
            cell, _ = self._cell(index)
        except Exception:  # a name for an error must not raise one of its own
            cell = None
        where = cell.get("path") if isinstance(cell, dict) else None
        part = int(np.searchsorted(self._starts, index, side="right")) - 1
        name = self._parts[min(part, len(self._parts) - 1)][0]
        row = index - int(self._starts[min(part, len(self._parts) - 1)])
        return f"{name} row {row}" + (f" ({where})" if where else "")

    def read_sample(self, index: int) -> tuple[bytes, Any]:
        """The encoded image of row ``index`` and its target."""
        cell, target = self._cell(index)
        return _image_bytes(cell, self.image), target


def _image_bytes(cell: Any, column: str) -> bytes:
    """The encoded image an image cell holds: its bytes, or the file at its ``path``.

    Raises:
        ValueError: The cell holds neither.
    """
    if isinstance(cell, dict):
        data, where = cell.get("bytes"), cell.get("path")
        if data is None:
            if not where:
                raise ValueError("the row has neither the image's bytes nor its path")
            data = read_file(where)
    else:
        data = cell
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"the {column!r} column holds {type(data).__name__}, not bytes")
    return bytes(data)


def is_hf_dataset(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.Dataset`` (without importing datasets
    when it is not installed)."""
    module = type(source).__module__
    if module != "datasets" and not module.startswith("datasets."):
        return False
    import datasets

    return isinstance(source, datasets.Dataset)


def _check_source(source: Any, in_memory: bool) -> None:
    """Refuse what ImageTable cannot read the way asked, saying what to give instead.

    Raises:
        TypeError: A streaming ``datasets.IterableDataset``.
        ValueError: ``in_memory=False`` for a source that is not Parquet files.
    """
    if is_hf_stream(source):
        raise TypeError(
            "fastload.ImageTable reads a table by row, and a streaming datasets.IterableDataset "
            "has no rows to index: read it with fastload.ImageTableStream, or give ImageTable "
            "its Parquet files (a folder, a glob, 'hf://datasets/<repo>/<path>/*.parquet') "
            "with in_memory=False, which reads them a row group at a time"
        )
    in_arrow = type(source).__module__.split(".")[0] == "pyarrow"
    if not in_memory and (is_hf_dataset(source) or in_arrow):
        raise ValueError(
            f"in_memory=False reads Parquet files a row group at a time; a "
            f"{type(source).__name__} is in memory (or memory-mapped) already: leave it True"
        )


def _row_groups(source: Any, columns: list[str], storage_options: dict[str, Any] | None) -> Any:
    """The Parquet files at ``source``, read a row group at a time.

    Raises:
        ValueError: A column the files do not have, with the ones they have.
    """
    import pyarrow.parquet as pq

    filesystem, files = _parquet_files(source, storage_options)
    for name in files:
        _check_columns(columns, pq.read_schema(name, filesystem=filesystem).names, where=name)
    return RowGroups(filesystem, files, columns)


def _hf_rows(dataset: Any, columns: list[str]) -> Any:
    """The dataset's image and target columns, its images as undecoded ``{"bytes", "path"}``.

    Raises:
        ValueError: A column it does not have, with the ones it has.
    """
    _check_columns(columns, list(dataset.column_names))
    import datasets

    rows = dataset.with_format(None).select_columns(columns)  # no transform of its own
    if isinstance(rows.features[columns[0]], datasets.Image):
        rows = rows.cast_column(columns[0], datasets.Image(decode=False))
    return rows


def _arrow_table(
    source: Any, columns: list[str], storage_options: dict[str, Any] | None
) -> tuple[Any, dict[bytes, bytes], list[tuple[str, int]]]:
    """The columns of a pyarrow Table, or of the Parquet files at ``source``; the schema's
    metadata; and each file's name with its number of rows, in order."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(
            f"fastload.ImageTable reads tables with pyarrow ({exc}). Install it with: "
            "pip install pyarrow"
        ) from exc
    if isinstance(source, pa.Table):
        _check_columns(columns, source.column_names)
        table = source.select(columns)
        return table, dict(source.schema.metadata or {}), [("table", table.num_rows)]
    filesystem, files = _parquet_files(source, storage_options)
    tables = []
    for name in files:
        schema = pq.read_schema(name, filesystem=filesystem)
        _check_columns(columns, schema.names, where=name)
        tables.append(pq.read_table(name, columns=columns, filesystem=filesystem))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    parts = [(name, t.num_rows) for name, t in zip(files, tables, strict=True)]
    return table, dict(tables[0].schema.metadata or {}), parts


def _parquet_files(source: Any, storage_options: dict[str, Any] | None) -> tuple[Any, list[str]]:
    """The fsspec filesystem and the Parquet files that ``source`` names (a file, a folder of
    them, a glob, or a list of those), in sorted order within each.

    Raises:
        ValueError: No Parquet file there.
    """
    try:
        import fsspec
    except ImportError as exc:
        raise MissingDependencyError(
            f"fastload.ImageTable finds Parquet files with fsspec ({exc}). Install it with: "
            "pip install fsspec"
        ) from exc
    names = (
        [os.fspath(s) for s in source]
        if isinstance(source, Sequence) and not isinstance(source, str)
        else [os.fspath(source)]
    )
    filesystem, files = None, []
    for name in names:
        filesystem, path = fsspec.core.url_to_fs(name, **(storage_options or {}))
        if any(c in path for c in "*?["):
            found = sorted(filesystem.glob(path))
        elif filesystem.isdir(path):
            found = sorted(p for p in filesystem.find(path) if p.endswith(".parquet"))
        else:
            found = [path] if filesystem.exists(path) else []
        if not found:
            raise ValueError(f"no Parquet file at {name!r}")
        files += found
    return filesystem, files


def _check_columns(wanted: list[str], present: list[str], *, where: str = "the table") -> None:
    missing = [c for c in wanted if c not in present]
    if missing:
        raise ValueError(
            f"column {missing[0]!r} is not in {where}; its columns: {', '.join(present)} "
            "(choose them with image= and target=)"
        )


def _class_names(feature: Any) -> list[str]:
    """The names of a Hugging Face ``ClassLabel`` feature; empty for any other."""
    names = getattr(feature, "names", None)
    return list(names) if isinstance(names, list) else []


def _classes_from_metadata(metadata: dict[bytes, bytes], target: str | None) -> list[str]:
    """A ``ClassLabel`` target's names from the Hugging Face metadata a Parquet file written
    by ``datasets`` carries; empty when there is none."""
    raw = metadata.get(b"huggingface")
    if raw is None or target is None:
        return []
    try:
        features = json.loads(raw)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return []
    feature = features.get(target, {}) if isinstance(features, dict) else {}
    names = feature.get("names") if feature.get("_type") == "ClassLabel" else None
    return list(names) if isinstance(names, list) else []


class TableRows(ImageTable):
    """An :class:`ImageTable` whose samples are its rows as dicts, the decoded image under
    ``key`` and every other column by name: the rows a Hugging Face ``with_transform`` of the
    shape ``batch[key] = [transform(image) for image in batch[image_column]]`` leaves, less the
    image column itself (decoded here: a collate function that reads it gets a KeyError naming
    it).

    Args:
        source: A ``datasets.Dataset`` (its format and transform left aside), Parquet files or
            a ``pyarrow.Table``, as :class:`ImageTable` takes.
        transform: Run on each image, as :class:`ImageTable` runs it.
        image: The image column.
        key: Where each row holds its transformed image.
        **options: :class:`ImageTable`'s other options.
    """

    def __init__(
        self,
        source: Source,
        transform: Callable[[Any], Any] | None,
        *,
        image: str,
        key: str,
        **options: Any,
    ) -> None:
        names = source.column_names if is_hf_dataset(source) else _column_names(source)
        others = [name for name in names if name != image]
        super().__init__(source, transform, image=image, target=others, **options)
        self.key = key

    def _cell(self, index: int) -> tuple[Any, Any]:
        image, values = super()._cell(index)
        return image, values or {}

    def __getitem__(self, index: int) -> Any:
        sample = super().__getitem__(index)
        if not isinstance(sample, tuple):  # a Skipped marker (on_error="skip")
            return sample
        image, values = sample
        return {**values, self.key: image}


def _column_names(source: Any) -> list[str]:
    """The columns of a ``pyarrow.Table``, or of the first Parquet file a source names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(source, pa.Table):
        return list(source.column_names)
    filesystem, files = _parquet_files(source, None)
    return list(pq.read_schema(files[0], filesystem=filesystem).names)


class ImageTableStream(ImageDataset, IterableDataset):
    """:class:`ImageTable` for a streaming Hugging Face ``datasets.IterableDataset``
    (``load_dataset(..., streaming=True)``): its rows in the order it streams them, each
    image's encoded bytes decoded by fastload's backend fused with the transform (``datasets``
    would decode each image whole with Pillow first).

    A torch ``IterableDataset``: in a loader's worker processes, ``datasets`` gives each worker
    its own part of the stream's files (a stream of fewer files than workers leaves workers
    idle), and ranks split it with ``datasets.distributed.split_dataset_by_node``; shuffle it
    with its own ``shuffle(buffer_size=...)``. A row that does not decode follows
    ``on_error``, named by its place in this worker's part of the stream.

    Args:
        source: A ``datasets.IterableDataset``.
        transform: What to do with each image (see :class:`ImageDataset`).
        target_transform: Called on each target.
        image: The image column (Hugging Face's ``Image`` feature, or bytes).
        target: The target column, several columns (a dict of their values), or ``None``.
        backend: As :class:`fastload.ImageList`'s.
        on_error: As :class:`fastload.ImageList`'s.
        max_pixels: Refuse images whose header claims more pixels.
        exif_orientation: Apply each image's EXIF orientation, as ``datasets`` does.

    Attributes:
        classes: The class names of a ``ClassLabel`` target column; empty otherwise.

    Raises:
        TypeError: ``source`` is no ``datasets.IterableDataset``.
        ValueError: A column the stream does not have (with the ones it has), or a bad option.
    """

    def __init__(
        self,
        source: Any,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        *,
        image: str = "image",
        target: str | Sequence[str] | None = "label",
        backend: str = "auto",
        on_error: OnError = "raise",
        max_pixels: int = backends.DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
    ) -> None:
        check_options(on_error, max_pixels)
        if not is_hf_stream(source):
            raise TypeError(
                f"fastload.ImageTableStream reads a datasets.IterableDataset, got "
                f"{type(source).__name__} (a datasets.Dataset or Parquet files: "
                "fastload.ImageTable)"
            )
        self.image, self.target = image, target
        self.has_targets = target is not None
        self._targets = (
            [] if target is None else [target] if isinstance(target, str) else list(target)
        )
        columns = [image, *self._targets]
        self._rows = _stream_rows(source, columns)
        one = target if isinstance(target, str) else None
        features = source.features or {}
        self.classes = _class_names(features.get(one) if one else None)
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._current: tuple[int, dict[str, Any]] | None = None
        self._setup(transform, target_transform, backend, on_error, max_pixels, exif_orientation)

    def __len__(self) -> int:
        raise TypeError("a stream has no length: count its rows as they come")

    def __iter__(self) -> Iterator[Any]:
        for index, row in enumerate(self._rows):
            self._current = (index, row)
            yield self._load(index)
        self._current = None

    def read_sample(self, index: int) -> tuple[bytes, Any]:
        """The encoded image and target of the row the stream is at (``index``)."""
        row = self._row(index)
        values = [row[name] for name in self._targets]
        if isinstance(self.target, str):
            target: Any = values[0]
        else:
            target = dict(zip(self._targets, values, strict=True)) if self._targets else None
        return _image_bytes(row[self.image], self.image), target

    def path(self, index: int) -> str:
        """The row: its place in this worker's part of the stream, and its file's path where
        the image cell has one."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        part = f"worker {info.id}'s part of the stream" if info is not None else "the stream"
        cell = self._current[1].get(self.image) if self._current is not None else None
        where = cell.get("path") if isinstance(cell, dict) else None
        return f"{part} row {index}" + (f" ({where})" if where else "")

    def _row(self, index: int) -> dict[str, Any]:
        if self._current is None or self._current[0] != index:
            raise IndexError(f"row {index} is not the row the stream is at: iterate the stream")
        return self._current[1]


def is_hf_stream(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.IterableDataset``."""
    if type(source).__module__.split(".")[0] != "datasets":
        return False
    import datasets

    return isinstance(source, datasets.IterableDataset)


def _stream_rows(source: Any, columns: list[str]) -> Any:
    """The stream's image and target columns, its images as undecoded ``{"bytes", "path"}``.

    Raises:
        ValueError: A column it does not have, with the ones it has.
    """
    names = list(source.column_names) if source.column_names is not None else None
    if names is not None:
        _check_columns(columns, names, where="the stream")
    import datasets

    rows = source.select_columns(columns)
    feature = (source.features or {}).get(columns[0])
    if isinstance(feature, datasets.Image):
        rows = rows.cast_column(columns[0], datasets.Image(decode=False))
    return rows
