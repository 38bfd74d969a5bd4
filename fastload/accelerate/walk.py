"""The walk over a pipeline's ops: what is fused with decoding, what runs on batches, where the
cut is, and what a translation is (:class:`Translated`). The translators of each library's ops
(:mod:`fastload.accelerate.torchvision_ops`, ``timm_ops``, ``open_clip_ops``) move a
:class:`Walk` along; :mod:`fastload.accelerate.translate` runs them.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from fastload import transforms as ft
from fastload.callables.handover import HandBack, HandOn
from fastload.callables.wrappers import delegate_of, sequence_of

__all__ = [
    "PER_SAMPLE",
    "RESAMPLING",
    "NotAccelerated",
    "Translated",
    "Walk",
    "flatten",
    "interpolation",
    "name_of",
    "need_tensor",
    "say_once",
    "with_dtype",
]

log = logging.getLogger("fastload")

RESAMPLING = ("bilinear", "bicubic")  # PIL's nearest picks other pixels than fastload's


class NotAccelerated(Exception):
    """A pipeline fastload cannot run its own way.

    Attributes:
        what: The (first) op or object in the way.
        why: Why it keeps the pipeline on torch's path.
        blockers: Every ``(what, why)`` found, in the pipeline's order (the first is
            ``(what, why)``).
    """

    def __init__(self, what: str, why: str, *, blockers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{what}: {why}")
        self.what, self.why = what, why
        self.blockers = blockers or ((what, why),)


@dataclass(frozen=True)
class Translated:
    """A torchvision transform, translated (whole, or its leading part).

    Attributes:
        fused: fastload ops planned before decoding and run fused with it.
        batch: Batch ops (``fastload.gpu``) run on whole uint8 batches, in order.
        fused_from: The user's ops that became ``fused``.
        batch_from: The user's ops that became ``batch``.
        dtype: The dtype of the images delivered (the user's transform's); ``None`` when the
            user's own ops (``rest``) decide it.
        rest: The user's ops after the fused part, run as written, per sample (the pipeline
            is accelerated in part); empty when all of it is fastload's.
        hand_on: What gives ``rest`` its input, when there is a rest.
        blockers: Why the rest is not fastload's: every ``(op, why)`` in order.
        drawn: Batch ops whose draws are made per sample, after the fused ops
            (:mod:`fastload.gpu.deferred`).
    """

    fused: tuple[ft.Transform, ...]
    batch: tuple[Any, ...]
    fused_from: tuple[str, ...]
    batch_from: tuple[str, ...]
    dtype: torch.dtype | None
    rest: tuple[Any, ...] = ()
    hand_on: HandOn | None = None
    blockers: tuple[tuple[str, str], ...] = ()
    drawn: tuple[Any, ...] = ()

    @property
    def partial(self) -> bool:
        """Whether the user's own ops run after the fused part."""
        return self.hand_on is not None

    @property
    def rest_from(self) -> tuple[str, ...]:
        """The user's ops that run as written (the one ``hand_on`` stands for first)."""
        if self.hand_on is None:
            return ()
        replaced = (self.hand_on.replaces,) if self.hand_on.replaces else ()
        from fastload.gpu.deferred import DrawPerSample

        written = (op for op in self.rest if not isinstance(op, (HandBack, DrawPerSample)))
        return replaced + tuple(with_dtype(op, getattr(op, "dtype", None)) for op in written)

    @property
    def transform(self) -> ft.Compose | None:
        """The fused ops (then the hand-on and the rest) as the translated dataset's
        ``transform``."""
        ops: list[Any] = list(self.fused)
        if self.hand_on is not None:
            ops += [self.hand_on, *self.rest]
        if self.drawn:
            from fastload.gpu.deferred import DrawPerSample

            ops.append(DrawPerSample(self.drawn))
        return ft.Compose(ops) if ops else None

    @property
    def batch_ops(self) -> Callable[..., Any] | None:
        """The batch ops as one callable (``fastload.gpu.Compose``), or ``None``."""
        if not self.batch:
            return None
        if len(self.batch) == 1:
            return self.batch[0]
        from fastload.gpu.transforms import Compose

        return Compose(list(self.batch))


def flatten(transform: Any, known: Collection[type]) -> Iterator[Any]:
    """The ops of a transform in order: ``Compose`` opened, an object that provably only
    hands the image to an attribute (:func:`fastload.callables.wrappers.delegate_of`) read as that
    attribute, and one that provably only chains a list of ops
    (:func:`fastload.callables.wrappers.sequence_of`) read as those ops (each said once on the
    ``fastload`` logger)."""
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    if isinstance(transform, list):
        for t in transform:
            yield from flatten(t, known)
    elif type(transform) in (v1.Compose, v2.Compose):
        for t in transform.transforms:
            yield from flatten(t, known)
    elif type(transform) not in known and (inner := delegate_of(transform)) is not None:
        say_once(f"accelerate: {name_of(transform)} only hands the image on: reading its inner")
        yield from flatten(inner, known)
    elif type(transform) not in known and (chain := sequence_of(transform)) is not None:
        say_once(f"accelerate: {name_of(transform)} only chains its ops: reading them")
        for t in chain:
            yield from flatten(t, known)
    else:
        yield transform


