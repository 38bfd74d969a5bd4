"""Run a user's unchanged torchvision pipeline fastload's way.

``fastload.DataLoader(..., accelerate=True)`` (or ``device="cuda"``) hands the dataset to
:func:`accelerate_dataset`. When the dataset is a ``torchvision.datasets.ImageFolder`` /
``DatasetFolder`` with torchvision's own image loader, or a fastload dataset, and every op of
its ``transform`` is one fastload can run with the same meaning, the pipeline is split:

* the per-sample geometry (``RandomResizedCrop``, ``Resize``, ``CenterCrop``, ``RandomCrop``
  without padding, ``RandomHorizontalFlip``; v1 and v2) becomes ``fastload.transforms`` ops,
  planned before decoding with torchvision's own draws and run fused with it;
* the conversion to a tensor and what follows it (``ToTensor``, ``PILToTensor``, ``ToImage``,
  ``ToDtype(..., scale=True)``, ``ConvertImageDtype``, ``Normalize``) becomes one batch op,
  so uint8 crosses the process boundary and the PCIe bus.

* torchvision's policies and ``ColorJitter`` (with a CUDA device) and ``RandomErasing`` are
  drawn per sample where torchvision draws them, and applied on whole batches
  (:mod:`fastload.gpu.policies`).

An op fastload does not run (a lambda, an unknown class, on the CPU a policy) ends the fused
part: the longest leading run of geometry is still fused with decoding, and the rest runs as
the user wrote it, per sample, on what torchvision would have there; a trailing conversion
still runs on batches. Nothing to fuse (an unknown op first, a custom loader) raises
:class:`NotAccelerated`, naming every op in the way, and the loader runs the pipeline
unchanged. Differences that remain are those of resampling and of Pillow's rounding
(documented in the README), never a different op.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from fastload import transforms as ft
from fastload.datasets import ImageDataset, ImageList
from fastload.gpu.transforms import Normalize
from fastload.handover import HandBack, HandOn, conversion_forms
from fastload.wrappers import delegate_of

__all__ = [
    "Acceleration",
    "NotAccelerated",
    "Translated",
    "accelerate_dataset",
    "explain",
    "name_of",
    "translate_transform",
]

log = logging.getLogger("fastload")

_RESAMPLING = ("bilinear", "bicubic")  # PIL's nearest picks other pixels than fastload's


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
        return replaced + tuple(_with_dtype(op, getattr(op, "dtype", None)) for op in written)

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


class _RandomCropV2(ft.RandomCrop):
    """torchvision v2's RandomCrop: it draws only along an axis the crop is shorter on."""

    def params(self, height: int, width: int) -> tuple[int, int]:
        ch, cw = self.size
        if height < ch or width < cw:
            return super().params(height, width)  # raises
        top = int(torch.randint(0, height - ch + 1, size=()).item()) if height > ch else 0
        left = int(torch.randint(0, width - cw + 1, size=()).item()) if width > cw else 0
        return top, left


class _TimmRandomResizedCrop(ft.RandomResizedCrop):
    """timm's ``RandomResizedCropAndInterpolation``: the crop drawn by timm's own
    ``get_params`` (from Python's ``random``, as timm draws it), then torchvision's resized
    crop, as timm applies it."""

    def __init__(self, op: Any, interpolation: str) -> None:
        super().__init__(tuple(op.size), op.scale, op.ratio, interpolation=interpolation)
        self.draw = type(op).get_params
        self.drawn_from = (op.scale, op.ratio)  # timm's values as given, for its own arithmetic

    def params(self, height: int, width: int) -> tuple[int, int, int, int]:
        # get_params reads only the image's size: an empty tensor of that size holds no pixels
        top, left, h, w = self.draw(torch.empty(0, height, width), *self.drawn_from)
        return int(top), int(left), int(h), int(w)


def _flatten(transform: Any, known: Collection[type]) -> Iterator[Any]:
    """The ops of a transform in order: ``Compose`` opened, and an object that provably only
    hands the image to an attribute (:func:`fastload.wrappers.delegate_of`) read as that
    attribute (said once on the ``fastload`` logger)."""
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    if isinstance(transform, list):
        for t in transform:
            yield from _flatten(t, known)
    elif type(transform) in (v1.Compose, v2.Compose):
        for t in transform.transforms:
            yield from _flatten(t, known)
    elif type(transform) not in known and (inner := delegate_of(transform)) is not None:
        _say_once(f"accelerate: {name_of(transform)} only hands the image on: reading its inner")
        yield from _flatten(inner, known)
    else:
        yield transform


