"""Which members of a sample are its image and its target, and what a target member means.

A name may list alternatives in webdataset's syntax, ``"jpg;png;jpeg;webp"``: the first one the
sample has wins. A target member's bytes become a value by its extension, as webdataset's
basic decoders read them: an ``int`` for ``cls`` (and ``cls2``, ``index``, ``inx``, ``id``), a
``str`` (UTF-8) for ``txt`` (and ``text``, ``transcript``), the parsed object for ``json`` (and
``jsn``); the bytes themselves for any other extension.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastload.shards.format.index import Part

__all__ = ["Target", "alternatives", "choose", "target_slots", "value"]

Target = str | tuple[str, ...] | None  # what ImageShards(target=...) takes

_INTEGERS = ("cls", "cls2", "index", "inx", "id")
_TEXTS = ("txt", "text", "transcript")
_JSON = ("json", "jsn")


def alternatives(spec: str) -> tuple[str, ...]:
    """``"jpg;png"`` -> ``("jpg", "png")`` (lowercase, without dots or blanks).

    Raises:
        ValueError: ``spec`` names no extension.
    """
    names = tuple(name.strip().lstrip(".").lower() for name in spec.split(";"))
    if not spec.strip() or not all(names):
        raise ValueError(f"{spec!r} names no member extension (e.g. 'txt' or 'jpg;png')")
    return names


def target_slots(target: Target) -> list[tuple[str, ...]]:
    """The alternatives of each member a target takes: one slot for a name, one per name of a
    tuple, none for ``None``.

    Raises:
        ValueError: ``target`` is not a name, a tuple of names or ``None``.
    """
    if target is None:
        return []
    if isinstance(target, str):
        return [alternatives(target)]
    if isinstance(target, tuple) and target and all(isinstance(t, str) for t in target):
        return [alternatives(t) for t in target]
    raise ValueError(
        f"target={target!r} must be a member's extension ('cls', 'txt', 'json', "
        "'jpg;png' for alternatives), a tuple of them, or None"
    )


def choose(parts: Sequence[Part], names: Sequence[str]) -> Part | None:
    """The member of the first of ``names`` the sample has (extensions compared lowercase)."""
    by_ext = {p.ext.lower(): p for p in parts}
    for name in names:
        if name in by_ext:
            return by_ext[name]
    return None


def value(ext: str, data: bytes) -> Any:
    """A target member's value, by its extension (see the module's notes).

    Raises:
        ValueError: A ``cls`` member that is not an integer, a ``txt`` member that is not
            UTF-8, a ``json`` member that is not JSON.
    """
    last = ext.rsplit(".", 1)[-1].lower()
    if last in _INTEGERS:
        try:
            return int(data.strip())
        except ValueError:
            raise ValueError(
                f"its .{ext} member holds {data[:40]!r}, not an integer label"
            ) from None
    if last in _TEXTS:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"its .{ext} member is not UTF-8 text: {exc}") from None
    if last in _JSON:
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ValueError(f"its .{ext} member is not JSON: {exc}") from None
    return data
