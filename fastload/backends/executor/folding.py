"""The loader's leading batch ops that an executor runs itself, folded into it
(:func:`fold_batch_ops`), their draws made by the ops' own ``make_params``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Folded", "fold_batch_ops"]


@dataclass(frozen=True)
class Folded:
    """The leading batch ops (``fastload.gpu``) that an executor runs itself.

    Attributes:
        flips: ``fastload.gpu.RandomHorizontalFlip`` ops: each draws its per-sample flips with
            its own ``make_params``, as it would on the batch, and the executor mirrors those
            samples.
        normalize: A ``fastload.gpu.Normalize``, or ``None``.
    """

    flips: tuple[Any, ...] = ()
    normalize: Any = None


def fold_batch_ops(
    ops: Any, *, normalize_dtypes: tuple[torch.dtype, ...] = ()
) -> tuple[Folded, Any]:
    """Split batch ops into what an executor runs and what ``fastload.gpu`` runs after it.

    The leading horizontal flips, and the first normalize whose output dtype is in
    ``normalize_dtypes``, of ``ops`` (one op, or a ``fastload.gpu.Compose``) fold into the
    executor; everything from the first other op on runs on the batch it delivers.

    Returns:
        What folds, and the remaining op (``None``, one op, or a ``Compose``).
    """
    from fastload.gpu import transforms as G

    if ops is None:
        return Folded(), None
    sequence = list(ops.transforms) if type(ops) is G.Compose else [ops]
    flips: list[Any] = []
    normalize = None
    taken = 0
    for op in sequence:
        if type(op) is G.RandomHorizontalFlip:
            flips.append(op)
        elif type(op) is G.Normalize and normalize is None and op.dtype in normalize_dtypes:
            normalize = op
        else:
            break
        taken += 1
    rest = sequence[taken:]
    remainder = None if not rest else rest[0] if len(rest) == 1 else G.Compose(rest)
    return Folded(tuple(flips), normalize), remainder