_SAID: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _SAID:
        _SAID.add(message)
        log.info(message)


def _interpolation(op: Any) -> str:
    mode = op.interpolation
    name = str(getattr(mode, "value", mode)).lower()
    if name not in _RESAMPLING:
        raise NotAccelerated(
            repr(op), f"interpolation {name!r} (fastload matches {', '.join(_RESAMPLING)})"
        )
    return name


@dataclass
class _Walk:
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
        self.batch_from.append(_with_dtype(op, dtype))

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


def translate_transform(
    transform: Any, *, given: str = "pil", batches: bool = True, policies: bool = False
) -> Translated:
    """Translate a torchvision transform into fastload's ops, whole or its leading part.

    When every op translates (and ``batches``), the geometry is fused with decoding and the
    conversion and ``Normalize`` become batch ops (and the ops that draw per image, drawn per
    sample: :mod:`fastload.gpu.deferred`). Otherwise the longest leading run of geometry is
    fused, the rest runs as written, per sample, on what torchvision would have at that point
    (:class:`HandOn`), except a trailing conversion that runs on batches (:class:`HandBack`).

    Args:
        transform: A torchvision op or ``Compose`` (v1 or v2) of them.
        given: What the transform gets: ``"pil"`` (a PIL image, as from torchvision's
            ``ImageFolder``) or ``"uint8"`` (a C x H x W uint8 tensor, after fastload's fused ops).
        batches: Whether the loader collates with torch's default collate, so that the
            conversion may run on whole batches; if not, it runs per sample, as written.
        policies: Whether torchvision's policies (``TrivialAugmentWide``, ``RandAugment``,
            ``AutoAugment``, ``AugMix``) and ``ColorJitter`` run on whole batches (drawn per
            sample): where the batch stage runs on a CUDA device. On the CPU Pillow's
            per-image ops are faster than the batched tensor ops, so there they run as
            written. (``RandomErasing`` after the conversion runs on batches either way.)

    Returns:
        The fused ops, the batch ops or the ops run as written, and what each came from.

    Raises:
        NotAccelerated: Not even the first op can be fused; names every op in the way.
    """
    if transform is None:
        raise NotAccelerated("transform=None", "the dataset yields PIL images, nothing to batch")
    if given not in ("pil", "uint8"):
        raise ValueError(f"given={given!r} is not valid; valid: 'pil', 'uint8'")
    table = _translators()
    ops = list(_flatten(transform, table))
    walk = _Walk([], [], [], tensor=given == "uint8", policies=policies)
    blocked: list[tuple[str, str]] = []
    cut: int | None = None  # ops[:cut] are geometry on the PIL image: what a partial run fuses
    for i, op in enumerate(ops):
        fused, converted = len(walk.fused), len(walk.batch_from)
        try:
            translator = table.get(type(op))
            if translator is None:
                raise NotAccelerated(
                    name_of(op), "not an op fastload can run with the same meaning"
                )
            translator(walk, op)
            if not batches and len(walk.batch_from) > converted:
                raise NotAccelerated(_with_dtype(op, walk.dtype), _PER_SAMPLE)
        except NotAccelerated as why:  # the walk goes on: every blocker is named at once
            blocked.append((why.what, why.why))
        if cut is None and (blocked or len(walk.fused) == fused or walk.tensor):
            cut = i
    if not blocked and walk.tensor:
        return _whole(walk, transform)
    cut = cut if cut is not None else len(ops)
    return _partial(ops, walk.fused, cut, tuple(blocked), batches=batches, policies=policies)


_PER_SAMPLE = (
    "runs per sample, as written: a collate function of your own (or batch_size=None) gets "
    "the samples"
)


