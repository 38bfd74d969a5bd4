"""Host memory pinned where it is: the slots worker processes keep for their batches
(:mod:`fastload.memory.shared_buffers`), registered with CUDA once each (``cudaHostRegister``)
in the main process, so that a batch in one is copied to the device straight from it.

The same switch makes the batches made in the loader's own process (thread workers, or no
workers) in pinned memory: their ring (:class:`fastload.memory.buffers.BatchRing`) allocates
its buffers pinned, once each, instead of each batch being pinned by copying it.

Without it, a loader with a CUDA device pins each batch by copying it out of the workers'
kept slots (torch's pin-memory thread). With it, the thread that receives the batches
(torch's pin-memory thread, or the iterator's own where ``pin_memory=False``) registers each
slot as it first arrives, torch's pinning passes a tensor in a registered slot on as it is,
and the prefetcher copies from the slot; a slot goes back to its worker once the consumer has
let go of the batch and the copy has finished on the GPU
(:class:`fastload.gpu.prefetch.CUDAPrefetcher` holds the host batch until then). A slot is
unregistered before its memory is let go of.

Off unless ``FASTLOAD_PIN_IN_PLACE=1``, until it is measured on a GPU (issue 73). A
registration CUDA refuses turns it off for the iterator, said once on the ``fastload`` logger;
its batches are then pinned by copying, as without it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

__all__ = ["ENV", "HostRegistry", "enabled"]

ENV = "FASTLOAD_PIN_IN_PLACE"  # "1": batches made in pinned memory, not pinned by copying

log = logging.getLogger("fastload")


def enabled() -> bool:
    """Whether batches are made in pinned memory where they are made (``FASTLOAD_PIN_IN_PLACE``):
    the worker processes' kept slots registered with CUDA, the loader's own process's rings
    allocated pinned."""
    return os.environ.get(ENV, "0").strip() == "1"


class HostRegistry:
    """Host storages registered with CUDA, each once, until unregistered.

    Args:
        cudart: CUDA's runtime as torch exposes it (``torch.cuda.cudart()``, the default);
            anything with ``cudaHostRegister(pointer, nbytes, flags)`` and
            ``cudaHostUnregister(pointer)`` returning CUDA's error code.

    Attributes:
        failed: Why registering stopped (the first error CUDA returned), or ``None``.
    """

    def __init__(self, cudart: Any = None) -> None:
        self._cudart = cudart if cudart is not None else torch.cuda.cudart()
        self._registered: dict[int, int] = {}  # pointer -> bytes
        self.failed: str | None = None

    def __contains__(self, storage: torch.UntypedStorage) -> bool:
        return storage.data_ptr() in self._registered

    def register(self, storage: torch.UntypedStorage) -> bool:
        """Register ``storage``'s memory (nothing when it is already); whether it is now."""
        pointer, nbytes = storage.data_ptr(), storage.nbytes()
        if pointer in self._registered:
            return True
        if self.failed is not None or nbytes == 0:
            return False
        code = int(self._cudart.cudaHostRegister(pointer, nbytes, 0))  # cudaHostRegisterDefault
        if code != 0:
            self.failed = f"cudaHostRegister returned CUDA error {code} for {nbytes} bytes"
            log.info(
                "%s: the workers' batches are pinned by copying them, as without %s=1",
                self.failed,
                ENV,
            )
            return False
        self._registered[pointer] = nbytes
        return True

    def unregister(self, storage: torch.UntypedStorage) -> None:
        """Unregister ``storage``'s memory, if it is registered; call it before the memory
        is let go of."""
        if self._registered.pop(storage.data_ptr(), None) is not None:
            self._cudart.cudaHostUnregister(storage.data_ptr())

    def close(self) -> None:
        """Unregister everything still registered."""
        for pointer in list(self._registered):
            del self._registered[pointer]
            self._cudart.cudaHostUnregister(pointer)
