"""nvImageCodec's decoders: CPU-only (tests, machines without a GPU) or on a CUDA device."""

from __future__ import annotations

import ctypes
import functools
import os
from types import ModuleType
from typing import Any

import numpy as np

from fastload._optional import Requirement, require, version_of
from fastload.system import cpu_cores

__all__ = [
    "EXACT_REGIONS_FROM",
    "NVIMGCODEC",
    "code_stream",
    "codec",
    "gpu_regions_exact",
    "hardware_load",
    "into_slots",
    "make_decoder",
    "nvjpeg_version",
    "params",
]

NVIMGCODEC = Requirement(
    "nvidia-nvimgcodec-cu12",
    "nvidia.nvimgcodec",
    'pip install "fastload[nvimgcodec]" (CUDA 12), or pip install '
    '"nvidia-nvimgcodec-cu13[nvjpeg]" (CUDA 13)',
)
# Either CUDA line provides the module; the first installed one gives the version.
DISTRIBUTIONS = ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12")
# nvImageCodec 0.9 refuses region (ROI) decodes on the GPU with an older nvJPEG (its warning:
# "ROI decode with fancy upsampling may produce wrong results"), and forcing them on
# (enable_roi_fancy_upsampling=1) gave pixels up to 106 levels off, deep inside the region, on
# an H100 with nvJPEG 13.0; with 13.3 every region equalled the whole decode, cropped.
EXACT_REGIONS_FROM = (13, 2)
# nvImageCodec's own per-image warnings ("something went wrong decoding image #n") repeat for
# every file a GPU decoder hands on to another, thousands of lines an epoch; fastload names
# the files it cannot decode itself. Errors still print; PYNVIMGCODEC_VERBOSITY set by the
# user wins.
QUIET = "1"
# The share of each batch handed to the GPU's hardware JPEG engine; the CUDA decoder takes the
# rest at the same time (DALI's hw_decoder_load: on an A100, 0.75 decoded ~7,000 images/s
# against ~5,000 with everything on the engine). nvImageCodec adapts the share while running
# (ADAPTIVE_MINIMIZE_IDLE_TIME); FASTLOAD_HW_DECODER_LOAD sets its start, and 1 or 0 fixes it.
HW_LOAD_VARIABLE = "FASTLOAD_HW_DECODER_LOAD"
DEFAULT_HW_LOAD = 0.75


def codec() -> ModuleType:
    """The ``nvidia.nvimgcodec`` module, imported with its logging at errors only (unless the
    user set ``PYNVIMGCODEC_VERBOSITY``); raises with the install command when missing."""
    os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", QUIET)
    return require(NVIMGCODEC, backend="nvimgcodec")


def nvjpeg_version(*, soname: str | None = None) -> tuple[int, int, int] | None:
    """The version of the nvJPEG that nvImageCodec's GPU decoders use in this process, or
    ``None`` when none is loaded.

    nvImageCodec opens nvJPEG by its library name, and the dynamic loader hands it the first
    library of that name already in the process: torchvision's own copy when torchvision was
    imported first (CUDA 13 builds ship nvJPEG 13.0), not the ``nvidia-nvjpeg`` wheel's. So
    this asks the loader the same question, without loading anything (``RTLD_NOLOAD``).

    Args:
        soname: The library name to ask for; by default the one the installed nvImageCodec
            (CUDA 13 or CUDA 12 build) opens.
    """
    if soname is None:
        soname = f"libnvjpeg.so.{13 if version_of(DISTRIBUTIONS[0]) is not None else 12}"
    no_load = getattr(os, "RTLD_NOLOAD", None)
    if no_load is None:  # not a POSIX loader (nvImageCodec's wheels are Linux-only anyway)
        return None
    try:
        library = ctypes.CDLL(soname, mode=no_load | os.RTLD_NOW)
        get_property = library.nvjpegGetProperty
    except (OSError, AttributeError):  # not loaded (CPU decoders only), or not nvJPEG
        return None
    parts = []
    for prop in range(3):  # libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        if get_property(prop, ctypes.byref(value)) != 0:
            return None
        parts.append(value.value)
    return (parts[0], parts[1], parts[2])