def _whole(walk: _Walk, transform: Any) -> Translated:
    """Every op translated: the geometry fused; the ops drawn per sample, the conversion and
    Normalize on batches, in the pipeline's order."""
    from fastload.gpu.deferred import Deferred

    deferred = [
        Deferred(op, slot, "ops" if slot < walk.before else "boxes")
        for slot, op in enumerate(walk.drawn)
    ]
    batch: list[Any] = deferred[: walk.before]
    if walk.dtype.is_floating_point:
        if walk.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise NotAccelerated(repr(transform), f"images of {walk.dtype}")
        mean, std = walk.mean or (0.0,), walk.std or (1.0,)
        batch.append(Normalize(mean, std, dtype=walk.dtype))
    batch += deferred[walk.before :]
    return Translated(
        tuple(walk.fused),
        tuple(batch),
        tuple(walk.fused_from),
        tuple(walk.batch_from),
        walk.dtype,
        drawn=tuple(walk.drawn),
    )


def _partial(
    ops: list[Any],
    fused: list[ft.Transform],
    cut: int,
    blockers: tuple[tuple[str, str], ...],
    *,
    batches: bool,
    policies: bool,
) -> Translated:
    """The leading geometry (``ops[:cut]``) fused; the rest as written, per sample, except a
    trailing conversion (and ``Normalize``, ``RandomErasing``) that can run on whole batches.

    Raises:
        NotAccelerated: Nothing leads that could be fused.
    """
    if cut == 0:
        if not blockers:  # a tensor given, nothing but conversions: the batch needs them
            blockers = ((name_of(ops[0]) if ops else "transform", _PER_SAMPLE),)
        raise NotAccelerated(*blockers[0], blockers=blockers)
    rest, tail = ops[cut:], _batch_tail(ops, cut + 1, policies) if batches else None
    if tail is not None:
        rest = ops[cut : len(ops) - len(tail.batch_from)]
    hand_on = HandOn("pil")
    form = conversion_forms().get(type(rest[0])) if rest else None
    if form is not None:
        hand_on, rest = HandOn(form, repr(rest[0])), rest[1:]
    if tail is not None:
        first = ops[len(ops) - len(tail.batch_from)]
        rest.append(
            HandBack(tail.batch_from[0], tensors=conversion_forms()[type(first)] == "image")
        )
        if tail.drawn:  # drawn where torchvision draws them: after the ops run as written
            from fastload.gpu.deferred import DrawPerSample

            rest.append(DrawPerSample(tail.drawn))
    return Translated(
        tuple(fused[:cut]),
        tail.batch if tail is not None else (),
        tuple(repr(op) for op in ops[:cut]),
        tail.batch_from if tail is not None else (),
        tail.dtype if tail is not None else None,
        rest=tuple(rest),
        hand_on=hand_on,
        blockers=blockers,
    )


def _batch_tail(ops: list[Any], start: int, policies: bool) -> Translated | None:
    """The longest tail of ``ops`` (from ``start`` on) that begins with a conversion of a PIL
    image and runs whole on batches, translated; ``None`` when there is none."""
    table, forms = _translators(), conversion_forms()
    for s in range(start, len(ops)):
        if type(ops[s]) not in forms:
            continue
        walk = _Walk([], [], [], policies=policies)
        try:
            for op in ops[s:]:
                table[type(op)](walk, op)  # a KeyError: an op with no translator
                if walk.fused:  # geometry after the conversion: not batch work
                    break
            else:
                if walk.tensor:
                    return _whole(walk, ops[s:])
        except (KeyError, NotAccelerated):
            continue
    return None


# ---------------------------------------------------------------- one translator per op


def _random_resized_crop(walk: _Walk, op: Any) -> None:
    fused = ft.RandomResizedCrop(
        tuple(op.size), op.scale, op.ratio, interpolation=_interpolation(op)
    )
    walk.geometry(op, fused, resizes=True)


def _resize(walk: _Walk, op: Any) -> None:
    if op.size is None:
        raise NotAccelerated(repr(op), "size=None (max_size alone)")
    fused = ft.Resize(op.size, _interpolation(op), max_size=op.max_size)
    walk.geometry(op, fused, resizes=True)


def _center_crop(walk: _Walk, op: Any) -> None:
    walk.geometry(op, ft.CenterCrop(tuple(op.size)))


def _random_crop(walk: _Walk, op: Any, *, v2: bool) -> None:
    if op.padding is not None or op.pad_if_needed:
        raise NotAccelerated(repr(op), "padding (fastload crops without it)")
    walk.geometry(op, _RandomCropV2(tuple(op.size)) if v2 else ft.RandomCrop(tuple(op.size)))


