"""The private names of torch and torchvision that fastload relies on, in one place.

Each is something their public APIs do not offer: torch's own DataLoader iterators (to subclass
them, so that fastload's loader stays torch's), the storage use count that tells a reusable
batch buffer, ``default_collate``'s function for tensors (swapped, thread by thread, inside a
collate function of the user's own), a fused in-place division, the compiled-module wrapper, and
torchvision's policy tables and draws (so that a batch op draws exactly what torchvision's
per-image op draws). When a release moves one, ``tests/test_compat.py`` names it and the
release; this module is the one place to change. No other module of fastload may reach a
private name of another package (``tests/test_architecture.py`` checks it).

Checked against torch 2.14 and torchvision 0.29 (what pip installs as this is written), and
torch 2.11 with torchvision 0.26 (the GPU machine's).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.data.dataloader as _torch_loader
from torch.utils.data import _utils as _torch_utils
from torch.utils.data._utils import collate as _torch_collate
from torch.utils.data._utils import pin_memory as _torch_pin_memory

__all__ = [
    "ACCELERATE_PREPARED",
    "MP_STATUS_CHECK_INTERVAL",
    "BaseDataLoaderIter",
    "DatasetKind",
    "MultiProcessingDataLoaderIter",
    "SingleProcessDataLoaderIter",
    "augmentation_space",
    "collate_tensors",
    "compiled_inner",
    "dynamo_backends",
    "foreach_div_",
    "new_shared_storage",
    "parameter_max",
    "pin_memory",
    "pins_in_thread",
    "sample_dirichlet",
    "storage_use_count",
    "tensors_collated_by",
    "turbojpeg_warnings_raise",
    "tv_tensor_wrapped",
    "v2_augmentation_space",
    "v2_policies",
]

# torch's DataLoader iterators and their helpers (torch.utils.data.dataloader, ._utils)
BaseDataLoaderIter = _torch_loader._BaseDataLoaderIter
SingleProcessDataLoaderIter = _torch_loader._SingleProcessDataLoaderIter
MultiProcessingDataLoaderIter = _torch_loader._MultiProcessingDataLoaderIter
DatasetKind = _torch_loader._DatasetKind
MP_STATUS_CHECK_INTERVAL: float = _torch_utils.MP_STATUS_CHECK_INTERVAL
pin_memory: Callable[..., Any] = _torch_pin_memory.pin_memory

# Hugging Face Accelerate's mark of a loader its prepare() made (it leaves such a loader as is)
ACCELERATE_PREPARED = "_is_accelerate_prepared"


def storage_use_count() -> Callable[[int], int] | None:
    """torch's count of the references to a storage (given its ``_cdata``), or ``None`` where
    this torch has none (then no batch buffer is ever reused)."""
    return getattr(torch._C, "_storage_Use_Count", None)


def storage_handle(storage: Any) -> int:
    """The handle :func:`storage_use_count` takes for an untyped storage."""
    return int(storage._cdata)


def dynamo_backends() -> list[str]:
    """The backends ``torch.compile`` accepts here, experimental ones included."""
    return list(torch._dynamo.list_backends(exclude_tags=()))


def foreach_div_(tensors: list[torch.Tensor], divisor: float) -> None:
    """Divide every tensor in place, in one fused call."""
    torch._foreach_div_(tensors, divisor)


def compiled_inner(model: Any) -> Any | None:
    """The module inside ``torch.compile``'s wrapper, or ``None`` for any other object."""
    return getattr(model, "_orig_mod", None)


# torchvision's policies (transforms.AutoAugment & co., v1 and v2): their tables and draws


def augmentation_space(op: Any, *args: Any) -> dict[str, tuple[Any, bool]]:
    """A v1 policy's table of ops: name -> (magnitudes, signed)."""
    return op._augmentation_space(*args)


def parameter_max(op: Any) -> int:
    """``AugMix``'s largest magnitude bin."""
    return int(op._PARAMETER_MAX)


def sample_dirichlet(op: Any, params: torch.Tensor) -> torch.Tensor:
    """``AugMix``'s Dirichlet draw, from torch's stream as torchvision draws it."""
    return op._sample_dirichlet(params)


def v2_augmentation_space(op: Any, *, partial: bool = False) -> dict[str, Any]:
    """A v2 policy's table of ops (``partial``: AugMix's table without the image-wide ops)."""
    return op._PARTIAL_AUGMENTATION_SPACE if partial else op._AUGMENTATION_SPACE


