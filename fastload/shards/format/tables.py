"""Image-text tables for ``fastload.pack``: a CSV / TSV or Parquet file with an image path
column and a caption column, OpenCLIP's ``--csv-img-key`` / ``--csv-caption-key`` convention.

A relative image path is taken as OpenCLIP takes it, relative to the working folder; when no
file is there, relative to the table's folder. The other columns of a row go into the sample's
``KEY.json``.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Any

from fastload._optional import MissingDependencyError

__all__ = ["EXTENSIONS", "Row", "Table", "is_table", "read_table"]

EXTENSIONS = (".csv", ".tsv", ".parquet")


@dataclass(frozen=True)
class Row:
    """What a table says of one image besides its path: its caption and its other columns."""

    caption: str
    extra: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Table:
    """The rows of a table: image paths, and a :class:`Row` for each."""

    paths: list[str]
    rows: list[Row]


def is_table(source: Any) -> bool:
    """Whether ``source`` is the path of a table ``pack`` reads."""
    return isinstance(source, (str, os.PathLike)) and os.fspath(source).lower().endswith(EXTENSIONS)


def read_table(
    path: str | os.PathLike[str], *, image_key: str, caption_key: str, separator: str | None
) -> Table:
    """Read a table's image paths and captions.

    Args:
        path: A ``.csv``, ``.tsv`` or ``.parquet`` file.
        image_key: The column of image paths.
        caption_key: The column of captions.
        separator: The CSV field separator (default: tab for ``.tsv``, comma otherwise).

    Raises:
        FileNotFoundError: The table does not exist.
        ValueError: A column is missing (the message lists those there), or a caption or
            path is empty.
        MissingDependencyError: A Parquet file without pyarrow installed.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such table: {path!r}")
    if path.lower().endswith(".parquet"):
        records, columns = _parquet(path)
    else:
        if separator is None:
            separator = "\t" if path.lower().endswith(".tsv") else ","
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file, delimiter=separator)
            columns = list(reader.fieldnames or [])
            records = list(reader)
    for key, what in ((image_key, "image path"), (caption_key, "caption")):
        if key not in columns:
            raise ValueError(
                f"{path!r} has no {what} column {key!r}; its columns: {', '.join(columns)}"
            )
    folder = os.path.dirname(os.path.abspath(path))
    paths, rows = [], []
    for number, record in enumerate(records, start=1):
        image, caption = record[image_key], record[caption_key]
        if not image:
            raise ValueError(f"{path!r} row {number}: the image path ({image_key!r}) is empty")
        paths.append(_where(str(image), folder))
        extra = tuple((k, v) for k, v in record.items() if k not in (image_key, caption_key))
        rows.append(Row("" if caption is None else str(caption), extra))
    return Table(paths, rows)


def _where(image: str, folder: str) -> str:
    if os.path.isabs(image) or os.path.exists(image):
        return os.path.abspath(image)
    return os.path.join(folder, image)


def _parquet(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading the Parquet table {path!r} needs pyarrow ({exc}); install it with: "
            "pip install pyarrow"
        ) from exc
    table = pq.read_table(path)
    return table.to_pylist(), list(table.column_names)
