"""fastload: fast PyTorch image input pipelines behind a drop-in ``DataLoader``."""

from fastload.loader import DataLoader
from fastload.prefetch import CUDAPrefetcher, map_tensors

__version__ = "0.1.0"

__all__ = ["CUDAPrefetcher", "DataLoader", "__version__", "map_tensors"]
