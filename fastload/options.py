"""fastload.DataLoader's own options: their names, defaults and checks, in one place.

The loader's signature is torch's parameters followed by these, keyword-only. Everything that
needs to know which options are fastload's reads :data:`NAMES` from here: the loader itself,
``autotune`` (which refuses them for torch's loader), and the loader's re-creation by
frameworks (an option is stored on the loader under its own name, as given).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from fastload.checks import check_choice, check_int

if TYPE_CHECKING:  # torch is not imported for the names: the commands' parsers read them
    from fastload.devices import DeviceLike

__all__ = [
    "ACCELERATE",
    "DEPRECATED",
    "NAMES",
    "ON_ERROR",
    "SEEDING",
    "WORKER_TYPE",
    "Accelerate",
    "LoaderOptions",
    "renamed",
]

Accelerate = bool | Literal["auto"]
# The values an option that takes a name accepts, here once for every entry point (the loader,
# the datasets, the commands); backends' names come from the registry (backends.choices()).
SEEDING = ("auto", "sample", "worker")
ACCELERATE = ("auto", True, False)
ON_ERROR = ("raise", "skip")
WORKER_TYPE = ("process", "thread", "auto")


@dataclass(frozen=True)
class LoaderOptions:
    """What ``fastload.DataLoader`` takes besides torch's parameters (see its docstring).

    Attributes:
        device: Where batches are delivered (``None``: as torch yields them).
        device_prefetch: With a CUDA device, how many batches are copied ahead.
        batch_transforms: Batch ops (``fastload.gpu``) applied to whole batches.
        channels_last: Deliver 4-D images in channels-last memory format.
        backend: Who executes the dataset's pipeline (a registered backend's name), if not the
            dataset's own; ``None`` and ``"auto"`` leave the choice to fastload.
        accelerate: Run an unchanged torchvision pipeline fastload's way: ``True``, ``False``,
            or ``"auto"`` (on with a CUDA ``device``).
        seeding: ``"sample"`` (each sample its own random stream), ``"worker"`` (torch's), or
            ``"auto"`` (``"sample"`` for fastload's own datasets, torch's for any other).
        worker_type: Who runs the ``num_workers`` workers: ``"process"`` (torch's worker
            processes), ``"thread"`` (threads of the loader's process), or ``"auto"`` (both
            measured, the faster kept).
    """

    device: DeviceLike | None = None
    device_prefetch: int = 2
    batch_transforms: Callable[..., Any] | None = None
    channels_last: bool = False
    backend: str | None = None
    accelerate: Accelerate = "auto"
    seeding: Literal["auto", "sample", "worker"] = "auto"
    worker_type: Literal["process", "thread", "auto"] = "process"

    def __post_init__(self) -> None:
        check_int("device_prefetch", self.device_prefetch, minimum=1)
        if self.batch_transforms is not None and not callable(self.batch_transforms):
            raise ValueError(f"batch_transforms={self.batch_transforms!r} is not callable")
        if not isinstance(self.channels_last, bool):
            raise ValueError(f"channels_last={self.channels_last!r} must be True or False")
        if self.backend is not None and not isinstance(self.backend, str):
            raise ValueError(
                f"backend={self.backend!r} must be a backend's name, 'auto' or None "
                "(fastload.backends.choices() lists the names)"
            )
        check_choice("accelerate", self.accelerate, ACCELERATE)
        check_choice("seeding", self.seeding, SEEDING)
        check_choice("worker_type", self.worker_type, WORKER_TYPE)

    @property
    def named_backend(self) -> str | None:
        """The backend asked for by name; ``None`` when the choice is left to fastload
        (``backend=None`` or ``"auto"``, which mean the same)."""
        return None if self.backend in (None, "auto") else self.backend


NAMES: tuple[str, ...] = tuple(f.name for f in fields(LoaderOptions))
# old name -> new name; the old one still works, with a FutureWarning
DEPRECATED = {"gpu_transforms": "batch_transforms"}


def renamed(given: dict[str, Any]) -> dict[str, Any]:
    """The options with deprecated names replaced by their new ones (warning once per call).

    ``accelerate=None``, the old spelling of the default, becomes ``"auto"`` quietly.

    Raises:
        TypeError: Both an old name and its new one were given.
    """
    out = dict(given)
    for old, new in DEPRECATED.items():
        if old not in out:
            continue
        value = out.pop(old)
        if value is None:
            continue
        if out.get(new) is not None:
            raise TypeError(f"{old}= and {new}= were both given; {old} is the old name of {new}")
        warnings.warn(
            f"fastload.DataLoader({old}=...) is now {new}=... (the ops also run on the CPU); "
            f"the old name will be removed",
            FutureWarning,
            stacklevel=3,
        )
        out[new] = value
    if out.get("accelerate", "auto") is None:
        out["accelerate"] = "auto"
    return out
