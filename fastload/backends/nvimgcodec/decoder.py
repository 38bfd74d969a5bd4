"""nvImageCodec's decoders: CPU-only (tests, machines without a GPU) or on a CUDA device."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastload._optional import Requirement, require
from fastload.system import cpu_cores

__all__ = ["NVIMGCODEC", "make_decoder", "params"]

NVIMGCODEC = Requirement(
    "nvidia-nvimgcodec-cu12",
    "nvidia.nvimgcodec",
    'pip install "fastload[nvimgcodec]" (CUDA 12), or pip install '
    '"nvidia-nvimgcodec-cu13[nvjpeg]" (CUDA 13)',
)
# Either CUDA line provides the module; the first installed one gives the version.
DISTRIBUTIONS = ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12")


def make_decoder(device_index: int | None, threads: int) -> Any:
    """An nvImageCodec decoder: CPU-only when ``device_index`` is ``None``, else on that GPU
    (nvJPEG, the hardware JPEG engine where the GPU has one)."""
    codec = require(NVIMGCODEC, backend="nvimgcodec")
    # nvImageCodec keeps a core free for the caller, and says so on the terminal when asked for
    # more: ask for what it would use
    threads = max(1, min(threads, cpu_cores() - 1))
    if device_index is None:
        return codec.Decoder(
            device_id=codec.NVIMGCODEC_DEVICE_CPU_ONLY,
            max_num_cpu_threads=threads,
            backends=[codec.Backend(codec.BackendKind.CPU_ONLY)],
        )
    return codec.Decoder(device_id=device_index, max_num_cpu_threads=threads)


def params() -> Any:
    """Decode to 8-bit interleaved RGB in stored orientation (fastload orients the result)."""
    codec = require(NVIMGCODEC, backend="nvimgcodec")
    return codec.DecodeParams(
        apply_exif_orientation=False,
        color_spec=codec.ColorSpec.SRGB,
        allow_any_depth=False,
        sample_format=codec.SampleFormat.I_RGB,
    )


def code_stream(data: np.ndarray, region: tuple[int, int, int, int] | None) -> Any:
    """The file as an nvImageCodec code stream, limited to ``region`` (x0, y0, x1, y1)."""
    codec = require(NVIMGCODEC, backend="nvimgcodec")
    stream = codec.CodeStream(data)
    if region is None:
        return stream
    x0, y0, x1, y1 = region
    return stream.get_sub_code_stream(region=codec.Region(y0, x0, y1, x1))