def v2_policies(op: Any) -> list[Any]:
    """v2 ``AutoAugment``'s sub-policies (its own list: read, never changed)."""
    return op._policies


def tv_tensor_wrapped(dataset: Any) -> tuple[Any, Any] | None:
    """The dataset ``wrap_dataset_for_transforms_v2`` wrapped and the target keys it was given,
    when ``dataset`` is torchvision's wrapper (read, never changed); else ``None``."""
    from torchvision.tv_tensors._dataset_wrapper import VisionDatasetTVTensorWrapper

    if not isinstance(dataset, VisionDatasetTVTensorWrapper):
        return None
    return dataset._dataset, dataset._target_keys


def pins_in_thread(loader: Any) -> bool:
    """Whether torch's multiprocessing iterator of ``loader`` pins its batches in a thread of
    its own (``pin_memory`` and an accelerator, as torch decides)."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6+; CUDA alone before
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    return bool(loader.pin_memory and available)


def turbojpeg_warnings_raise(handle: Any) -> bool:
    """Make a PyTurboJPEG ``TurboJPEG`` handle raise ``OSError`` where libjpeg-turbo reports a
    warning (a truncated or corrupt stream) instead of calling ``warnings.warn``: PyTurboJPEG
    warns only when it can tell warnings from errors (its private error-code function, read
    here), and catching a warning takes ``warnings.catch_warnings``, which changes the
    process's filters for every thread. ``False`` where this PyTurboJPEG lacks it."""
    name = "_TurboJPEG__get_error_code"
    if not hasattr(handle, name):
        return False
    setattr(handle, name, None)
    return True


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """A storage of ``nbytes`` made in shared memory (what torch's worker processes copy a
    tensor into to hand it over), so that handing it over copies nothing."""
    return torch.UntypedStorage._new_shared(nbytes)


# torch's default_collate of a field of tensors: in a worker process, stacked into fresh
# shared memory
collate_tensors: Callable[..., Any] = _torch_collate.collate_tensor_fn


class _Collating(threading.local):
    """The calling thread's function in place of :data:`collate_tensors`, inside
    :func:`tensors_collated_by` (``None``: torch's)."""

    stack: Callable[..., Any] | None = None


_COLLATING = _Collating()
# guards the threads inside tensors_collated_by and the map entry they share
_collating_lock = threading.Lock()
_collating_threads = 0


def _collate_tensors_per_thread(tensors: Any, *, collate_fn_map: Any = None) -> Any:
    """``default_collate``'s function for tensors while some thread is inside
    :func:`tensors_collated_by`: that thread's ``stack``, torch's in every other thread."""
    stack = _COLLATING.stack
    if stack is None:
        return collate_tensors(tensors, collate_fn_map=collate_fn_map)
    return stack(tensors, collate_fn_map=collate_fn_map)


@contextlib.contextmanager
def tensors_collated_by(stack: Callable[..., Any]) -> Iterator[None]:
    """Within it, torch's ``default_collate`` called from this thread stacks each field of
    tensors with ``stack`` in place of :data:`collate_tensors`, called as that is: the tensors,
    and ``collate_fn_map=``. Other threads collate as before, so worker threads may each be
    inside it at once. Where someone has replaced torch's function in ``default_collate``'s map
    already, theirs stays."""
    global _collating_threads
    table = _torch_collate.default_collate_fn_map
    with _collating_lock:
        if table.get(torch.Tensor) not in (collate_tensors, _collate_tensors_per_thread):
            ours = False
        else:
            ours = True
            table[torch.Tensor] = _collate_tensors_per_thread
            _collating_threads += 1
    if not ours:
        yield
        return
    before, _COLLATING.stack = _COLLATING.stack, stack
    try:
        yield
    finally:
        _COLLATING.stack = before
        with _collating_lock:
            _collating_threads -= 1
            # the last thread out gives torch its function back, unless someone replaced it
            if not _collating_threads and table.get(torch.Tensor) is _collate_tensors_per_thread:
                table[torch.Tensor] = collate_tensors


def _collating_after_fork() -> None:
    """A forked child has only the thread that forked: the lock may have been held by
    another, and the count is that one thread's."""
    global _collating_lock, _collating_threads
    _collating_lock = threading.Lock()
    _collating_threads = int(_COLLATING.stack is not None)
    table = _torch_collate.default_collate_fn_map
    if not _collating_threads and table.get(torch.Tensor) is _collate_tensors_per_thread:
        table[torch.Tensor] = collate_tensors


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_collating_after_fork)
