"""The OpenCV backend: libjpeg-turbo through ``cv2.imdecode``."""

from __future__ import annotations

import numpy as np

from fastload._optional import Requirement
from fastload.backends.base import Backend
from fastload.backends.registry import register


@register
class OpenCVBackend(Backend):
    """Decodes with ``cv2.imdecode``, reduced in the DCT domain by the IMREAD_REDUCED flags."""

    name = "opencv"
    requires = (Requirement("opencv-python-headless", "cv2", 'pip install "fastload"'),)
    auto_priority = 20  # about as fast as turbojpeg (benchmarks/decoding/decode_pipeline.py)

    def __init__(self) -> None:
        import cv2

        self._cv2 = cv2
        # Orientation is applied by the shared path, after the crop.
        ignore = cv2.IMREAD_IGNORE_ORIENTATION
        rgb = getattr(cv2, "IMREAD_COLOR_RGB", None)  # OpenCV >= 4.10 decodes to RGB directly
        self._swap = rgb is None
        reduced = {
            1: cv2.IMREAD_COLOR,
            2: cv2.IMREAD_REDUCED_COLOR_2,
            4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8,
        }
        if rgb is None:
            self._flags = {r: f | ignore for r, f in reduced.items()}
        else:  # the REDUCED flags include the BGR bit, which excludes the RGB one
            self._flags = {r: (f & ~cv2.IMREAD_COLOR) | rgb | ignore for r, f in reduced.items()}

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        array = self._cv2.imdecode(np.frombuffer(data, np.uint8), self._flags[reduce])
        if array is None:
            raise ValueError("OpenCV could not decode the data (corrupt or truncated)")
        if self._swap:
            array = self._cv2.cvtColor(array, self._cv2.COLOR_BGR2RGB)
        return array