def gpu_regions_exact(version: tuple[int, int, int] | None) -> bool:
    """Whether regions decoded by nvImageCodec's GPU decoders equal the whole image decoded
    and cropped, given the nvJPEG in use (``None``: no nvJPEG, the CPU decoders are exact)."""
    return version is None or version[:2] >= EXACT_REGIONS_FROM


def hardware_load() -> float:
    """The share of a batch first given to the hardware JPEG engine (0-1; see
    ``FASTLOAD_HW_DECODER_LOAD``).

    Raises:
        ValueError: The variable is set to something else than a number from 0 to 1.
    """
    text = os.environ.get(HW_LOAD_VARIABLE, "").strip()
    if not text:
        return DEFAULT_HW_LOAD
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{HW_LOAD_VARIABLE}={text!r}: give a number from 0 to 1, e.g. 0.75")
    return value


def make_decoder(device_index: int | None, threads: int) -> Any:
    """An nvImageCodec decoder: CPU-only when ``device_index`` is ``None``, else on that GPU.

    On a GPU the hardware JPEG engine (where the GPU has one) and nvJPEG's CUDA decoder share
    each batch (:func:`hardware_load`); what neither takes (a format or a JPEG the GPU
    decoders refuse) falls to the CPU.
    """
    nv = codec()
    # nvImageCodec keeps a core free for the caller, and says so on the terminal when asked for
    # more: ask for what it would use
    threads = max(1, min(threads, cpu_cores() - 1))
    if device_index is None:
        return nv.Decoder(
            device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY,
            max_num_cpu_threads=threads,
            backends=[nv.Backend(nv.BackendKind.CPU_ONLY)],
        )
    load = hardware_load()
    policy = (
        nv.LoadHintPolicy.FIXED
        if load in (0.0, 1.0)
        else nv.LoadHintPolicy.ADAPTIVE_MINIMIZE_IDLE_TIME
    )
    # nvJPEG's CUDA decoder is nvImageCodec's HYBRID_CPU_GPU kind; GPU_ONLY holds the GPU
    # decoders of other formats (JPEG 2000, TIFF), so a JPEG the engine leaves passes it by
    backends = [
        nv.Backend(nv.BackendKind.HW_GPU_ONLY, load_hint=load, load_hint_policy=policy),
        nv.Backend(nv.BackendKind.GPU_ONLY),
        nv.Backend(nv.BackendKind.HYBRID_CPU_GPU),
        nv.Backend(nv.BackendKind.CPU_ONLY),
    ]
    if load == 0.0:
        backends = backends[1:]
    return nv.Decoder(device_id=device_index, max_num_cpu_threads=threads, backends=backends)


def into_slots(decoder: Any, streams: list[Any], slots: list[Any], *, cuda_stream: int = 0) -> Any:
    """Decode ``streams`` into ``slots`` (H x W x 3 uint8 arrays or tensors, of the decoded
    sizes, rows possibly padded): one batched call, no image allocated by nvImageCodec.

    Returns:
        nvImageCodec's list: ``None`` where a file could not be decoded.
    """
    nv = codec()
    images = [nv.as_image(slot, cuda_stream) for slot in slots]
    return decoder.decode(streams, images=images, params=params(), cuda_stream=cuda_stream)


@functools.cache
def params() -> Any:
    """Decode to 8-bit interleaved RGB in stored orientation (fastload orients the result)."""
    nv = codec()
    return nv.DecodeParams(
        apply_exif_orientation=False,
        color_spec=nv.ColorSpec.SRGB,
        allow_any_depth=False,
        sample_format=nv.SampleFormat.I_RGB,
    )


def code_stream(data: np.ndarray, region: tuple[int, int, int, int] | None) -> Any:
    """The file as an nvImageCodec code stream, limited to ``region`` (x0, y0, x1, y1)."""
    nv = codec()
    stream = nv.CodeStream(data)
    if region is None:
        return stream
    x0, y0, x1, y1 = region
    return stream.get_sub_code_stream(region=nv.Region(y0, x0, y1, x1))
