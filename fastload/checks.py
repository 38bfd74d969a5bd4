"""Argument checks every public function shares, so that a bad value reads the same everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["check_choice", "check_int", "choice_error", "differences"]


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


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type: ``1`` is not ``True`` here, nor ``"1"`` the int 1."""
    return a is b or (type(a) is type(b) and a == b)


def choice_error(name: str, value: Any, valid: Sequence[Any]) -> ValueError:
    """The one wording for a value that is not among the choices: it names the value and
    every valid choice (and nothing that is refused)."""
    listed = ", ".join(repr(v) for v in valid)
    return ValueError(f"{name}={value!r} is not valid; valid: {listed}")


def check_choice(name: str, value: Any, valid: Sequence[Any]) -> Any:
    """Refuse anything but one of ``valid`` (compared by type and value).

    Args:
        name: The argument's name, as the caller spells it.
        value: What was given.
        valid: Every value the argument accepts.

    Returns:
        ``value``, checked.

    Raises:
        ValueError: Names the argument, the value and every valid choice.
    """
    if not any(_same(value, v) for v in valid):
        raise choice_error(name, value, valid)
    return value


def differences(given: dict[str, Any], mine: dict[str, Any], *, there: str) -> list[str]:
    """Each key whose value in ``given`` differs from ``mine``'s, worded as
    ``"key <given> <there>, <mine> here"`` (a saved state or settings against these)."""
    return [
        f"{key} {given.get(key)!r} {there}, {value!r} here"
        for key, value in mine.items()
        if given.get(key) != value
    ]
