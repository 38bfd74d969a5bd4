"""Images/s of each decoding backend against the stock torchvision pipeline, in one run.

Each pipeline is measured up to what it hands to the device:

* stock torchvision: ``torchvision.datasets.ImageFolder`` + transforms + ``ToTensor`` +
  ``Normalize`` through ``torch.utils.data.DataLoader`` (float32 batches);
* fastload: ``fastload.ImageFolder`` with the same geometry, fused with decoding, through
  ``fastload.DataLoader`` (uint8 batches; flip and normalize belong on the device);
* with ``accelerated=True``, also the stock dataset itself, unchanged, through
  ``fastload.DataLoader(..., accelerate=True)``: the same float32 batches as stock.

Pipelines: ``train`` (RandomResizedCrop 224; stock adds RandomHorizontalFlip), ``val`` (Resize
256 + CenterCrop 224) and ``decode`` (decoding only: images are counted, not collated). Every
configuration keeps its workers between rounds; rounds are interleaved and each reports the
median of its rounds, so drifting machine load hits all configurations alike.

The data is a class folder or shards (``fastload.ImageShards``; the stock side then decodes the
members with PIL, as a torchvision user would write it: :class:`StockShards`). A folder's files
whose first bytes are no image format's (empty files, another kind of file) are left out on
every side (:func:`fastload.diagnosis.scan.unreadable_files`); past that, fastload's sides skip
a file they cannot decode and the stock side, which cannot skip, reads the next file in its place. A
configuration that fails mid-run becomes a row with its error.

The package: ``pipelines`` (the stock and fastload datasets of each pipeline), ``harness``
(:func:`run`, the measuring), ``usage`` (the cores, and the GPU's busy share, each
configuration used) and ``report`` (the table and the plot); ``fastload bench`` is its command
(:mod:`fastload.commands.bench`).
"""

from __future__ import annotations

from typing import Any

from fastload import backends
from fastload.bench.harness import BenchRow, StockFailed, notes, run
from fastload.bench.pipelines import (
    ACCELERATED,
    PIPELINES,
    STOCK,
    StockShards,
    fastload_dataset,
    stock_dataset,
)
from fastload.bench.report import format_table, write_plot

__all__ = [
    "ACCELERATED",
    "PIPELINES",
    "STOCK",
    "BenchRow",
    "StockFailed",
    "StockShards",
    "fastload_dataset",
    "format_table",
    "notes",
    "run",
    "stock_dataset",
    "write_plot",
]


# names that moved out of this module: still found here, with a DeprecationWarning
_MOVED = {
    "DEFAULT_IMAGES": "fastload.synthetic",
    "default_data": "fastload.synthetic",
    "default_root": "fastload.synthetic",
    "unreadable_files": "fastload.diagnosis.scan",
}


def __getattr__(attribute: str) -> Any:
    import importlib
    import warnings

    if attribute == "BACKENDS":
        warnings.warn(
            "fastload.bench.BACKENDS is deprecated: call fastload.backends.names()",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(backends.names())
    if attribute in _MOVED:
        home = _MOVED[attribute]
        warnings.warn(
            f"fastload.bench.{attribute} is now {home}.{attribute}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
