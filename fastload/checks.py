"""Argument checks every public function shares, so that a bad value reads the same everywhere."""

from __future__ import annotations

from typing import Any

__all__ = ["check_int"]


def check_int(name: str, value: Any, *, minimum: int, what: str = "") -> int:
    """Refuse anything but an int of at least ``minimum`` (``True`` is not an int here).

    Args:
        name: The argument's name, as the caller spells it.
        value: What was given.
        minimum: The smallest valid value.
        what: What the number means, added to the message (``"the dali thread count"``).

    Returns:
        ``value``, checked.

    Raises:
        ValueError: Names the argument, the value and the bound.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        meaning = f" ({what})" if what else ""
        raise ValueError(f"{name}={value!r} must be an int >= {minimum}{meaning}")
    return value
