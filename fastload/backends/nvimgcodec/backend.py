"""The ``"nvimgcodec"`` registry entry: a batch executor, with a per-sample path beside it."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastload._optional import Availability, version_of
from fastload.backends.base import Backend
from fastload.backends.executor import ExecutorOptions
from fastload.backends.nvimgcodec.decoder import (
    DISTRIBUTIONS,
    EXACT_REGIONS_FROM,
    NVIMGCODEC,
    code_stream,
    codec,
    gpu_regions_exact,
    make_decoder,
    nvjpeg_version,
    params,
)
from fastload.backends.nvimgcodec.engine import NvImageCodecBatches
from fastload.backends.plans import reduce_by_area
from fastload.backends.registry import register

__all__ = ["NvImageCodecBackend"]


@register
class NvImageCodecBackend(Backend):
    """NVIDIA nvImageCodec: batched decoding of the planned regions, on a GPU or the CPU.

    Under ``fastload.DataLoader`` whole batches go through
    :class:`~fastload.backends.nvimgcodec.engine.NvImageCodecBatches`. Per sample (``ds[i]``,
    ``fastload scan``, worker processes) it decodes with nvImageCodec's CPU backend: no CUDA
    in worker processes. Never chosen by ``"auto"``.
    """

    name = "nvimgcodec"
    kind = "executor"
    requires = (NVIMGCODEC,)
    stored_pixels = True  # it decodes stored pixels, and fastload orients them

    @classmethod
    def check(cls) -> Availability:
        found = super().check()
        version = next((v for v in map(version_of, DISTRIBUTIONS) if v is not None), None)
        return Availability(cls.name, found.usable, version, found.reason, found.fix)

    @classmethod
    def details(cls) -> dict[str, Any]:
        """Whether nvImageCodec decodes JPEGs here with nvJPEG's CUDA decoder and with a
        hardware JPEG engine (A100, H100, H200), found by decoding a tiny JPEG with each; and
        which nvJPEG they use, which decides whether crops are decoded as regions on the GPU.

        nvImageCodec files nvJPEG's CUDA decoder under the ``HYBRID_CPU_GPU`` backend kind
        (it decodes the Huffman code on the CPU, or on the GPU for large images), and has no
        JPEG decoder of the ``GPU_ONLY`` kind: a decoder asked for ``GPU_ONLY`` alone fails on
        JPEGs with "Could not create decoder", whatever the install. So the CUDA decoder is
        probed as the hybrid kind.
        """
        found = {
            "cuda_decoder": _decodes_with("HYBRID_CPU_GPU"),
            "hardware_decoder": _decodes_with("HW_GPU_ONLY"),
        }
        version = nvjpeg_version()
        if version is None:
            found["nvjpeg"] = "not loaded"
        else:
            shown = ".".join(map(str, version))
            wanted = ".".join(map(str, EXACT_REGIONS_FROM))
            found["nvjpeg"] = (
                f"{shown}: crops decoded as regions on the GPU"
                if gpu_regions_exact(version)
                else f"{shown} (loaded first, by torchvision or another library): whole images "
                f"decoded on the GPU, then cropped; regions need nvJPEG >= {wanted}, imported "
                "before torchvision"
            )
        return found

    @classmethod
    def executor(
        cls, dataset: Any, options: ExecutorOptions, *, batch_ops: Any = None
    ) -> NvImageCodecBatches:
        return NvImageCodecBatches(dataset, options, batch_ops=batch_ops)

    def __init__(self) -> None:
        codec()  # raises with the install command when missing
        self._decoder = make_decoder(None, 1)
        self._params = params()

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        image = self._decoder.decode(
            code_stream(np.frombuffer(data, np.uint8), None), params=self._params
        )
        if image is None:
            raise ValueError("nvImageCodec could not decode it (corrupt or truncated)")
        array = np.asarray(image)
        return reduce_by_area(array, reduce)  # no DCT-domain scaling here


def _decodes_with(kind: str) -> str:
    """'yes', or why not, for one nvImageCodec backend kind on the current CUDA device."""
    import io

    import torch
    from PIL import Image

    if not torch.cuda.is_available():
        return "no (no CUDA device)"
    nv = codec()
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 100, 50)).save(buffer, "JPEG")
    try:
        decoder = nv.Decoder(
            device_id=torch.cuda.current_device(),
            backends=[nv.Backend(getattr(nv.BackendKind, kind))],
        )
        image = decoder.decode(nv.CodeStream(buffer.getvalue()), params=params())
    except Exception as exc:  # a decoder that cannot even start here
        return f"no ({type(exc).__name__}: {exc})"
    return "yes" if image is not None else "no (not on this GPU)"
