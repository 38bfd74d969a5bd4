"""Batch ops whose draws are made per sample, where torchvision would make them, and applied
to the whole batch later.

A translated torchvision pipeline (``accelerate``) may hold ops that draw per image, such as
``TrivialAugmentWide`` or ``RandomErasing``, between the crop of one sample and the crop of the
next. To keep every draw where torchvision makes it (so the same seed gives the same crops and
the same augmentations), :class:`DrawPerSample` runs in the dataset's per-sample chain: it
draws each op's parameters for that image and returns a :class:`Pending` (the image and its
draws). The collate chain takes the draws apart from the samples (:func:`split_drawn`), the
batch stage runs under them (:func:`applying`), and each :class:`Deferred` batch op applies its
own to the whole batch.

A mixing op of the user's collate function (torchvision v2's ``MixUp`` / ``CutMix``:
:mod:`fastload.gpu.mixing`) draws once per batch, after the samples: :class:`DeferredBatch`
draws in the worker's collate chain (:meth:`DeferredBatch.draw`), and applies where the batch
stage runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["Deferred", "DeferredBatch", "DrawPerSample", "Pending", "applying", "split_drawn"]


class Pending:
    """A sample's image with the draws of the ops that will run on its batch.

    Attributes:
        image: The image (C x H x W uint8).
        draws: One entry per deferred op, in order.
    """

    __slots__ = ("draws", "image")

    def __init__(self, image: torch.Tensor, draws: tuple[Any, ...]) -> None:
        self.image, self.draws = image, draws


class DrawPerSample:
    """In the per-sample chain: each op's draws for this image, in order (see the module).

    Args:
        ops: The deferred ops (``fastload.gpu.policies`` ops): each has ``draw(height,
            width)``, or ``draw(channels, height, width)`` when its ``draws_channels`` is set.
    """

    def __init__(self, ops: Sequence[Any]) -> None:
        self.ops = tuple(ops)

    def __call__(self, image: torch.Tensor) -> Pending:
        c, h, w = image.shape
        draws = tuple(
            op.draw(c, h, w) if getattr(op, "draws_channels", False) else op.draw(h, w)
            for op in self.ops
        )
        return Pending(image, draws)

    def __repr__(self) -> str:
        return f"DrawPerSample({', '.join(repr(op) for op in self.ops)})"


def split_drawn(samples: Any) -> tuple[Any, list[tuple[Any, ...]] | None]:
    """The samples with plain images, and the draws of each sample that held a
    :class:`Pending` (``None`` when none did). Samples are ``(image, target, ...)`` tuples, or
    dicts holding one :class:`Pending` (a Hugging Face dataset's rows, for a collate function
    that stacks their images); anything else (the markers of unreadable files) is kept as it
    is, without draws, so the draws line up with the batch once those are dropped.

    A list subclass carrying a ``seed`` (the batch's) is kept as that class.
    """
    if not isinstance(samples, list):
        return samples, None
    plain: list[Any] = []
    draws: list[tuple[Any, ...]] = []
    for sample in samples:
        if isinstance(sample, (tuple, list)) and sample and isinstance(sample[0], Pending):
            plain.append((sample[0].image, *sample[1:]))
            draws.append(sample[0].draws)
        elif isinstance(sample, dict) and (key := _pending_key(sample)) is not None:
            plain.append({**sample, key: sample[key].image})
            draws.append(sample[key].draws)
        else:
            plain.append(sample)
    if not draws:
        return samples, None
    if type(samples) is not list:  # SeededSamples: the batch's seed goes on
        kept = type(samples).__new__(type(samples))
        list.__init__(kept, plain)
        kept.__dict__.update(vars(samples))
        return kept, draws
    return plain, draws


def _pending_key(sample: dict[Any, Any]) -> Any:
    """The key of the one :class:`Pending` among a dict sample's values, or ``None``."""
    keys = [key for key, value in sample.items() if isinstance(value, Pending)]
    return keys[0] if len(keys) == 1 else None


_CURRENT = threading.local()


@contextlib.contextmanager
def applying(draws: list[tuple[Any, ...]] | None, batch: Any = None) -> Iterator[None]:
    """Run the block with each sample's draws available to the :class:`Deferred` ops, and
    the batch's own draw to a :class:`DeferredBatch`."""
    saved = getattr(_CURRENT, "draws", None), getattr(_CURRENT, "batch", None)
    _CURRENT.draws, _CURRENT.batch = draws, batch
    try:
        yield
    finally:
        _CURRENT.draws, _CURRENT.batch = saved


class Deferred:
    """A batch op that applies the draws its :class:`DrawPerSample` made per sample.

    Args:
        op: The op (``draw`` per sample, ``apply_params`` on the batch).
        slot: Its place among the draws of each sample.
        key: The name ``op.apply_params`` takes the per-sample draws under.
    """

    def __init__(self, op: Any, slot: int, key: str) -> None:
        self.op, self.slot, self.key = op, slot, key

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        draws = getattr(_CURRENT, "draws", None)
        if draws is None or len(draws) != images.shape[0]:
            raise RuntimeError(
                f"{self.op!r} applies draws made per sample, and this batch of "
                f"{images.shape[0]} came without them: run it through the fastload.DataLoader "
                "that made them"
            )
        out = self.op.apply_params(images, {self.key: [d[self.slot] for d in draws]})
        return out if labels is None else (out, labels)

    def __repr__(self) -> str:
        return repr(self.op)


class DeferredBatch:
    """A mixing op drawn once per batch in the worker, applied to the batch later.

    Args:
        op: A :mod:`fastload.gpu.mixing` op (``make_params``, ``apply_params``,
            ``mix_labels``).
    """

    def __init__(self, op: Any) -> None:
        self.op = op

    def draw(self, samples: Sequence[Any]) -> Any:
        """The op's draw for the batch these samples make (``(image, target, ...)`` tuples;
        anything else, a marker of an unreadable file, is not in the batch); ``None`` for an
        empty batch."""
        images = [s[0] for s in samples if isinstance(s, (tuple, list)) and s]
        if not images:
            return None
        height, width = images[0].shape[-2:]
        return self.op.make_params(len(images), int(height), int(width))

    def __call__(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        params = getattr(_CURRENT, "batch", None)
        if params is None:
            raise RuntimeError(
                f"{self.op!r} applies a draw made for the batch in the worker, and this batch "
                "came without it: run it through the fastload.DataLoader that made it"
            )
        if labels is None:
            raise ValueError(f"{self.op!r} mixes labels too: the batch must be (images, labels)")
        return self.op.apply_params(images, params), self.op.mix_labels(labels, params)

    def __repr__(self) -> str:
        return repr(self.op)
