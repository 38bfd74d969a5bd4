"""nvImageCodec as a batch engine: one batched decode of the planned regions, then one resample
each, packed into an N x 3 x H x W uint8 batch on the target device.

On the CPU (``device="cpu"``, what CI runs) the regions are decoded by nvImageCodec's CPU
backend and resampled with the very code the CPU backends use (:func:`render_array`), so pixels
agree with them. On a CUDA device the regions are decoded by nvJPEG into device memory and
resampled there with torch (:func:`render_tensor`), on a side stream, in a thread, while the
previous batch is in use; the hand-off to the consumer's stream is an event.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fastload.backends.base import Stored, to_stored
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
from fastload.image import ImageInfo, orient
from fastload.resampling import View, resample, whole_pixels

__all__ = [
    "NvImageCodecBatches",
    "NvImageCodecEngine",
    "Sample",
    "render_array",
    "render_batch",
    "render_tensor",
]


@dataclass(frozen=True)
class Sample:
    """One sample's work: the region to decode and how to render the view from it.

    Attributes:
        stored: The view in the file's stored pixels, and how to orient the result.
        region: (x0, y0, x1, y1) of the stored image to decode, ``None`` for all of it.
    """

    stored: Stored
    region: tuple[int, int, int, int] | None


def plan_sample(
    view: View, info: ImageInfo, size: tuple[int, int], *, regions: bool = True
) -> Sample:
    """Where ``view`` (display coordinates) lies in the file, and the region worth decoding.

    Only a crop on whole pixels inside the image (RandomResizedCrop's) is decoded as a region,
    and only when ``regions`` is true: every other box is rendered from the whole image,
    exactly as the CPU backends render it.
    """
    shown_w, shown_h = size
    stored = to_stored(view, info.orientation, shown_w, shown_h)
    cols, rows = (shown_h, shown_w) if stored.transpose else (shown_w, shown_h)
    x0, y0, x1, y1 = stored.box
    whole = whole_pixels(*stored.box)
    inside = x0 >= 0 and y0 >= 0 and x1 <= cols and y1 <= rows
    jpeg = info.format == "jpeg" and info.components in (1, 3)
    everything = (round(x1 - x0), round(y1 - y0)) == (cols, rows)
    if not (regions and whole and inside and jpeg) or everything:
        return Sample(stored, None)
    return Sample(stored, (round(x0), round(y0), round(x1), round(y1)))


def _relative(sample: Sample) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = sample.stored.box
    ox, oy = (sample.region[0], sample.region[1]) if sample.region is not None else (0, 0)
    return (x0 - ox, y0 - oy, x1 - ox, y1 - oy)


def render_array(array: np.ndarray, sample: Sample, options: dict[str, Any]) -> np.ndarray:
    """The view from the decoded region (H x W x 3 uint8), as the CPU backends render it."""
    stored = sample.stored
    out = resample(array, _relative(sample), stored.width, stored.height, **options)
    return orient(out, stored.transpose, stored.mirror_lr, stored.mirror_tb)


def render_tensor(image: torch.Tensor, sample: Sample, options: dict[str, Any]) -> torch.Tensor:
    """The view from a decoded region held as an H x W x 3 uint8 tensor (any device), with
    torch's kernels: 3 x h x w uint8 on the same device.

    A box on whole pixels is sliced, then resized (antialiased when shrinking, as
    torchvision); a box outside the image is padded with zeros; any other box is sampled
    bilinearly (``grid_sample``), as the CPU path's affine warp does.
    """
    return _quantize(_render(image, sample, options)).contiguous()


def render_batch(
    images: list[torch.Tensor], samples: list[Sample], options: dict[str, Any]
) -> torch.Tensor:
    """The views from their decoded regions, as :func:`render_tensor` renders each, in one
    N x 3 x h x w uint8 batch: each view goes into a float batch as it comes, and the batch is
    rounded once (on a GPU that is three kernel launches a batch instead of three a sample)."""
    batch: torch.Tensor | None = None
    for k, (image, sample) in enumerate(zip(images, samples, strict=True)):
        out = _render(image, sample, options)
        if batch is None:
            batch = torch.empty((len(images), *out.shape), dtype=torch.float32, device=out.device)
        batch[k] = out
    if batch is None:
        raise ValueError("render_batch needs at least one image")
    return _quantize(batch)


def _quantize(out: torch.Tensor) -> torch.Tensor:
    return out if out.dtype == torch.uint8 else out.round_().clamp_(0, 255).to(torch.uint8)


def _render(image: torch.Tensor, sample: Sample, options: dict[str, Any]) -> torch.Tensor:
    """:func:`render_tensor` before rounding: 3 x h x w, uint8 or float (0-255, unrounded)."""
    stored = sample.stored
    width, height = stored.width, stored.height
    mode = options.get("interpolation", "bilinear")
    antialias = bool(options.get("antialias", True)) and mode != "nearest"
    x0, y0, x1, y1 = _relative(sample)
    rows, cols = image.shape[0], image.shape[1]
    chw = image.permute(2, 0, 1).unsqueeze(0)
    inside = x0 >= 0 and y0 >= 0 and x1 <= cols and y1 <= rows
    # the whole image at the size that makes this box whole pixels (Resize, then CenterCrop)
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    full_w, full_h, left, top = cols * fx, rows * fy, x0 * fx, y0 * fy
    if inside and whole_pixels(x0, y0, x1, y1):  # a crop, then a resize
        region = chw[:, :, round(y0) : round(y1), round(x0) : round(x1)]
        out = _resize(region, height, width, mode, antialias)
    elif inside and whole_pixels(full_w, full_h, left, top):  # a resize, then a crop
        full = _resize(chw, round(full_h), round(full_w), mode, antialias)
        out = full[:, :, round(top) : round(top) + height, round(left) : round(left) + width]
    else:
        out = _sample(chw, (x0, y0, x1, y1), height, width, mode)
    out = out[0]
    if stored.transpose:
        out = out.transpose(1, 2)
    if stored.mirror_lr:
        out = out.flip(2)
    if stored.mirror_tb:
        out = out.flip(1)
    return out


def _resize(
    region: torch.Tensor, height: int, width: int, mode: str, antialias: bool
) -> torch.Tensor:
    """``region`` resized: uint8 where torch resizes uint8 (the CPU), else float, unrounded."""
    if tuple(region.shape[-2:]) == (height, width):
        return region
    shrink = height < region.shape[-2] or width < region.shape[-1]
    source = region if region.device.type == "cpu" else region.float()
    kwargs = (
        {} if mode == "nearest" else {"align_corners": False, "antialias": antialias and shrink}
    )
    return F.interpolate(source, size=(height, width), mode=mode, **kwargs)


def _sample(
    chw: torch.Tensor, box: tuple[float, float, float, float], height: int, width: int, mode: str
) -> torch.Tensor:
    """Sample ``box`` at the centres of a ``width`` x ``height`` grid; zeros outside the image
    (float, unrounded)."""
    x0, y0, x1, y1 = box
    rows, cols = chw.shape[-2], chw.shape[-1]
    device = chw.device
    xs = x0 + (torch.arange(width, device=device, dtype=torch.float32) + 0.5) * (x1 - x0) / width
    ys = y0 + (torch.arange(height, device=device, dtype=torch.float32) + 0.5) * (y1 - y0) / height
    # grid_sample's normalised coordinates, align_corners=False: -1 and 1 are the outer edges
    gx, gy = xs / cols * 2 - 1, ys / rows * 2 - 1
    grid = torch.stack(torch.meshgrid(gy, gx, indexing="ij")[::-1], dim=-1).unsqueeze(0)
    inside = (xs >= 0) & (xs < cols)
    inside = inside[None, :] & ((ys >= 0) & (ys < rows))[:, None]
    # torchvision pads outside the image; inside, the edge pixels are replicated (as the warp)
    out = F.grid_sample(
        chw.float(),
        grid,
        mode="nearest" if mode == "nearest" else "bilinear",
        padding_mode="border",
        align_corners=False,
    )
    return out * inside


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
