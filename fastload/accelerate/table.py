"""Every op ``accelerate`` runs, by class, with its translator, and every conversion of a PIL
image it knows: one module per library whose ops it translates (torchvision, timm, OpenCLIP), a
new library one more module here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastload.accelerate import open_clip_ops, timm_ops, torchvision_ops
from fastload.accelerate.walk import Walk

__all__ = ["conversion_forms", "translators"]

_LIBRARIES = (timm_ops, open_clip_ops, torchvision_ops)  # a class of two: the last one's


def translators() -> dict[type, Callable[[Walk, Any], None]]:
    """Each op class with its translator."""
    table: dict[type, Callable[[Walk, Any], None]] = {}
    for library in _LIBRARIES:
        table.update(library.translators())
    return table


def conversion_forms() -> dict[type, str]:
    """The conversions of a PIL image that :class:`fastload.callables.handover.HandOn` makes
    exactly from the fused uint8 tensor, by class (a subclass may convert otherwise): the form
    each gives."""
    forms: dict[type, str] = {}
    for library in _LIBRARIES:
        forms.update(library.conversions())
    return forms
