"""Reading batches: their parts (inputs, targets, size) and their tensors, in one place.

A batch is a tensor, a sequence ``(inputs, targets, ...)`` or a mapping (its images the inputs,
its ``labels`` the targets: Hugging Face's dicts); whatever measures, moves or transforms
batches reads them with these helpers.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = [
    "LABEL_KEYS",
    "Pinnable",
    "batch_size_of",
    "collated_around",
    "has_subclasses",
    "images_key",
    "inputs_of",
    "labels_key",
    "map_tensors",
    "pin",
    "pin_batch",
    "plain_alike",
    "stackable_fields",
    "stackable_firsts",
    "targets_of",
]

_SHAPE_AND_DTYPE = operator.attrgetter("shape", "dtype")


LABEL_KEYS = ("labels", "label")
"""Where a dict batch's labels are: Hugging Face's names (``transformers`` models take
``labels``; ``datasets`` columns are often ``label``), in that order."""


def images_key(batch: Mapping[Any, Any]) -> Any:
    """The key of a dict batch's images: of its 4-D tensors (``N x C x H x W``), the one of
    the most bytes, the first among equals; ``None`` where it holds none."""
    keys = [k for k, v in batch.items() if isinstance(v, torch.Tensor) and v.ndim == 4]
    # max keeps the first of the largest
    return max(keys, key=lambda k: batch[k].nbytes, default=None)


def labels_key(batch: Mapping[Any, Any]) -> Any:
    """The key of a dict batch's labels (:data:`LABEL_KEYS`, a tensor there); ``None``
    where it has none."""
    return next((k for k in LABEL_KEYS if isinstance(batch.get(k), torch.Tensor)), None)


def inputs_of(batch: Any) -> Any:
    """The inputs of a batch: the batch itself when it is a tensor, the first item of a
    sequence; of a mapping, its images (:func:`images_key`), else its first tensor other than
    its labels, else its first value; ``None`` otherwise."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch:
        return batch[0]
    if isinstance(batch, Mapping) and batch:
        key = images_key(batch)
        if key is None:
            labels = labels_key(batch)
            tensors = (k for k, v in batch.items() if isinstance(v, torch.Tensor) and k != labels)
            key = next(tensors, next(iter(batch)))
        return batch[key]
    return None


def targets_of(batch: Any) -> Any:
    """The targets of a ``(inputs, targets, ...)`` batch, or of a mapping its labels
    (:func:`labels_key`); ``None`` otherwise."""
    if isinstance(batch, (list, tuple)) and len(batch) > 1:
        return batch[1]
    if isinstance(batch, Mapping):
        key = labels_key(batch)
        return batch[key] if key is not None else None
    return None


def batch_size_of(batch: Any) -> int:
    """How many samples a batch holds (an int counts as a batch of that many, as measuring
    code passes sizes along).

    The leading size of its first tensor field (``(images, labels)``, a dict whose first
    values are strings); else of its first mapping field that tells; else the length of its
    first field that is a column of one item a sample (detection's ``(images, targets)``
    tuples of per-sample tensors, a dict of strings); else, for a sequence, its own length
    (a list of samples, a column of strings).

    Raises:
        TypeError: Nothing in the batch tells.
    """
    if isinstance(batch, int):
        return batch
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, Mapping):
        fields = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        fields = list(batch)
    else:
        fields = []
    for field in fields:
        if isinstance(field, torch.Tensor):
            return int(field.shape[0]) if field.ndim else 1
    for field in fields:
        if isinstance(field, Mapping):
            with contextlib.suppress(TypeError):
                return batch_size_of(field)
    for field in fields:
        if _is_column(field):
            return len(field)
    if isinstance(batch, (list, tuple)) and batch:
        return len(batch)
    raise TypeError(f"cannot tell how many samples a {type(batch).__name__} batch holds")