def _horizontal_flip(walk: _Walk, op: Any) -> None:
    # a flip commutes with the per-pixel conversions, so it fuses wherever it stands; its one
    # draw keeps its place among the others
    walk.not_after_draws(op)
    walk.fused.append(ft.RandomHorizontalFlip(op.p))
    walk.fused_from.append(repr(op))


def _to_tensor(walk: _Walk, op: Any, *, dtype: torch.dtype | None) -> None:
    """``ToTensor`` (``dtype=None``: torch's default float dtype), ``PILToTensor``,
    ``ToImage``: each takes a PIL image."""
    if walk.tensor:
        raise NotAccelerated(repr(op), "it takes a PIL image and would get a tensor")
    walk.convert(op, torch.get_default_dtype() if dtype is None else dtype)


def _to_image(walk: _Walk, op: Any) -> None:
    walk.convert(op, torch.uint8)


def _convert_dtype(walk: _Walk, op: Any) -> None:
    _need_tensor(walk, op)
    walk.convert(op, op.dtype)


def _to_dtype(walk: _Walk, op: Any) -> None:
    _need_tensor(walk, op)
    if not isinstance(op.dtype, torch.dtype):
        raise NotAccelerated(repr(op), "a dtype per input type")
    if op.dtype.is_floating_point and not op.scale:
        raise NotAccelerated(repr(op), "scale=False (values 0..255 as floats)")
    walk.convert(op, op.dtype)


def _normalize(walk: _Walk, op: Any) -> None:
    if len(walk.drawn) > walk.before:
        raise NotAccelerated(repr(op), "Normalize after RandomErasing")
    if not walk.tensor or not walk.dtype.is_floating_point or walk.mean is not None:
        raise NotAccelerated(repr(op), "Normalize where it does not follow a float conversion")
    walk.mean, walk.std = tuple(op.mean), tuple(op.std)
    walk.batch_from.append(repr(op))


def _to_pure_tensor(walk: _Walk, op: Any) -> None:
    if not walk.tensor:
        raise NotAccelerated(name_of(op), "not an op fastload can run with the same meaning")
    walk.batch_from.append(repr(op))


def _maybe_to_tensor(walk: _Walk, op: Any, *, dtype: torch.dtype | None) -> None:
    """timm's ``MaybeToTensor`` / ``MaybePILToTensor``: torchvision's conversion on a PIL
    image; a tensor passes through them unchanged."""
    if walk.tensor:
        walk.batch_from.append(f"{op!r} (a tensor already: passed on)")
        return
    _to_tensor(walk, op, dtype=dtype)


def _maybe_convert_mode(walk: _Walk, op: Any) -> None:
    """OpenCLIP's ``MaybeConvertMode``: ``convert(mode)`` on a PIL image, a tensor passed on.
    fastload decodes to RGB, so ``"RGB"`` has nothing left to do."""
    if op.mode != "RGB":
        raise NotAccelerated(repr(op), f"a conversion to mode {op.mode!r} (fastload decodes RGB)")
    if walk.tensor:
        walk.batch_from.append(f"{op!r} (a tensor already: passed on)")
    else:
        walk.fused_from.append(f"{op!r} (decoded as RGB: nothing to do)")


def _policy(walk: _Walk, op: Any, *, ours: Any) -> None:
    """torchvision's policies (v1): drawn per sample, applied on the uint8 batch by a CUDA
    device; on the CPU they stay as written."""
    if not walk.policies:
        raise NotAccelerated(repr(op), _POLICY_ON_CPU)
    walk.draw_later(op, ours.of(op), on_uint8=True)


def _policy_v2(walk: _Walk, op: Any) -> None:
    """torchvision v2's policies: v2's draws (:mod:`fastload.gpu.policies_v2`), else as v1's."""
    if not walk.policies:
        raise NotAccelerated(repr(op), _POLICY_ON_CPU)
    from fastload.gpu import policies_v2

    try:
        ours = policies_v2.of(op)
    except ValueError as exc:
        raise NotAccelerated(repr(op), str(exc)) from None
    walk.draw_later(op, ours, on_uint8=True)


def _color_jitter_v2(walk: _Walk, op: Any) -> None:
    """v2's ``ColorJitter`` draws what v1's draws (the order, then each factor from
    ``uniform_``), from the same ranges."""
    import torchvision.transforms as v1

    from fastload.gpu import policies

    if not walk.policies:
        raise NotAccelerated(repr(op), _POLICY_ON_CPU)
    ranges = [r if r is not None else 0 for r in (op.brightness, op.contrast, op.saturation)]
    same = v1.ColorJitter(*ranges, op.hue if op.hue is not None else 0)
    walk.draw_later(op, policies.ColorJitter.of(same), on_uint8=True)


