"""fastload: fast PyTorch image input pipelines behind a drop-in ``DataLoader``."""

from fastload import backends, gpu, transforms
from fastload._optional import MissingDependencyError
from fastload.backends import ImageDecodeError
from fastload.datasets import ImageFolder, ImageList, Skipped, UnreadableImageWarning
from fastload.loader import DataLoader
from fastload.prefetch import CUDAPrefetcher, map_tensors

__version__ = "0.1.0"

__all__ = [
    "CUDAPrefetcher",
    "DataLoader",
    "ImageDecodeError",
    "ImageFolder",
    "ImageList",
    "MissingDependencyError",
    "Skipped",
    "UnreadableImageWarning",
    "__version__",
    "backends",
    "gpu",
    "map_tensors",
    "transforms",
]
