"""The TurboJPEG backend: PyTurboJPEG over the system's libjpeg-turbo."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from fastload import compat
from fastload._optional import Availability, MissingDependencyError, Requirement, require
from fastload.backends.base import Backend
from fastload.backends.registry import register

__all__ = ["TURBOJPEG_LIB_ENV", "TurboJPEGBackend", "load_turbojpeg"]

TURBOJPEG_LIB_ENV = "FASTLOAD_TURBOJPEG_LIB"

PYTURBOJPEG = Requirement(
    "PyTurboJPEG",
    "turbojpeg",
    'pip install "fastload[turbojpeg]"',
    system=(
        "apt-get install libturbojpeg0 (Debian/Ubuntu); without root: "
        "conda install -c conda-forge libjpeg-turbo, or set "
        f"{TURBOJPEG_LIB_ENV} to the path of a libturbojpeg.so"
    ),
)


def load_turbojpeg() -> Any:
    """Return a ``turbojpeg.TurboJPEG`` handle on the system's libjpeg-turbo.

    The library is found where PyTurboJPEG looks by default, or at the path in the
    ``FASTLOAD_TURBOJPEG_LIB`` environment variable when it is set.

    Raises:
        MissingDependencyError: PyTurboJPEG or libturbojpeg is missing.
    """
    turbojpeg = require(PYTURBOJPEG, backend="turbojpeg")
    lib_path = os.environ.get(TURBOJPEG_LIB_ENV) or None
    try:
        return turbojpeg.TurboJPEG(lib_path=lib_path)
    except (OSError, RuntimeError) as exc:
        where = f" at {TURBOJPEG_LIB_ENV}={lib_path!r}" if lib_path else ""
        raise MissingDependencyError(
            f"PyTurboJPEG is installed but cannot load libturbojpeg{where} ({exc}). "
            f"Install it with: {PYTURBOJPEG.system}"
        ) from exc


@register
class TurboJPEGBackend(Backend):
    """Decodes with libjpeg-turbo's TurboJPEG API, reduced in the DCT domain by its scaling.

    libjpeg-turbo reports a truncated or corrupt stream as a warning and returns the pixels it
    has (grey where data is missing); fastload turns that warning into an error.
    """

    name = "turbojpeg"
    requires = (PYTURBOJPEG,)
    auto_priority = 10  # the fastest here (benchmarks/decoding/decode_pipeline.py)

    @classmethod
    def check(cls) -> Availability:
        found = super().check()
        if not found.usable:
            return found
        try:  # the module imports; the system library it wraps must load too
            load_turbojpeg()
        except MissingDependencyError as exc:
            return Availability(
                cls.name, False, found.version, str(exc.__cause__), PYTURBOJPEG.system
            )
        return found

    def __init__(self) -> None:
        self._tj = load_turbojpeg()  # raises with the install command when missing
        import turbojpeg

        self._rgb = turbojpeg.TJPF_RGB
        self._raises = compat.turbojpeg_warnings_raise(self._tj)  # no warnings to catch

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        factor = None if reduce == 1 else (1, reduce)
        if not self._raises:  # catch_warnings is process-wide: not safe beside other threads
            return self._decode_catching(data, factor)
        try:
            return self._tj.decode(data, pixel_format=self._rgb, scaling_factor=factor)
        except OSError as exc:
            raise ValueError(f"libjpeg-turbo: {exc}") from None

    def _decode_catching(self, data: bytes, factor: tuple[int, int] | None) -> np.ndarray:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            array = self._tj.decode(data, pixel_format=self._rgb, scaling_factor=factor)
        if caught:
            raise ValueError(f"libjpeg-turbo: {caught[0].message}")
        return array