_POLICY_ON_CPU = (
    "runs as written without a CUDA device: on the CPU Pillow's per-image ops are faster than "
    "the same ops on uint8 batches (benchmarks/reference_recipes.py)"
)


def _random_erasing(walk: _Walk, op: Any) -> None:
    from fastload.gpu.policies import RandomErasing

    # it follows the conversion: the batch it erases is the stage's own, so in place
    walk.draw_later(op, RandomErasing.of(op, inplace=True), on_uint8=False)


def _random_erasing_v2(walk: _Walk, op: Any) -> None:
    """v2's ``RandomErasing`` draws what v1's draws, call for call (its coin, ten tries of
    area and log-ratio, the noise, the corner); it keeps ``value`` as a list, or ``None`` for
    ``"random"``, which v1 reads alike."""
    import torchvision.transforms as v1

    value = "random" if op.value is None else op.value
    _random_erasing(walk, v1.RandomErasing(op.p, op.scale, op.ratio, value))


def _timm_random_resized_crop(walk: _Walk, op: Any) -> None:
    if isinstance(op.interpolation, (tuple, list)):
        raise NotAccelerated(
            repr(op),
            "interpolation='random' picks bilinear or bicubic per image; fastload resamples "
            "a whole pipeline one way",
        )
    fused = _TimmRandomResizedCrop(op, _interpolation(op))
    walk.geometry(op, fused, resizes=True)


def _timm_translators() -> dict[type, Callable[[_Walk, Any], None]]:
    """timm's ops whose meaning is torchvision's (none when timm is not installed).

    ``ToNumpy`` makes a C x H x W uint8 array, which torch's default collate turns into the
    uint8 batch ``PILToTensor`` gives. ``RandomResizedCropAndInterpolation`` draws with timm's
    own code, from Python's ``random`` (which torch's workers seed as they seed torch's).
    """
    try:
        from timm.data import transforms as timm
    except ImportError:
        return {}
    return {
        timm.RandomResizedCropAndInterpolation: _timm_random_resized_crop,
        timm.MaybeToTensor: functools.partial(_maybe_to_tensor, dtype=None),
        timm.MaybePILToTensor: functools.partial(_maybe_to_tensor, dtype=torch.uint8),
        timm.ToNumpy: functools.partial(_to_tensor, dtype=torch.uint8),
    }


def _open_clip_translators() -> dict[type, Callable[[_Walk, Any], None]]:
    """OpenCLIP's ops whose meaning is torchvision's: looked up only where OpenCLIP is imported
    already (a pipeline holding its ops has imported it; importing it costs seconds)."""
    open_clip = sys.modules.get("open_clip.transform")
    if open_clip is None:
        return {}
    return {
        open_clip.MaybeConvertMode: _maybe_convert_mode,
        open_clip.MaybeToTensor: functools.partial(_maybe_to_tensor, dtype=None),
    }


def _translators() -> dict[type, Callable[[_Walk, Any], None]]:
    """torchvision's op classes (v1 and v2), and timm's with the same meaning, each with its
    translator: the one place a new op that ``accelerate`` runs goes."""
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    from fastload.gpu import policies

    return {
        **_timm_translators(),
        **_open_clip_translators(),
        v1.TrivialAugmentWide: functools.partial(_policy, ours=policies.TrivialAugmentWide),
        v1.RandAugment: functools.partial(_policy, ours=policies.RandAugment),
        v1.AutoAugment: functools.partial(_policy, ours=policies.AutoAugment),
        v1.AugMix: functools.partial(_policy, ours=policies.AugMix),
        v1.ColorJitter: functools.partial(_policy, ours=policies.ColorJitter),
        v2.TrivialAugmentWide: _policy_v2,
        v2.RandAugment: _policy_v2,
        v2.AutoAugment: _policy_v2,
        v2.AugMix: _policy_v2,
        v2.ColorJitter: _color_jitter_v2,
        v1.RandomErasing: _random_erasing,
        v2.RandomErasing: _random_erasing_v2,
        v1.RandomResizedCrop: _random_resized_crop,
        v2.RandomResizedCrop: _random_resized_crop,
        v1.Resize: _resize,
        v2.Resize: _resize,
        v1.CenterCrop: _center_crop,
        v2.CenterCrop: _center_crop,
        v1.RandomCrop: functools.partial(_random_crop, v2=False),
        v2.RandomCrop: functools.partial(_random_crop, v2=True),
        v1.RandomHorizontalFlip: _horizontal_flip,
        v2.RandomHorizontalFlip: _horizontal_flip,
        v1.ToTensor: functools.partial(_to_tensor, dtype=None),
        v2.ToTensor: functools.partial(_to_tensor, dtype=None),
        v1.PILToTensor: functools.partial(_to_tensor, dtype=torch.uint8),
        v2.PILToTensor: functools.partial(_to_tensor, dtype=torch.uint8),
        v2.ToImage: _to_image,
        v1.ConvertImageDtype: _convert_dtype,
        v2.ConvertImageDtype: _convert_dtype,
        v2.ToDtype: _to_dtype,
        v1.Normalize: _normalize,
        v2.Normalize: _normalize,
        v2.ToPureTensor: _to_pure_tensor,
    }


