"""Reading batches: their parts (inputs, targets, size) and their tensors, in one place.

A batch is a tensor, a sequence ``(inputs, targets, ...)`` or a mapping whose first value is
the inputs; whatever measures, moves or transforms batches reads them with these helpers.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["batch_size_of", "inputs_of", "map_tensors", "targets_of"]


def inputs_of(batch: Any) -> Any:
    """The inputs of a batch: the batch itself when it is a tensor, the first item of a
    sequence, the first value of a mapping; ``None`` otherwise."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch:
        return batch[0]
    if isinstance(batch, dict) and batch:
        return next(iter(batch.values()))
    return None


def targets_of(batch: Any) -> Any:
    """The targets of a ``(inputs, targets, ...)`` batch; ``None`` otherwise."""
    if isinstance(batch, (list, tuple)) and len(batch) > 1:
        return batch[1]
    return None


def batch_size_of(batch: Any) -> int:
    """How many samples a batch holds: the leading size of its inputs (an int counts as a
    batch of that many, as measuring code passes sizes along).

    Raises:
        TypeError: The batch holds no tensor to count.
    """
    if isinstance(batch, int):
        return batch
    inputs = inputs_of(batch)
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.ndim else 1
    if inputs is not None and inputs is not batch:
        return batch_size_of(inputs)
    raise TypeError(f"cannot tell how many samples a {type(batch).__name__} batch holds")


def map_tensors(fn: Callable[[torch.Tensor], Any], batch: Any) -> Any:
    """Apply ``fn`` to every tensor in a nested batch, keeping the batch's structure.

    Tuples, lists, namedtuples, mappings and dataclass instances are rebuilt with the same type;
    anything that is not a tensor or one of these containers (strings, numbers, ``None``) is
    returned as it is.

    Args:
        fn: Called once per tensor leaf; its result replaces the leaf.
        batch: A tensor or a nested container of tensors and other values.

    Returns:
        A structure like ``batch`` with every tensor replaced by ``fn(tensor)``.
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(fn, item) for item in batch))
    if isinstance(batch, (list, tuple)):
        items = [map_tensors(fn, item) for item in batch]
        if type(batch) in (list, tuple):
            return type(batch)(items)
        try:  # a subclass that accepts an iterable, like its base
            return type(batch)(items)
        except TypeError:
            return items if isinstance(batch, list) else tuple(items)
    if isinstance(batch, dict):
        # copy.copy keeps the mapping's type and extra state (OrderedDict, defaultdict's factory).
        out = copy.copy(batch)
        for key, value in batch.items():
            out[key] = map_tensors(fn, value)
        return out
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: map_tensors(fn, getattr(batch, f.name))
            for f in dataclasses.fields(batch)
            if f.init
        }
        return dataclasses.replace(batch, **changes)
    return batch