SAID: set[str] = set()  # what say_once has said


def say_once(message: str) -> None:
    if message not in SAID:
        SAID.add(message)
        log.info(message)


def interpolation(op: Any) -> str:
    mode = op.interpolation
    name = str(getattr(mode, "value", mode)).lower()
    if name not in RESAMPLING:
        raise NotAccelerated(
            repr(op), f"interpolation {name!r} (fastload matches {', '.join(RESAMPLING)})"
        )
    return name


@dataclass
class Walk:
    """The translation so far: geometry until the image becomes a tensor, then its dtype."""

    fused: list[ft.Transform]
    fused_from: list[str]
    batch_from: list[str]
    tensor: bool = False
    dtype: torch.dtype = torch.uint8
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    resizes: int = 0
    drawn: list[Any] = field(default_factory=list)  # ops drawn per sample, applied on batches
    before: int = 0  # how many of them run on uint8, before the conversion
    policies: bool = False  # whether the policies may run on batches (a CUDA batch stage)

    def geometry(self, op: Any, fused: ft.Transform, *, resizes: bool = False) -> None:
        self.not_after_draws(op)
        if self.tensor:
            raise NotAccelerated(
                repr(op),
                "geometry on a tensor (after the conversion) resamples unlike the PIL image "
                "fastload reproduces",
            )
        if resizes:
            self.resizes += 1
            if self.resizes > 1:
                raise NotAccelerated(
                    repr(op), "a second resize (fastload resamples once; two would be approximated)"
                )
        self.fused.append(fused)
        self.fused_from.append(repr(op))

    def convert(self, op: Any, dtype: torch.dtype) -> None:
        if len(self.drawn) > self.before:
            raise NotAccelerated(repr(op), "a conversion after RandomErasing")
        if self.tensor and (self.dtype != torch.uint8 or not dtype.is_floating_point):
            raise NotAccelerated(repr(op), f"a conversion of a {self.dtype} tensor")
        if not self.tensor and dtype != torch.uint8 and not dtype.is_floating_point:
            raise NotAccelerated(repr(op), f"a conversion to {dtype}")
        self.tensor, self.dtype = True, dtype
        self.batch_from.append(with_dtype(op, dtype))

    def not_after_draws(self, op: Any) -> None:
        """Fused ops draw before decoding: not after an op drawn per sample."""
        if self.drawn:
            raise NotAccelerated(
                repr(op), f"it draws after {self.drawn[-1]!r}, and fused ops draw before decoding"
            )

    def draw_later(self, op: Any, ours: Any, *, on_uint8: bool) -> None:
        """An op whose draws are made per sample and applied on batches."""
        if on_uint8:
            if self.tensor and self.dtype != torch.uint8:
                raise NotAccelerated(repr(op), f"it takes uint8 images, not {self.dtype}")
            if len(self.drawn) > self.before:
                raise NotAccelerated(repr(op), "a policy after RandomErasing")
            self.before += 1
        elif not self.tensor:
            raise NotAccelerated(repr(op), "RandomErasing on a PIL image")
        self.drawn.append(ours)
        self.batch_from.append(f"{op!r} (drawn per sample)")


PER_SAMPLE = (
    "runs per sample, as written: a collate function of your own (or batch_size=None) gets "
    "the samples"
)


def with_dtype(op: Any, dtype: torch.dtype | None) -> str:
    """An op's repr, with the dtype it converts to where its repr leaves it out: torchvision
    prints ``ConvertImageDtype()``, which says nothing of float32."""
    text = repr(op)
    if not hasattr(op, "dtype") or not isinstance(dtype, torch.dtype) or not text.endswith("()"):
        return text
    return f"{text[:-1]}{str(dtype).replace('torch.', '')})"


def need_tensor(walk: Walk, op: Any) -> None:
    if not walk.tensor:
        raise NotAccelerated(repr(op), "a dtype conversion of a PIL image")


def name_of(op: Any) -> str:
    """How explain names an op or a callable of the user's: a function by its qualified name,
    torchvision's ops by their repr, anything else by its class."""
    if isinstance(op, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return f"{op.__qualname__} (a function)"
    kind = type(op)
    if kind.__module__.startswith("torchvision."):
        return repr(op)
    return f"{kind.__module__}.{kind.__qualname__}"
