"""nvImageCodec as a batch engine: one batched decode of the planned regions into slots of
one torch buffer, then the views rendered, packed into an N x 3 x H x W batch on the device.

On the CPU (``device="cpu"``, what CI runs) the regions are decoded by nvImageCodec's CPU
backend and resampled with the very code the CPU backends use (:func:`render_array`), so pixels
agree with them. On a CUDA device the hardware JPEG engine and nvJPEG's CUDA decoder share each
batch; the regions are resampled there with torch, a whole batch at a time
(:func:`render_batch`), and a folded ``Normalize`` runs on the result. Batches alternate
between two side streams, decoded in a thread while the previous batch is in use; the
hand-off to the consumer's stream is an event, and nothing in the thread waits for the GPU.
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
    into_slots,
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
from fastload.pixels.image import ImageInfo
from fastload.pixels.resampling import View

# The Normalize outputs the GPU renderer folds in (any the op gives).
NORMALIZE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

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
        self._streams = [torch.cuda.Stream(device) for _ in range(2)] if self._cuda else []
        self._turn = 0
        self.folded = folded
        # one thread: batches are decoded in order, each while the previous one is in use
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastload-nvimgcodec")
        self._queue: list[Future[tuple[torch.Tensor, Any]]] = []

    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, Any]:
        samples = [
            plan_sample(v, i, s, regions=self.regions)
            for v, i, s in zip(views, infos, sizes, strict=True)
        ]
        return {"encoded": data, "sample": samples}

    def fits(self, batch: int) -> bool:
        return True  # nvImageCodec takes batches of any size

    def feed(self, inputs: dict[str, Any]) -> None:
        self._queue.append(self._thread.submit(self._decode, inputs["encoded"], inputs["sample"]))

    def collect(self) -> torch.Tensor:
        batch, done = self._queue.pop(0).result()  # raises BatchFailed for the batch
        if done is not None:  # CUDA: the consumer's stream waits for the side stream's work
            current = torch.cuda.current_stream(batch.device)
            current.wait_event(done)
            batch.record_stream(current)
        return batch

    def _decode(self, data: list[np.ndarray], samples: list[Sample]) -> tuple[torch.Tensor, Any]:
        try:
            return self._decode_batch(data, samples)
        except torch.OutOfMemoryError as exc:
            raise RuntimeError(
                f"the nvimgcodec executor ran out of GPU memory decoding and resizing a batch of "
                f"{len(data)} images on {self.options.device}; give the loader a smaller "
                f"batch_size (or prefetch_factor, {self.options.prefetch} now)"
            ) from exc

    def _decode_batch(
        self, data: list[np.ndarray], samples: list[Sample]
    ) -> tuple[torch.Tensor, Any]:
        streams = [code_stream(d, s.region) for d, s in zip(data, samples, strict=True)]
        if not self._cuda:
            slots = _slots(streams, samples, torch.device("cpu"))
            images = into_slots(self._decoder, streams, [s.numpy() for s in slots])
            self._fill_missing(streams, slots, images)
            out: torch.Tensor | None = None
            for k, (slot, sample) in enumerate(zip(slots, samples, strict=True)):
                rendered = torch.from_numpy(render_array(slot.numpy(), sample, self.render))
                if out is None:  # one copy per sample, straight into the (pinned) batch
                    shape = (len(slots), 3, *rendered.shape[:2])
                    out = torch.empty(shape, dtype=torch.uint8, pin_memory=self.options.pin_memory)
                out[k] = rendered.permute(2, 0, 1)
            assert out is not None
            return out, None
        # batches alternate between two streams: one's decode overlaps the other's kernels
        stream = self._streams[self._turn % 2]
        self._turn += 1
        with torch.cuda.stream(stream):
            # the slots are torch's, allocated on this stream: freed when the batch is, with
            # no wait here (nvImageCodec's own images had to outlive the kernels reading them)
            slots = _slots(streams, samples, self.options.device)
            images = into_slots(self._decoder, streams, slots, cuda_stream=stream.cuda_stream)
            self._fill_missing(streams, slots, images, stream=stream)
            out = render_batch(slots, samples, self.render)
            if self.folded.normalize is not None:
                out = self.folded.normalize(out)
            done = torch.cuda.Event()
            done.record(stream)
        return out, done

    def _fill_missing(
        self,
        streams: list[Any],
        slots: list[torch.Tensor],
        images: list[Any],
        *,
        stream: Any = None,
    ) -> None:
        """Decode again, the way nvImageCodec allocates, what it left out of the slots (a
        decoder that cannot write into them: the CPU fallback for a file the GPU decoders
        refuse), and copy it in; raise for what still fails.

        Raises:
            BatchFailed: Files nvImageCodec cannot decode either way, by position.
        """
        missing = [k for k, image in enumerate(images) if image is None]
        if not missing:
            return
        again = self._decoder.decode(
            [streams[k] for k in missing],
            params=self._params,
            cuda_stream=0 if stream is None else stream.cuda_stream,
        )
        for k, image in zip(missing, again, strict=True):
            if image is not None:
                device = slots[k].device
                decoded = (
                    torch.from_numpy(np.asarray(image))
                    if device.type == "cpu"  # a host image: no CUDA (dlpack) involved
                    else torch.as_tensor(image, device=device)
                )
                if tuple(decoded.shape) == tuple(slots[k].shape):
                    slots[k].copy_(decoded)
                    images[k] = image
        if stream is not None:  # nvImageCodec frees its images with them: copies first
            stream.synchronize()
        _raise_for_missing(images)

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


def _slots(streams: list[Any], samples: list[Sample], device: torch.device) -> list[torch.Tensor]:
    """H x W x 3 uint8 views, one per sample, of one new buffer (one allocation a batch)."""
    shapes = []
    for stream, sample in zip(streams, samples, strict=True):
        if sample.region is None:
            shapes.append((stream.height, stream.width))
        else:
            x0, y0, x1, y1 = sample.region
            shapes.append((y1 - y0, x1 - x0))
    buffer = torch.empty(sum(h * w * 3 for h, w in shapes), dtype=torch.uint8, device=device)
    slots, start = [], 0
    for h, w in shapes:
        slots.append(torch.as_strided(buffer, (h, w, 3), (w * 3, 3, 1), start))
        start += h * w * 3
    return slots


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
            # on a GPU the renderer normalizes the batch it rounds; on the CPU the batch stage
            # does, as it would (the result is the same: the same op on the same uint8 batch)
            normalize_dtypes=NORMALIZE_DTYPES if options.device.type == "cuda" else (),
        )
