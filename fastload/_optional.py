"""The libraries behind each decoding backend: import them where used, say how to install them.

Nothing here is imported at ``import fastload`` time; a backend calls :func:`require` when it is
first used, and ``fastload info`` calls :func:`check` for every backend.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = [
    "REQUIREMENTS",
    "Availability",
    "MissingDependencyError",
    "Requirement",
    "check",
    "load_turbojpeg",
    "require",
]

TURBOJPEG_LIB_ENV = "FASTLOAD_TURBOJPEG_LIB"


@dataclass(frozen=True)
class Requirement:
    """What one backend needs installed.

    Attributes:
        backend: The backend's registry name.
        distribution: The pip distribution that provides the module.
        module: The module to import.
        install: The command that installs it.
        system: A system package the module needs besides, if any.
    """

    backend: str
    distribution: str
    module: str
    install: str
    system: str | None = None


REQUIREMENTS: dict[str, Requirement] = {
    "pillow": Requirement("pillow", "pillow", "PIL", 'pip install "fastload"'),
    "opencv": Requirement("opencv", "opencv-python-headless", "cv2", 'pip install "fastload"'),
    "turbojpeg": Requirement(
        "turbojpeg",
        "PyTurboJPEG",
        "turbojpeg",
        'pip install "fastload[turbojpeg]"',
        system=(
            "apt-get install libturbojpeg0 (Debian/Ubuntu); without root: "
            "conda install -c conda-forge libjpeg-turbo, or set "
            f"{TURBOJPEG_LIB_ENV} to the path of a libturbojpeg.so"
        ),
    ),
    "dali": Requirement(
        "dali", "nvidia-dali-cuda120", "nvidia.dali", 'pip install "fastload[dali]"'
    ),
}


class MissingDependencyError(ImportError):
    """A backend's library, or the system library it wraps, is not installed."""


def _requirement(backend: str) -> Requirement:
    try:
        return REQUIREMENTS[backend]
    except KeyError:
        raise ValueError(
            f"backend={backend!r} is not known; valid: {', '.join(sorted(REQUIREMENTS))}"
        ) from None


def require(backend: str) -> ModuleType:
    """Import the library behind ``backend``, or say exactly how to install it.

    Args:
        backend: A name in :data:`REQUIREMENTS`.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: The module cannot be imported; the message names the install
            command.
        ValueError: ``backend`` is not a known name.
    """
    req = _requirement(backend)
    try:
        return importlib.import_module(req.module)
    except ImportError as exc:
        hint = f"; it also needs the system library: {req.system}" if req.system else ""
        raise MissingDependencyError(
            f"the {backend!r} backend needs the Python module {req.module!r} ({exc}). "
            f"Install it with: {req.install}{hint}"
        ) from exc


def load_turbojpeg() -> Any:
    """Return a ``turbojpeg.TurboJPEG`` handle on the system's libjpeg-turbo.

    The library is found where PyTurboJPEG looks by default, or at the path in the
    ``FASTLOAD_TURBOJPEG_LIB`` environment variable when it is set.

    Raises:
        MissingDependencyError: PyTurboJPEG or libturbojpeg is missing.
    """
    turbojpeg = require("turbojpeg")
    lib_path = os.environ.get(TURBOJPEG_LIB_ENV) or None
    try:
        return turbojpeg.TurboJPEG(lib_path=lib_path)
    except (OSError, RuntimeError) as exc:
        where = f" at {TURBOJPEG_LIB_ENV}={lib_path!r}" if lib_path else ""
        raise MissingDependencyError(
            f"PyTurboJPEG is installed but cannot load libturbojpeg{where} ({exc}). "
            f"Install it with: {REQUIREMENTS['turbojpeg'].system}"
        ) from exc


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this machine, and if not, why and how to fix it."""

    backend: str
    usable: bool
    version: str | None
    reason: str | None = None
    fix: str | None = None


def check(backend: str) -> Availability:
    """Find out whether ``backend``'s libraries load here, without raising.

    Args:
        backend: A name in :data:`REQUIREMENTS`.

    Returns:
        The backend's availability, with the reason and the install command when unusable.
    """
    req = _requirement(backend)
    try:
        version: str | None = importlib.metadata.version(req.distribution)
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        require(backend)
    except MissingDependencyError as exc:
        fix = f"{req.install}, and {req.system}" if req.system else req.install
        return Availability(backend, False, version, reason=str(exc.__cause__), fix=fix)
    if backend == "turbojpeg":
        try:
            load_turbojpeg()
        except MissingDependencyError as exc:
            return Availability(backend, False, version, reason=str(exc.__cause__), fix=req.system)
    return Availability(backend, True, version)
