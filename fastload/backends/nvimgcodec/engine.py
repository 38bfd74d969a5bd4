"""nvImageCodec as a batch engine: one batched decode of the planned regions, then one resample
each, packed into an N x 3 x H x W uint8 batch on the target device.

On the CPU (``device="cpu"``, what CI runs) the regions are decoded by nvImageCodec's CPU
backend and resampled with the very code the CPU backends use (:func:`render_array`), so pixels
agree with them. On a CUDA device the regions are decoded by nvJPEG into device memory and
resampled there with torch, a whole batch at a time (:func:`render_batch`), on a side stream,
in a thread, while the previous batch is in use; the hand-off to the consumer's stream is an
event.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from fastload.backends.executor import (
    BatchExecutor,
    BatchFailed,
    Engine,
    ExecutorOptions,
    Folded,
    Translation,
)
from fastload.backends.nvimgcodec.decoder import (
    code_stream,
    codec,
    gpu_regions_exact,
    make_decoder,
    nvjpeg_version,
    params,
)
from fastload.backends.nvimgcodec.rendering import (
    Sample,
    plan_sample,
    render_array,
    render_batch,
    render_tensor,
)
from fastload.image import ImageInfo
from fastload.resampling import View

__all__ = [
    "NvImageCodecBatches",
    "NvImageCodecEngine",
    "Sample",
    "render_array",
    "render_batch",
    "render_tensor",
]


class NvImageCodecEngine(Engine):
    """Decodes each planned batch in one nvImageCodec call, then renders it (in a thread).

    Attributes:
        regions: Whether crops are decoded as regions: always on the CPU; on a GPU only with
            an nvJPEG that decodes them exactly (see
            :func:`~fastload.backends.nvimgcodec.decoder.gpu_regions_exact`), else whole
            images are decoded and cropped on the GPU.
    """

    def __init__(self, options: ExecutorOptions, translation: Translation, folded: Folded) -> None:
        self.options, self.translation = options, translation
        self.render = {
            "interpolation": translation.interpolation,
            "antialias": translation.antialias,
        }
        device = options.device
        self._cuda = device.type == "cuda"
        index = (
            (device.index if device.index is not None else torch.cuda.current_device())
            if self._cuda
            else None
        )
        self._decoder = make_decoder(index, options.num_threads)
        # on a GPU, crops are decoded as regions only where that is exact (see gpu_regions_exact)
        self.regions = not self._cuda or gpu_regions_exact(nvjpeg_version())
        self._checker: Any = None  # a CPU-only decoder for one file at a time
        self._params = params()
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        # one thread: batches are decoded in order, each while the previous one is in use
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastload-nvimgcodec")
        self._queue: list[Future[tuple[torch.Tensor, Any]]] = []

    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, list[Any]]:
        samples = [
            plan_sample(v, i, s, regions=self.regions)
            for v, i, s in zip(views, infos, sizes, strict=True)
        ]
        return {"encoded": data, "sample": samples}

    def fits(self, batch: int) -> bool:
        return True  # nvImageCodec takes batches of any size

    def feed(self, inputs: dict[str, list[Any]]) -> None:
        self._queue.append(self._thread.submit(self._decode, inputs["encoded"], inputs["sample"]))

    def collect(self) -> torch.Tensor:
        batch, done = self._queue.pop(0).result()  # raises BatchFailed for the batch
        if done is not None:  # CUDA: the consumer's stream waits for the side stream's work
            current = torch.cuda.current_stream(batch.device)
            current.wait_event(done)
            batch.record_stream(current)
        return batch

    def _decode(self, data: list[np.ndarray], samples: list[Sample]) -> tuple[torch.Tensor, Any]:
        streams = [code_stream(d, s.region) for d, s in zip(data, samples, strict=True)]
        if not self._cuda:
            images = self._decoder.decode(streams, params=self._params)
            _raise_for_missing(images)
            out: torch.Tensor | None = None
            for k, (image, sample) in enumerate(zip(images, samples, strict=True)):
                rendered = torch.from_numpy(render_array(np.asarray(image), sample, self.render))
                if out is None:  # one copy per sample, straight into the (pinned) batch
                    shape = (len(images), 3, *rendered.shape[:2])
                    out = torch.empty(shape, dtype=torch.uint8, pin_memory=self.options.pin_memory)
                out[k] = rendered.permute(2, 0, 1)
            assert out is not None
            return out, None
        assert self._stream is not None
        with torch.cuda.stream(self._stream):
            images = self._decoder.decode(
                streams, params=self._params, cuda_stream=self._stream.cuda_stream
            )
            _raise_for_missing(images)
            device = self.options.device
            tensors = [torch.as_tensor(image, device=device) for image in images]
            out = render_batch(tensors, samples, self.render)
            done = torch.cuda.Event()
            done.record(self._stream)
        # nvImageCodec owns the decoded images' memory and frees it with them: wait here, in
        # this thread (the consumer's stream does not wait), until the kernels reading it ran
        done.synchronize()
        del images
        return out, done

    def discard(self, *, grow_to: int = 0) -> None:
        for future in self._queue:
            future.cancel()
        for future in self._queue:
            if not future.cancelled():
                with contextlib.suppress(Exception):  # a failed batch, dropped anyway
                    future.result()
        self._queue.clear()

    def drain(self) -> None:
        self.discard()

    def decode_alone(self, data: np.ndarray) -> None:
        if self._checker is None:
            self._checker = make_decoder(None, 1)
        if self._checker.decode(code_stream(data, None), params=self._params) is None:
            raise ValueError("nvImageCodec could not decode it")

    def close(self) -> None:
        self.discard()
        self._thread.shutdown(wait=False)


def _raise_for_missing(images: list[Any]) -> None:
    missing = [k for k, image in enumerate(images) if image is None]
    if missing:
        raise BatchFailed(
            f"nvImageCodec could not decode {len(missing)} file(s) of the batch", positions=missing
        )


class NvImageCodecBatches(BatchExecutor):
    """Runs a fastload dataset through nvImageCodec; owned by one ``fastload.DataLoader``.

    Args:
        dataset: A ``fastload.ImageList`` or ``fastload.ImageFolder``.
        options: Device, threads and prefetch depth.
        batch_ops: The loader's ``batch_transforms``: leading horizontal flips fold into the
            render (drawn by the ops' own ``make_params``); the rest run on the delivered batch.
    """

    def __init__(self, dataset: Any, options: ExecutorOptions, *, batch_ops: Any = None) -> None:
        codec()  # raises with the install command when missing
        super().__init__(
            "nvimgcodec",
            dataset,
            options,
            lambda translation, folded: NvImageCodecEngine(options, translation, folded),
            batch_ops=batch_ops,
        )
