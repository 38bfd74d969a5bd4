"""The one registry of backends, both kinds: everything else asks it, by name.

``fastload info``, ``fastload bench``, ``fastload scan``, ``"auto"``, the loader's ``backend=``
and the contract tests all derive from :func:`names`, so a backend added with :func:`register`
works everywhere the moment it registers.
"""

from __future__ import annotations

import warnings
from typing import Any

from fastload._optional import Availability, MissingDependencyError
from fastload.backends.base import KINDS, Backend, Kind
from fastload.checks import choice_error

__all__ = [
    "auto_order",
    "check",
    "choices",
    "create",
    "get",
    "kind",
    "names",
    "register",
    "resolve",
    "unregister",
]

_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Add a backend class to the registry under ``cls.name`` (usable as a decorator).

    Raises:
        ValueError: The class has no name, the name is ``"auto"`` or taken, or its ``kind``
            is not one of ``KINDS``; an executor that does not implement ``executor``.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"backend class {cls.__name__} needs a name other than 'auto'")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"a backend named {name!r} is registered already")
    if cls.kind not in KINDS:
        raise ValueError(f"backend {name!r}: kind={cls.kind!r} is not valid; valid: {KINDS}")
    if cls.kind == "executor" and cls.executor.__func__ is Backend.executor.__func__:  # type: ignore[attr-defined]
        raise ValueError(f"backend {name!r} is an executor but does not define executor()")
    _REGISTRY[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove the backend registered as ``name`` (a plugin's tests clean up with it).

    Raises:
        ValueError: The name is not registered.
    """
    get(name)
    del _REGISTRY[name]


def names(kind: Kind | None = None) -> list[str]:
    """The registered backend names, sorted; only those of one ``kind`` when given."""
    return sorted(n for n, cls in _REGISTRY.items() if kind is None or cls.kind == kind)


def get(name: str) -> type[Backend]:
    """The class registered under ``name``.

    Raises:
        ValueError: The name is not registered; the message lists the valid names.
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise choice_error("backend", name, names())
    return _REGISTRY[name]


def choices() -> list[str]:
    """Every name a dataset's, the loader's or a command's ``backend`` accepts: ``"auto"``,
    then the registered backends."""
    return ["auto", *names()]


def kind(name: str) -> Kind:
    """``"decoder"`` or ``"executor"``: how the backend registered as ``name`` runs."""
    return get(name).kind


def check(name: str) -> Availability:
    """Whether the backend ``name`` can run here, without raising (why not, and the fix)."""
    return get(name).check()


def auto_order() -> list[str]:
    """The backends ``"auto"`` tries, in order: those with an ``auto_priority``, lowest first."""
    ranked = [
        (cls.auto_priority, n) for n, cls in _REGISTRY.items() if cls.auto_priority is not None
    ]
    return [n for _, n in sorted(ranked)]


def resolve(name: str) -> str:
    """The backend a name stands for: ``"auto"`` becomes the first usable of :func:`auto_order`.

    Raises:
        ValueError: The name is not registered.
        fastload.MissingDependencyError: ``"auto"`` and no backend is usable.
    """
    if name != "auto":
        if not isinstance(name, str) or name not in _REGISTRY:
            raise choice_error("backend", name, choices())
        return get(name).name
    order = auto_order()
    for candidate in order:
        if check(candidate).usable:
            return candidate
    raise MissingDependencyError(
        "no decoding backend is usable here; " + "; ".join(f"{n}: {check(n).reason}" for n in order)
    )


def create(name: str = "auto") -> Backend:
    """A backend instance by name (``"auto"``: the fastest usable here).

    Raises:
        ValueError: The name is not registered; the message lists the valid names.
        fastload.MissingDependencyError: The backend's library is not installed; the message
            names the install command.
    """
    return _REGISTRY[resolve(name)]()


def __getattr__(attribute: str) -> Any:
    if attribute == "AUTO_ORDER":
        warnings.warn(
            "fastload.backends.AUTO_ORDER is deprecated: call fastload.backends.auto_order()",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(auto_order())
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