def _with_dtype(op: Any, dtype: torch.dtype | None) -> str:
    """An op's repr, with the dtype it converts to where its repr leaves it out: torchvision
    prints ``ConvertImageDtype()``, which says nothing of float32."""
    text = repr(op)
    if not hasattr(op, "dtype") or not isinstance(dtype, torch.dtype) or not text.endswith("()"):
        return text
    return f"{text[:-1]}{str(dtype).replace('torch.', '')})"


def _need_tensor(walk: _Walk, op: Any) -> None:
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


def accelerate_dataset(
    dataset: Any, *, batches: bool = True, policies: bool = False
) -> tuple[ImageDataset, Translated]:
    """A fastload dataset that runs ``dataset``'s pipeline fused with decoding.

    Args:
        dataset: A ``torchvision.datasets.ImageFolder`` / ``DatasetFolder`` with torchvision's
            image loader, or a fastload dataset (``ImageFolder``, ``ImageList``,
            ``ImageShards``) whose ``transform`` is torchvision's.
        batches: Whether batches are collated by torch's default collate (see
            :func:`translate_transform`).
        policies: Whether torchvision's policies run on batches (see
            :func:`translate_transform`).

    Returns:
        The dataset to load from (same samples, labels, classes and ``target_transform``;
        EXIF orientation as the original applies it), and the translation, whose ``batch_ops``
        complete the pipeline on whole batches (or whose ``rest`` runs per sample, as written).

    Raises:
        NotAccelerated: The dataset or an op of its transform cannot be run fastload's way.
    """
    if isinstance(dataset, ImageDataset):  # fastload's own: a folder, a list, shards
        return _accelerate_own(dataset, batches=batches, policies=policies)
    from torchvision.datasets import DatasetFolder
    from torchvision.datasets.folder import default_loader, pil_loader

    name = type(dataset).__name__
    if not isinstance(dataset, DatasetFolder):
        raise NotAccelerated(
            name, "not a torchvision ImageFolder / DatasetFolder or a fastload dataset"
        )
    if type(dataset).__getitem__ is not DatasetFolder.__getitem__:
        raise NotAccelerated(name, "it overrides __getitem__")
    if dataset.loader is not pil_loader and dataset.loader is not default_loader:
        raise NotAccelerated(f"loader={name_of(dataset.loader)}", "a custom image loader")
    import torchvision

    if dataset.loader is default_loader and torchvision.get_image_backend() != "PIL":
        raise NotAccelerated("loader", f"torchvision's {torchvision.get_image_backend()} backend")
    translated = translate_transform(dataset.transform, batches=batches, policies=policies)
    paths = [path for path, _ in dataset.samples]
    fast = ImageList(
        paths,
        [label for _, label in dataset.samples],
        translated.transform,
        dataset.target_transform,
        classes=dataset.classes,
        exif_orientation=False,  # torchvision's loader keeps the stored pixels
    )
    fast.class_to_idx = dict(dataset.class_to_idx)
    return fast, translated


