"""Walking nested batches: the one helper every stage that touches a batch's tensors uses."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["map_tensors"]


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
