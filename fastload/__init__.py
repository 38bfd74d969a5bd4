"""fastload: fast PyTorch image input pipelines behind a drop-in ``DataLoader``."""

from fastload import backends, gpu, transforms
from fastload._optional import MissingDependencyError
from fastload.accelerate import explain
from fastload.datasets import ImageFolder, ImageList
from fastload.diagnosis import doctor
from fastload.errors import ImageDecodeError, UnreadableImageWarning
from fastload.loader import DataLoader
from fastload.prefetch import CUDAPrefetcher
from fastload.skipping import Skipped
from fastload.tensors import map_tensors
from fastload.version import __version__

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
    "doctor",
    "explain",
    "gpu",
    "map_tensors",
    "transforms",
]
