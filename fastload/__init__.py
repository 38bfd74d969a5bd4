"""fastload: fast PyTorch image input pipelines behind a drop-in ``DataLoader``.

The names below are imported on first use (PEP 562), so ``import fastload`` and the
``fastload --version`` / ``--help`` commands do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fastload.version import __version__

if TYPE_CHECKING:
    from fastload import autotune, backends, detection, gpu, ray, train, transforms
    from fastload._optional import MissingDependencyError
    from fastload.accelerate import explain
    from fastload.datasets import ImageFolder, ImageList, ImageTable, ImageTableStream
    from fastload.datasets.skipping import Skipped
    from fastload.diagnosis import doctor
    from fastload.errors import ImageDecodeError, UnreadableImageWarning
    from fastload.gpu.prefetch import CUDAPrefetcher
    from fastload.loader import DataLoader
    from fastload.memory.tensors import map_tensors
    from fastload.shards.dataset import ImageShards, ShardError
    from fastload.shards.pack import pack
    from fastload.shards.sampler import ShardSampler

# name -> the module that defines it (a submodule's own name: the submodule)
_WHERE = {
    "CUDAPrefetcher": "fastload.gpu.prefetch",
    "DataLoader": "fastload.loader",
    "ImageDecodeError": "fastload.errors",
    "ImageFolder": "fastload.datasets",
    "ImageList": "fastload.datasets",
    "ImageShards": "fastload.shards.dataset",
    "ImageTable": "fastload.datasets",
    "ImageTableStream": "fastload.datasets",
    "MissingDependencyError": "fastload._optional",
    "ShardError": "fastload.shards.dataset",
    "ShardSampler": "fastload.shards.sampler",
    "Skipped": "fastload.datasets.skipping",
    "UnreadableImageWarning": "fastload.errors",
    "autotune": "fastload.autotune",
    "backends": "fastload.backends",
    "detection": "fastload.detection",
    "doctor": "fastload.diagnosis",
    "explain": "fastload.accelerate",
    "gpu": "fastload.gpu",
    "map_tensors": "fastload.memory.tensors",
    "pack": "fastload.shards.pack",
    "ray": "fastload.ray",
    "train": "fastload.train",
    "transforms": "fastload.transforms",
}

__all__ = [
    "CUDAPrefetcher",
    "DataLoader",
    "ImageDecodeError",
    "ImageFolder",
    "ImageList",
    "ImageShards",
    "ImageTable",
    "ImageTableStream",
    "MissingDependencyError",
    "ShardError",
    "ShardSampler",
    "Skipped",
    "UnreadableImageWarning",
    "__version__",
    "autotune",
    "backends",
    "detection",
    "doctor",
    "explain",
    "gpu",
    "map_tensors",
    "pack",
    "ray",
    "train",
    "transforms",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'fastload' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where == f"fastload.{name}" else getattr(module, name)
    globals()[name] = value  # found once, then an ordinary attribute
    return value


def __dir__() -> list[str]:
    # the public names and the subpackages imported so far; not this module's own helpers
    loaded = {
        name
        for name, value in globals().items()
        if isinstance(value, ModuleType)
        and value.__name__ == f"fastload.{name}"
        and not name.startswith("_")
    }
    return sorted({*__all__, *loaded})
