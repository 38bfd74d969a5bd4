"""Image datasets: where each sample's bytes are, and one decode path for all of them.

- :mod:`~fastload.datasets.image_dataset`: :class:`ImageDataset`, what every fastload dataset
  shares (the transform split, the backend, the error policy, per-sample seeds);
- :mod:`~fastload.datasets.stacking`: a batch's samples decoded straight into one tensor;
- :mod:`~fastload.datasets.folders`: :class:`ImageList` and :class:`ImageFolder`, which read
  files (``fastload.ImageShards`` reads members of tar shards);
- :mod:`~fastload.datasets.tables`: :class:`ImageTable`, which reads a table's column of encoded
  images (Parquet files, a Hugging Face ``datasets.Dataset``), and :class:`ImageTableStream`,
  a streaming ``datasets.IterableDataset``'s; :mod:`~fastload.datasets.row_groups`: Parquet
  files read a row group at a time;
- :mod:`~fastload.datasets.skipping`: ``on_error="skip"``: the markers, their collate and the
  report.
"""

from fastload.datasets.folders import ImageFolder, ImageList
from fastload.datasets.image_dataset import ImageDataset, OnError, check_options
from fastload.datasets.skipping import Skipped
from fastload.datasets.tables import ImageTable, ImageTableStream
from fastload.errors import UnreadableImageWarning

__all__ = [
    "ImageDataset",
    "ImageFolder",
    "ImageList",
    "ImageTable",
    "ImageTableStream",
    "OnError",
    "Skipped",
    "UnreadableImageWarning",
    "check_options",
]
