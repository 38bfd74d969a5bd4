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

__all__ = [
    "Pinnable",
    "batch_size_of",
    "collated_around",
    "has_subclasses",
    "inputs_of",
    "map_tensors",
    "pin",
    "pin_batch",
    "stackable_field",
    "stackable_firsts",
    "targets_of",
]


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


def stackable_firsts(samples: Any) -> list[torch.Tensor] | None:
    """The first fields of ``samples`` when it is a non-empty list of tuples whose first
    fields are tensors of one shape and dtype, which torch's ``default_collate`` stacks into
    one tensor; else ``None``."""
    if not isinstance(samples, list) or not samples:
        return None
    if any(type(sample) is not tuple or not sample for sample in samples):
        return None
    firsts = [sample[0] for sample in samples]
    first = firsts[0]
    if not isinstance(first, torch.Tensor):
        return None
    shape, dtype = first.shape, first.dtype
    if any(not isinstance(x, torch.Tensor) or x.shape != shape or x.dtype != dtype for x in firsts):
        return None
    return firsts


def stackable_field(samples: Any) -> tuple[Any, list[torch.Tensor]] | None:
    """The field of ``samples`` that torch's ``default_collate`` would stack as the batch's
    images, and its tensors: the first field of ``(image, ...)`` tuples (as
    :func:`stackable_firsts`), or of plain dicts (``{"pixel_values": ..., "label": ...}``) the
    key holding the largest plain tensors of one shape and dtype; else ``None``."""
    firsts = stackable_firsts(samples)
    if firsts is not None:
        return 0, firsts
    if not isinstance(samples, list) or not samples:
        return None
    if any(type(sample) is not dict for sample in samples):
        return None
    best: tuple[Any, list[torch.Tensor]] | None = None
    for key, first in samples[0].items():
        if type(first) is not torch.Tensor:
            continue
        column = [sample.get(key) for sample in samples]
        if all(
            type(x) is torch.Tensor and x.shape == first.shape and x.dtype == first.dtype
            for x in column
        ) and (best is None or first.nbytes > best[1][0].nbytes):
            best = key, column
    return best


def collated_around(stacked: torch.Tensor, samples: list[Any], field: Any = 0) -> Any:
    """torch's ``default_collate`` of ``samples`` whose ``field`` (see :func:`stackable_field`)
    is stacked in ``stacked`` already: ``[stacked, *the other fields' columns]`` for tuples,
    the dict with ``stacked`` under its key for dicts."""
    from torch.utils.data import default_collate

    if isinstance(samples[0], dict):  # its keys may be ints too
        rest = default_collate([{k: v for k, v in s.items() if k != field} for s in samples])
        return {key: stacked if key == field else rest[key] for key in samples[0]}
    rest = default_collate([sample[1:] for sample in samples]) if len(samples[0]) > 1 else []
    return [stacked, *rest]


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


def pin(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in pinned memory, of its own type: a subclass that ``pin_memory`` unwraps
    (torchvision's ``BoundingBoxes``, ``Mask``, ...) is wrapped again, with its metadata."""
    pinned = tensor.pin_memory()
    kind = type(tensor)
    if kind is torch.Tensor or type(pinned) is kind:
        return pinned
    # as tv_tensors wrap: the same storage seen as the subclass, its attributes copied
    out = pinned.as_subclass(kind)
    out.__dict__.update(tensor.__dict__)
    return out


def pin_batch(batch: Any) -> Any:
    """Every tensor of a nested batch pinned (:func:`pin`); a batch wrapper with a
    ``pin_memory`` method of its own pins itself."""
    if not isinstance(batch, torch.Tensor) and hasattr(batch, "pin_memory"):
        return batch.pin_memory()
    return map_tensors(pin, batch)


def has_subclasses(batch: Any) -> bool:
    """Whether a nested batch holds a tensor of a subclass of ``torch.Tensor``."""
    kinds: set[type] = set()
    map_tensors(lambda t: kinds.add(type(t)), batch)
    return bool(kinds - {torch.Tensor})


class Pinnable:
    """A batch on its way through torch's pin-memory thread, which calls :meth:`pin_memory`
    on it: there, every tensor keeps its subclass (:func:`pin`), where torch's own pinning
    returns plain tensors. The iterator hands out :attr:`batch`."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def pin_memory(self) -> Pinnable:
        return Pinnable(pin_batch(self.batch))
