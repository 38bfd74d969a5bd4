"""Data-parallel training with the launcher's environment: ``torchrun --nproc_per_node N``.

A script that calls :func:`setup`, wraps its model with :func:`wrap` and builds its loader with
:func:`sampler` runs unchanged as one process or as N: torchrun sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and the rendezvous address, and these functions read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from fastload.system import distributed, world_size

__all__ = ["World", "cleanup", "sampler", "setup", "wrap"]


@dataclass(frozen=True)
class World:
    """This process's place in the run.

    Attributes:
        rank: This process's rank (0 when alone).
        size: The number of processes.
        device: The device this process trains on.
    """

    rank: int
    size: int
    device: torch.device

    @property
    def main(self) -> bool:
        """Whether this is rank 0: the one that prints and writes checkpoints."""
        return self.rank == 0


def setup(*, backend: str | None = None, device: str | torch.device | None = None) -> World:
    """Join the process group the launcher describes; a plain single process without one.

    Args:
        backend: ``"nccl"`` (default with CUDA) or ``"gloo"`` (default without).
        device: Override the device (default: ``cuda:LOCAL_RANK`` with CUDA, else the CPU).

    Raises:
        ValueError: An unknown backend, or nccl without CUDA.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if device is None:
        device = torch.device("cuda", local) if cuda else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if size == 1:
        return World(0, 1, device)
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend={backend!r} is not valid; valid: nccl, gloo")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError("backend='nccl' needs CUDA devices; use 'gloo' on the CPU")
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return World(dist.get_rank(), dist.get_world_size(), device)


def wrap(model: torch.nn.Module, world: World, *, channels_last: bool = False) -> torch.nn.Module:
    """``model`` moved to the world's device, in DistributedDataParallel when there are ranks.

    Args:
        model: The model.
        world: From :func:`setup`.
        channels_last: Convert the model to channels-last first: DDP lays out its gradient
            buckets by the parameters' strides when it wraps, so the conversion must come before.
    """
    model = model.to(world.device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if world.size == 1:
        return model
    ids = [world.device.index] if world.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def sampler(dataset: Any, *, shuffle: bool = True, seed: int = 0) -> Any:
    """A ``DistributedSampler`` over ``dataset`` when running distributed, else ``None``.

    Pass it as ``sampler=`` (with ``shuffle`` left unset) to ``fastload.DataLoader`` or torch's:
    each rank reads a disjoint shard of equal size. ``Trainer.fit`` sets its epoch. A loader with
    ``backend="dali"`` shards by itself.
    """
    if world_size() <= 1:
        return None
    return torch.utils.data.DistributedSampler(dataset, shuffle=shuffle, seed=seed)


def cleanup() -> None:
    """Leave the process group, if one was joined, once every rank has come this far.

    The barrier keeps a rank from closing its connections while a peer still uses them, which
    can abort the peer (gloo: "terminate called without an active exception"). Call it at the
    end of a run, not after a failure: it would wait for the ranks that failed.
    """
    if distributed():
        dist.barrier()
        dist.destroy_process_group()
