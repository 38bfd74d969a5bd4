"""The nvImageCodec backend: NVIDIA's codec library (the one DALI uses) executes the batch.

Reader threads read and check the files and plan each sample (fastload's shared executor
parts); the planned regions of a whole batch are decoded in one call (nvJPEG on a GPU, with the
hardware JPEG engine where there is one; libjpeg-turbo in CPU-only mode), a file it cannot
decode costs that sample alone, and each region is resampled to its output size and packed
into one uint8 N x 3 x H x W batch on the target device.

Rooms: :mod:`.decoder` (making decoders and code streams), :mod:`.engine` (the batch engine
and the renderers) and :mod:`.backend` (the registry entry).
"""

from fastload.backends.nvimgcodec.backend import NvImageCodecBackend
from fastload.backends.nvimgcodec.decoder import NVIMGCODEC
from fastload.backends.nvimgcodec.engine import (
    NvImageCodecBatches,
    NvImageCodecEngine,
    render_array,
    render_tensor,
)

__all__ = [
    "NVIMGCODEC",
    "NvImageCodecBackend",
    "NvImageCodecBatches",
    "NvImageCodecEngine",
    "render_array",
    "render_tensor",
]