def _accelerate_own(
    dataset: ImageDataset, *, batches: bool, policies: bool
) -> tuple[ImageDataset, Translated]:
    """:func:`accelerate_dataset` for a fastload dataset: a torchvision transform in place of
    fastload's ops, or torchvision's tensor ops after them (those move to the batch)."""
    split = dataset.transform_split
    if split.pil is not None:
        translated = translate_transform(split.pil, batches=batches, policies=policies)
        return dataset.with_transform(translated.transform), translated
    if not split.after:
        raise NotAccelerated(
            type(dataset).__name__, "its transform is fastload's own already (nothing to do)"
        )
    rest = translate_transform(list(split.after), given="uint8", batches=batches, policies=policies)
    translated = Translated(
        split.fused + rest.fused,
        rest.batch,
        tuple(repr(op) for op in split.fused) + rest.fused_from,
        rest.batch_from,
        rest.dtype,
        drawn=rest.drawn,
    )
    return dataset.with_transform(translated.transform), translated


@dataclass(frozen=True)
class Acceleration:
    """What ``accelerate`` did to a loader's pipeline (``str()`` describes it).

    Attributes:
        accelerated: Whether fastload runs the pipeline its own way.
        reason: Why not (the op in the way), when it does not; else empty.
        dataset: The user's dataset's class.
        decoder: The per-sample decoder, when accelerated.
        decoding: Where decoding runs.
        fused: The user's ops run fused with decoding.
        batch: The user's ops run on whole batches.
        where: Where the batch ops run.
        dtype: The dtype of the images delivered (empty when the user's own ops decide it).
        rest: The user's ops run as written, per sample, after the fused part (accelerated
            in part).
        handed: What the first of ``rest`` is given.
        blockers: Every op in the way, with why, in the pipeline's order: what keeps the
            pipeline unchanged, or (accelerated in part) what keeps ``rest`` as written.
    """

    accelerated: bool
    reason: str = ""
    dataset: str = ""
    decoder: str | None = None
    decoding: str = ""
    fused: tuple[str, ...] = ()
    batch: tuple[str, ...] = ()
    where: str = ""
    dtype: str = ""
    rest: tuple[str, ...] = ()
    handed: str = ""
    blockers: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.accelerated and len(self.blockers) > 1:
            lines = [f"{self.dataset}: runs unchanged, as torch runs it; in the way:"]
            return "\n".join([*lines, *(f"  {b}" for b in self.blockers)])
        if not self.accelerated:
            return f"{self.dataset}: runs unchanged, as torch runs it ({self.reason})"
        if self.rest:
            lines = [f"{self.dataset}: accelerated in part (the rest runs as you wrote it)"]
        else:
            lines = [f"{self.dataset}: accelerated (images delivered as {self.dtype})"]
        lines.append(f"  fused with decoding ({self.decoder}, {self.decoding}):")
        lines += [f"    {op}" for op in self.fused] or ["    (nothing: whole images)"]
        if self.rest:
            lines.append(f"  as you wrote it, per sample, {self.decoding}, given {self.handed}:")
            lines += [f"    {op}" for op in self.rest]
        if self.batch or not self.rest:
            lines.append(f"  on whole uint8 batches ({self.where}):")
            lines += [f"    {op}" for op in self.batch] or ["    (nothing: uint8 batches)"]
        if self.blockers:
            lines.append("  why the rest is not fastload's:")
            lines += [f"    {b}" for b in self.blockers]
        return "\n".join(lines)


def explain(loader: Any) -> str:
    """Say what a ``fastload.DataLoader`` runs where: decoding, fused ops, batch ops, device.

    Args:
        loader: A ``fastload.DataLoader``.
    """
    plan = getattr(loader, "plan", None)
    if plan is None:
        raise ValueError(f"explain takes a fastload.DataLoader, got {type(loader).__name__}")
    device = plan.device
    workers = f"num_workers={loader.num_workers}"
    if getattr(plan, "threads", False):
        workers += " (threads of this process)"
    choice = getattr(loader, "worker_choice", None)
    if choice:
        workers += f" [{choice}]"
    head = (
        f"fastload.DataLoader: batch_size={loader.batch_size}, {workers}, "
        f"device={str(device) if device is not None else 'as torch yields'}, "
        f"backend={plan.backend or 'n/a'}"
    )
    reading = getattr(loader.dataset, "reading", None)  # shards: local, or remote and how
    if callable(reading):
        head += f"\n{type(loader.dataset).__name__} {reading(loader.sampler)}"
    return f"{head}\n{plan.acceleration}"
