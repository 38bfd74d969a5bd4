"""What a loader's ``collate_fn`` provably is, read from the function itself: torch's default
collate, default collate then one callable on its result, or a dict of the images stacked and
read nowhere else; and what explain says of it. The translate step of
:mod:`fastload.loader.plan` moves the pipeline's conversion to the batches only past a collate
function proved here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastload.accelerate import name_of
from fastload.accelerate.hf_datasets import StackedColumn, stacked_column
from fastload.callables.wrappers import collated_then
from fastload.gpu.deferred import DeferredBatch

__all__ = ["collate_blocker", "collate_shape", "collate_then", "collating", "is_default_collate"]


def is_default_collate(collate_fn: Any) -> bool:
    """Whether ``collate_fn`` is what torch's loader uses when given none: ``default_collate``
    (batches) or ``default_convert`` (``batch_size=None``), by identity, never by name."""
    from torch.utils.data import default_collate, default_convert

    return collate_fn is None or collate_fn is default_collate or collate_fn is default_convert


def collate_then(collate_fn: Any, *, cuda: bool) -> Callable[..., Any] | None:
    """What the batch stage runs for the part of ``collate_fn`` after torch's default collate,
    when ``collate_fn`` is provably ``return f(*default_collate(batch))``
    (:func:`fastload.callables.wrappers.collated_then`); else ``None``.

    torchvision v2's ``MixUp`` / ``CutMix`` / ``RandomChoice`` of them are drawn in the worker
    where torch's loader would draw them and applied by the stage, in the batch it made
    (:mod:`fastload.gpu.mixing`), wherever it runs. Any other ``f`` runs as written, where
    and when torch's loader runs it (the workers, the same stream); not with a CUDA device,
    where the stage runs in the main process.
    """
    then = collated_then(collate_fn)
    if then is None:
        return None
    from fastload.gpu.mixing import mixing_of

    mixing = mixing_of(then, inplace=True)
    if mixing is not None:
        return DeferredBatch(mixing)
    return None if cuda else then


def collate_shape(loader: Any, *, cuda: bool) -> tuple[bool, Any, StackedColumn | None]:
    """What the loader's ``collate_fn`` provably is: torch's default (the first), default
    collate then one callable (that callable, :func:`collate_then`), or a dict of the images
    stacked and read nowhere else (where, :func:`stacked_column`); ``None`` for each it is not."""
    default = is_default_collate(loader.collate_fn)
    then = None if default else collate_then(loader.collate_fn, cuda=cuda)
    if default or then is not None or loader.batch_sampler is None:
        return default, then, None
    return default, then, stacked_column(loader.collate_fn)


def collate_blocker(
    loader: Any, default: bool, then: Any, cuda: bool, images_at: str | None
) -> tuple[str, ...]:
    """Why the loader's ``collate_fn`` keeps the conversion per sample, if it does."""
    if default or then is not None or loader.batch_sampler is None or images_at is not None:
        return ()
    name = name_of(loader.collate_fn)
    if cuda and collated_then(loader.collate_fn) is not None:
        return (
            f"collate_fn={name}: with a CUDA device the batch stage runs in the main process, "
            "where what it calls after default_collate would draw from another stream (v2's "
            "MixUp / CutMix / RandomChoice are drawn in the workers)",
        )
    return (
        f"collate_fn={name}: not provably torch's default_collate, nor one callable on its "
        "result (f(*default_collate(batch))), nor a dict of the images stacked and read "
        "nowhere else, so it gets the samples",
    )


def collating(then: Any, images_at: str | None = None) -> tuple[str, ...]:
    """How explain names the rest of the user's collate function on the batch."""
    if images_at is not None:
        return (f"on the batch's {images_at!r}, which your collate_fn stacks",)
    if then is None:
        return ()
    if isinstance(then, DeferredBatch):
        return (
            f"{then!r} (your collate_fn's, after default_collate; drawn per batch in the workers)",
        )
    return (f"{name_of(then)} (your collate_fn's, after default_collate; as you wrote it)",)
