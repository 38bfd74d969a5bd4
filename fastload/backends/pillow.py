"""The Pillow backend: the reference decoder, and the one that needs nothing but pip."""

from __future__ import annotations

import io

import numpy as np

from fastload._optional import Requirement
from fastload.backends.base import Backend
from fastload.backends.registry import register


@register
class PillowBackend(Backend):
    """Decodes with Pillow; DCT-domain reduction through ``Image.draft``."""

    name = "pillow"
    requires = (Requirement("pillow", "PIL", 'pip install "fastload"'),)
    auto_priority = 30  # the slowest of the three on JPEGs (benchmarks/decoding/decode_pipeline.py)

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            if reduce > 1:
                # draft() picks the largest scale that keeps the image at least this size;
                # flooring the request makes that scale exactly 1/reduce.
                image.draft("RGB", (image.width // reduce, image.height // reduce))
            image.load()  # raises on truncated data
            return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
