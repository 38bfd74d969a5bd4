"""timm's own training scripts on fastload's loader, unchanged.

    python -m fastload.integrations.timm path/to/train.py <the script's arguments>

runs the script (timm's ``train.py``, or any script that builds its loaders with
``timm.data.create_loader``) as ``__main__`` after one swap: ``create_loader`` builds
``fastload.DataLoader(..., accelerate=True)`` where it would build torch's, with every argument
timm gives torch's (workers, sampler, ``fast_collate`` or a ``FastCollateMixup``,
``worker_init_fn``, persistent workers, pinned memory). The rest of timm's loader is timm's: its
``PrefetchLoader`` still copies each uint8 batch to the device and normalizes and erases it there,
its ``Mixup`` runs in the script. In a script of one's own, call :func:`create_loader` in place
of timm's, or run it under :func:`fastload_loaders`.

What ``accelerate=True`` does with timm's dataset and transforms: timm's ``ImageDataset`` over a
folder (``create_dataset("", root=...)``, the folder reader) is read as a
:class:`fastload.ImageList` of the same files, labels and classes;
``RandomResizedCropAndInterpolation`` (with ``interpolation="random"`` too, drawn per image as
timm draws it) and ``RandomHorizontalFlip`` are fused with decoding; its RandAugment,
AutoAugment, AugMix and ``ColorJitter`` run as written on the fused image, per sample, in the
workers (``fastload.explain(loader)`` lists each op's place). Two differences, by design:

- ``use_multi_epochs_loader=True``: timm's ``MultiEpochsDataLoader`` keeps torch's workers alive
  across epochs by subclassing torch's loader; fastload's loader keeps its workers alive with
  ``persistent_workers``, which this swap turns on in its place;
- a file that does not decode follows the dataset's ``on_error`` (``"raise"``: an error naming
  the file), where timm's dataset logs it and takes the next index in its place.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from fastload._optional import MissingDependencyError
from fastload.integrations.scripts import run_script
from fastload.loader import DataLoader

__all__ = ["create_loader", "fastload_loaders", "install", "main"]

_ORIGINAL: dict[str, Any] = {}


@contextlib.contextmanager
def fastload_loaders(**options: Any) -> Iterator[None]:
    """Within the block, what looks up ``torch.utils.data.DataLoader`` (timm's
    ``create_loader`` does, when called) builds ``fastload.DataLoader(..., **options)`` instead;
    ``accelerate=True`` unless ``options`` says otherwise.

    The name is rebound for the whole process while the block runs, so build loaders here, not
    in threads running beside it.
    """
    options.setdefault("accelerate", True)
    torch_loader = torch.utils.data.DataLoader
    torch.utils.data.DataLoader = functools.partial(DataLoader, **options)  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        torch.utils.data.DataLoader = torch_loader  # type: ignore[misc]


def create_loader(*args: Any, fastload_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """``timm.data.create_loader`` with the same arguments, its loader ``fastload.DataLoader``.

    Args:
        *args: timm's ``create_loader`` arguments.
        fastload_options: fastload's own loader options (``accelerate=True`` when not given).
        **kwargs: timm's ``create_loader`` keyword arguments. ``use_multi_epochs_loader=True``
            becomes ``persistent_workers=True`` (see the module's docs).

    Returns:
        What timm returns: the loader, wrapped in timm's ``PrefetchLoader`` with
        ``use_prefetcher`` (timm's default).

    Raises:
        fastload.MissingDependencyError: timm is not installed.
    """
    timm_loader = _timm_loader()
    original = _ORIGINAL.get("create_loader", timm_loader.create_loader)
    if kwargs.pop("use_multi_epochs_loader", False):
        kwargs["persistent_workers"] = True
    with fastload_loaders(**(fastload_options or {})):
        return original(*args, **kwargs)


def install() -> None:
    """Make ``timm.data.create_loader`` (and ``timm.data.loader.create_loader``) this module's
    :func:`create_loader`, for scripts imported after this call; idempotent."""
    timm_loader = _timm_loader()
    import timm.data

    _ORIGINAL.setdefault("create_loader", timm_loader.create_loader)
    timm.data.create_loader = create_loader
    timm_loader.create_loader = create_loader


def _timm_loader() -> Any:
    """timm's ``timm.data.loader`` module, or how to install timm."""
    try:
        from timm.data import loader
    except ImportError as exc:
        raise MissingDependencyError(
            f"fastload.integrations.timm runs timm's create_loader, and timm is not installed "
            f"({exc}). Install it with: pip install timm"
        ) from exc
    return loader


def main(argv: Sequence[str] | None = None) -> None:
    """Run a timm training script with fastload's loaders: ``argv`` is the script's path, then
    its arguments (``sys.argv[1:]`` when not given)."""
    run_script(
        argv,
        module="fastload.integrations.timm",
        install=install,
        about=__doc__.split("\n\n")[1].strip(),
    )


if __name__ == "__main__":
    main()
