"""Parquet files read a row group at a time, for :class:`fastload.ImageTable` with
``in_memory=False``: the table is never whole in memory, each process keeps the row groups it
read last, and the row groups' sizes are the table's shards, so that
:class:`fastload.ShardSampler` orders the samples a few row groups at a time."""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["RowGroups"]

# ShardSampler shuffles 8 shards' samples together by default; a process keeps twice that, so
# that one window's row groups are still there while the next window's are read
KEPT = 16


class RowGroups:
    """The rows of Parquet files, read by row group as they are asked for.

    Args:
        filesystem: The fsspec filesystem of ``files``.
        files: The Parquet files, in order.
        columns: The columns to read.

    Attributes:
        sizes: Each row group's number of rows, in order (the files' groups one after another).
        parts: Each file's name and number of rows, in order.
        metadata: The first file's schema metadata (Hugging Face's features, where written).
    """

    def __init__(self, filesystem: Any, files: list[str], columns: list[str]) -> None:
        import pyarrow.parquet as pq

        self.filesystem, self.files, self.columns = filesystem, files, columns
        self._groups: list[tuple[int, int]] = []  # (file, group within the file)
        sizes, self.parts = [], []
        self.metadata: dict[bytes, bytes] = {}
        for f, name in enumerate(files):
            meta = pq.read_metadata(name, filesystem=filesystem)
            if f == 0:
                self.metadata = dict(meta.schema.to_arrow_schema().metadata or {})
            self.parts.append((name, meta.num_rows))
            for g in range(meta.num_row_groups):
                self._groups.append((f, g))
                sizes.append(meta.row_group(g).num_rows)
        self.sizes = sizes
        self._starts = np.cumsum([0, *sizes])
        self._forget()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index``'s values, by column."""
        group = int(np.searchsorted(self._starts, index, side="right")) - 1
        table = self._group(group)
        at = index - int(self._starts[group])
        return {name: table.column(name)[at].as_py() for name in self.columns}

    def _group(self, group: int) -> Any:
        if self._pid != os.getpid():  # a forked worker: its own open files and its own groups
            self._forget()
        table = self._kept.get(group)
        if table is not None:
            self._kept.move_to_end(group)
            return table
        f, g = self._groups[group]
        table = self._file(f).read_row_group(g, columns=self.columns)
        self._kept[group] = table
        if len(self._kept) > KEPT:
            self._kept.popitem(last=False)
        return table

    def _file(self, f: int) -> Any:
        """File ``f``, opened; the last ``KEPT`` opened stay open (a table of thousands of
        files would hold as many descriptors)."""
        opened = self._open.get(f)
        if opened is not None:
            self._open.move_to_end(f)
            return opened
        import pyarrow.parquet as pq

        opened = pq.ParquetFile(self.files[f], filesystem=self.filesystem)
        self._open[f] = opened
        if len(self._open) > KEPT:
            self._open.popitem(last=False)[1].close()
        return opened

    def _forget(self) -> None:
        self._pid = os.getpid()
        self._open: OrderedDict[int, Any] = OrderedDict()
        self._kept: OrderedDict[int, Any] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_open=OrderedDict(), _kept=OrderedDict(), _pid=-1)  # files do not pickle
        return state
