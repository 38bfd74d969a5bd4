"""What this process runs on: its CPU cores and its torch.distributed world."""

from __future__ import annotations

import os

__all__ = ["cpu_cores", "distributed", "world_size"]


def cpu_cores() -> int:
    """The cores this process may run on (its affinity on Linux, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def distributed() -> bool:
    """Whether a ``torch.distributed`` process group is initialised."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The number of ranks in the default process group; 1 without one."""
    import torch.distributed as dist

    return dist.get_world_size() if distributed() else 1