def stackable_firsts(samples: Any) -> list[torch.Tensor] | None:
    """The first fields of ``samples`` when it is a non-empty list of tuples whose first
    fields are tensors of one shape and dtype, which torch's ``default_collate`` stacks into
    one tensor; else ``None``."""
    # checked with map and set, not a generator a sample: a batch passes every check, in
    # the loop that makes it
    if not isinstance(samples, list) or not samples:
        return None
    if set(map(type, samples)) != {tuple} or not all(samples):
        return None
    firsts = [sample[0] for sample in samples]
    if not all(issubclass(kind, torch.Tensor) for kind in set(map(type, firsts))):
        return None
    return firsts if _one_shape_and_dtype(firsts) else None


def stackable_fields(samples: Any) -> list[tuple[Any, list[torch.Tensor]]]:
    """The fields of ``samples`` that torch's ``default_collate`` stacks from tensors of one
    shape and dtype, and their tensors, the batch's images first: of ``(image, ...)`` tuples
    the first field (as :func:`stackable_firsts`), then each later field of plain tensors; of
    plain dicts (``{"pixel_values": ..., "labels": ...}``) the keys holding plain tensors,
    the largest first. Empty where the images do not stack."""
    firsts = stackable_firsts(samples)
    if firsts is not None:
        if len(set(map(len, samples))) != 1:
            return [(0, firsts)]  # default_collate refuses them: its error, not ours
        found = [(0, firsts)]
        for i in range(1, len(samples[0])):
            if type(samples[0][i]) is torch.Tensor:  # a label's int: no column to make
                column = [sample[i] for sample in samples]
                if plain_alike(column):
                    found.append((i, column))
        return found
    if not isinstance(samples, list) or not samples:
        return []
    if set(map(type, samples)) != {dict}:
        return []
    columns = [(key, [sample.get(key) for sample in samples]) for key in samples[0]]
    found = [(key, column) for key, column in columns if plain_alike(column)]
    # sorted keeps the keys' order among equals: the first of the largest, as before
    return sorted(found, key=lambda pair: -pair[1][0].nbytes)


def _is_column(field: Any) -> bool:
    """Whether ``field`` is a sequence of one item a sample: items of one kind, none a
    sequence (tensors of one rank), as a collate function makes of per-sample images or of
    strings. A sample in a list of samples (an image and its target) mixes kinds."""
    if not isinstance(field, (list, tuple)) or not field:
        return False
    kinds = {(type(x), x.ndim if isinstance(x, torch.Tensor) else None) for x in field}
    return len(kinds) == 1 and not isinstance(field[0], (list, tuple))


def plain_alike(column: list[Any]) -> bool:
    """Whether ``column`` (a non-empty list) holds plain tensors (no subclass) of one shape
    and dtype."""
    return set(map(type, column)) == {torch.Tensor} and _one_shape_and_dtype(column)


def _one_shape_and_dtype(tensors: list[torch.Tensor]) -> bool:
    """Whether ``tensors`` (a non-empty list) are all of one shape and dtype."""
    return len(set(map(_SHAPE_AND_DTYPE, tensors))) == 1


def collated_around(stacked: Mapping[Any, torch.Tensor], samples: list[Any]) -> Any:
    """torch's ``default_collate`` of ``samples`` some of whose fields (see
    :func:`stackable_fields`) are stacked already, ``stacked`` by field: the list of the
    fields' columns for tuples, with those stacked in their places; the dict with them under
    their keys for dicts."""
    from torch.utils.data import default_collate

    if isinstance(samples[0], dict):  # its keys may be ints too
        rest = default_collate([{k: v for k, v in s.items() if k not in stacked} for s in samples])
        return {key: stacked[key] if key in stacked else rest[key] for key in samples[0]}
    if len(set(map(len, samples))) != 1:
        return default_collate(samples)  # its error, naming samples of unequal lengths
    width = len(samples[0])
    # what default_collate makes of a batch of tuples: each column collated on its own, as
    # the tuple it collates inside (a column of strings stays a tuple)
    columns: list[Any] = list(zip(*samples, strict=True))
    return [stacked[i] if i in stacked else default_collate(columns[i]) for i in range(width)]


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
