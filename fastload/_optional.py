"""Optional libraries: import them where used, and say how to install them when missing.

A backend declares what it needs as :class:`Requirement` values on its class (see
``fastload.backends.Backend.requires``); nothing here knows any backend by name. Nothing here
is imported at ``import fastload`` time beyond this module itself.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

__all__ = [
    "Availability",
    "MissingDependencyError",
    "Requirement",
    "availability",
    "require",
    "version_of",
]


@dataclass(frozen=True)
class Requirement:
    """One Python module a backend needs installed.

    Attributes:
        distribution: The pip distribution that provides the module.
        module: The module to import.
        install: The command that installs it.
        system: A system library the module needs besides, and how to install it, if any.
    """

    distribution: str
    module: str
    install: str
    system: str | None = None

    @property
    def fix(self) -> str:
        """Everything to run to get it: the pip command, and the system library if any."""
        return f"{self.install}, and {self.system}" if self.system else self.install


class MissingDependencyError(ImportError):
    """A backend's library, or the system library it wraps, is not installed."""


def require(requirement: Requirement, *, backend: str) -> ModuleType:
    """Import a module a backend needs, or say exactly how to install it.

    Args:
        requirement: What to import.
        backend: The backend that needs it (named in the error).

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: The module cannot be imported; the message names the install
            command.
    """
    try:
        return importlib.import_module(requirement.module)
    except ImportError as exc:
        hint = (
            f"; it also needs the system library: {requirement.system}"
            if requirement.system
            else ""
        )
        raise MissingDependencyError(
            f"the {backend!r} backend needs the Python module {requirement.module!r} ({exc}). "
            f"Install it with: {requirement.install}{hint}"
        ) from exc


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this machine, and if not, why and how to fix it."""

    backend: str
    usable: bool
    version: str | None
    reason: str | None = None
    fix: str | None = None


def version_of(distribution: str) -> str | None:
    """The installed version of a pip distribution, or ``None``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def availability(backend: str, requirements: Sequence[Requirement]) -> Availability:
    """Whether every module in ``requirements`` imports here, without raising.

    Returns:
        The availability; its version is the first requirement's installed version.
    """
    version = version_of(requirements[0].distribution) if requirements else None
    for requirement in requirements:
        try:
            require(requirement, backend=backend)
        except MissingDependencyError as exc:
            return Availability(backend, False, version, str(exc.__cause__), requirement.fix)
    return Availability(backend, True, version)
