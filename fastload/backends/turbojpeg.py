"""The TurboJPEG backend: PyTurboJPEG over the system's libjpeg-turbo."""

from __future__ import annotations

import warnings

import numpy as np

from fastload._optional import load_turbojpeg
from fastload.backends.base import Backend, register


@register
class TurboJPEGBackend(Backend):
    """Decodes with libjpeg-turbo's TurboJPEG API, reduced in the DCT domain by its scaling.

    libjpeg-turbo reports a truncated or corrupt stream as a warning and returns the pixels it
    has (grey where data is missing); fastload turns that warning into an error.
    """

    name = "turbojpeg"

    def __init__(self) -> None:
        self._tj = load_turbojpeg()  # raises with the install command when missing
        import turbojpeg

        self._rgb = turbojpeg.TJPF_RGB

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        factor = None if reduce == 1 else (1, reduce)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            array = self._tj.decode(data, pixel_format=self._rgb, scaling_factor=factor)
        if caught:
            raise ValueError(f"libjpeg-turbo: {caught[0].message}")
        return array
