"""OpenCLIP's ops whose meaning is torchvision's, each with its translator, and its conversions of
a PIL image: looked up only where OpenCLIP is imported already (a pipeline holding its ops has
imported it; importing it costs seconds)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from fastload.accelerate.torchvision_ops import maybe_to_tensor
from fastload.accelerate.walk import NotAccelerated, Walk

__all__ = ["conversions", "translators"]


def _maybe_convert_mode(walk: Walk, op: Any) -> None:
    """``MaybeConvertMode``: ``convert(mode)`` on a PIL image, a tensor passed on. fastload
    decodes to RGB, so ``"RGB"`` has nothing left to do."""
    if op.mode != "RGB":
        raise NotAccelerated(repr(op), f"a conversion to mode {op.mode!r} (fastload decodes RGB)")
    if walk.tensor:
        walk.batch_from.append(f"{op!r} (a tensor already: passed on)")
    else:
        walk.fused_from.append(f"{op!r} (decoded as RGB: nothing to do)")


def translators() -> dict[type, Callable[[Walk, Any], None]]:
    """OpenCLIP's ops, each with its translator."""
    open_clip = sys.modules.get("open_clip.transform")
    if open_clip is None:
        return {}
    return {
        open_clip.MaybeConvertMode: _maybe_convert_mode,
        open_clip.MaybeToTensor: functools.partial(maybe_to_tensor, dtype=None),
    }


def conversions() -> dict[type, str]:
    """OpenCLIP's conversions of a PIL image, by class, with the form they give."""
    open_clip = sys.modules.get("open_clip.transform")
    return {} if open_clip is None else {open_clip.MaybeToTensor: "float"}
