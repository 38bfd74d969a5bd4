"""The DALI backend: NVIDIA DALI executes the dataset's pipeline, a whole batch at a time.

Under ``fastload.DataLoader`` (``backend="dali"``, or a dataset made with ``backend="dali"``),
DALI replaces the worker processes. fastload keeps what decides the result, so that changing the
backend does not change it:

* the order: torch's own batch sampler (``shuffle``, ``drop_last``, ``sampler``,
  ``generator``, and ``DistributedSampler`` shards) picks the indices of each batch;
* the checks: every file's header is read first (format from the content, ``max_pixels``,
  truncated JPEGs), with the error policy of the other backends;
* the geometry: the ``fastload.transforms`` chain is planned per sample, with its own random
  draws (torchvision's), into a region of the image and an output size.

DALI then decodes only that region (``decoders.image_slice``: libjpeg-turbo on the CPU, nvJPEG
on a GPU with ``device="mixed"``), resizes it (``resize``, antialiased when shrinking), and
mirrors and lays it out channels-first (``crop_mirror_normalize``), on its own threads
(``num_threads``), while the previous batch is in use.

Per sample (``ds[i]`` on a dataset made with ``backend="dali"``) the backend decodes one file with
DALI's CPU decoder: a correct but slow path, for looking at samples.
"""

from __future__ import annotations

import math
import os
import re
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fastload._optional import require
from fastload.backends.base import Backend, ImageDecodeError, check_header, register
from fastload.image import ImageInfo
from fastload.transforms import CenterCrop, Compose, Transform, View

__all__ = ["DaliBackend", "DaliBatches", "DaliOptions", "Folded", "fold_batch_ops", "translate"]

# Every DALI pipeline fastload builds in this process. A process forked from here (a DataLoader
# worker) inherits them as plain memory, without the threads they wait on: if its garbage
# collector finalizes one (an object in a reference cycle), the destructor waits for those
# threads forever. The child keeps them alive instead; forked workers end with os._exit, so they
# are never destroyed there.
_PIPELINES: weakref.WeakSet[Any] = weakref.WeakSet()
_INHERITED: list[Any] = []


def _keep_inherited_pipelines() -> None:
    _INHERITED.extend(_PIPELINES)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keep_inherited_pipelines)

# DALI's interpolation types for fastload's (torchvision's) names
_INTERP = {"nearest": "INTERP_NN", "bilinear": "INTERP_LINEAR", "bicubic": "INTERP_CUBIC"}


def dali_error(exc: BaseException) -> str:
    """What a DALI exception says went wrong, without its traceback and C++ context."""
    text = str(exc)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip()
        and not line.strip().startswith(("Current pipeline", "C++ context", "Critical error"))
    ]
    return re.sub(r"\s+", " ", " ".join(lines[:2])) if lines else type(exc).__name__


# ---------------------------------------------------------------- per-sample decoding


@register
class DaliBackend(Backend):
    """Decodes one file at a time with DALI's CPU decoder (libjpeg-turbo inside DALI).

    This is the per-sample path (``ds[i]``, ``fastload scan --backend dali``); batches go
    through :class:`DaliBatches` when the dataset is read by ``fastload.DataLoader``.
    """

    name = "dali"

    def __init__(self) -> None:
        require("dali")  # raises with the install command when missing
        self._pipe: Any = None
        self._pid: int | None = None

    def _pipeline(self) -> Any:
        if self._pipe is None or self._pid != os.getpid():
            from nvidia.dali import fn, types
            from nvidia.dali.pipeline import Pipeline

            pipe = Pipeline(
                batch_size=1,
                num_threads=1,
                device_id=None,
                exec_dynamic=True,
                prefetch_queue_depth=1,
            )
            with pipe:
                data = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
                # stored orientation: the shared path applies EXIF, as for every backend
                image = fn.decoders.image(
                    data, device="cpu", output_type=types.RGB, adjust_orientation=False
                )
                pipe.set_outputs(image)
            pipe.build()
            _PIPELINES.add(pipe)
            self._pipe, self._pid = pipe, os.getpid()
        return self._pipe

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        pipe = self._pipeline()
        try:
            pipe.feed_input("encoded", [np.frombuffer(data, dtype=np.uint8)])
            pipe.schedule_run()
            (images,) = pipe.outputs()
            array = np.array(images.as_tensor())[0]
        except RuntimeError as exc:
            self._pipe = None  # start clean after a failure
            raise ValueError(f"DALI could not decode it: {dali_error(exc)}") from None
        if reduce > 1:
            # DALI has no DCT-domain scaling: average down to libjpeg's reduced size instead
            import cv2

            rows, cols = array.shape[:2]
            size = (math.ceil(cols / reduce), math.ceil(rows / reduce))
            array = cv2.resize(array, size, interpolation=cv2.INTER_AREA)
        return array


# ---------------------------------------------------------------- the batch pipeline


@dataclass(frozen=True)
class Translation:
    """What the DALI graph does per sample, read from a dataset's ``transform``.

    Attributes:
        plan: Turns the whole image's view into the wanted one (``None``: keep the image).
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        antialias: Filter when shrinking.
        may_pad: The plan can reach outside the image (a ``CenterCrop`` larger than it).
    """

    plan: Callable[[View], View] | None
    interpolation: str = "bilinear"
    antialias: bool = True
    may_pad: bool = False


def translate(transform: Any) -> Translation:
    """Read a dataset's ``transform`` as DALI operations, or say which op DALI cannot run.

    Args:
        transform: ``None``, a ``fastload.transforms`` op, or a ``fastload.transforms.Compose``
            of them.

    Returns:
        The translation.

    Raises:
        ValueError: ``transform`` holds an op the DALI backend cannot run (named in the
            message, with what to do instead).
    """
    if transform is None:
        return Translation(None)
    if isinstance(transform, Compose):
        if transform.rest:
            raise _untranslatable(transform.rest[0])
        ops: list[Transform] = transform.planned
        options = transform.render_options
        plan: Callable[[View], View] = transform.plan
    elif isinstance(transform, Transform):
        ops, options, plan = [transform], transform.render_options, transform.plan
    else:
        raise _untranslatable(transform)
    return Translation(
        plan,
        interpolation=options.get("interpolation", "bilinear"),
        antialias=options.get("antialias", True),
        may_pad=any(isinstance(op, CenterCrop) for op in ops),
    )


def _untranslatable(op: Any) -> ValueError:
    return ValueError(
        f"the dali backend cannot run {op!r}: it runs fastload.transforms ops "
        "(RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Compose of them); "
        "run batch ops as gpu_transforms=fastload.gpu..., or use a CPU backend for this transform"
    )


@dataclass(frozen=True)
class Folded:
    """The leading batch ops (``fastload.gpu``) that DALI's ``crop_mirror_normalize`` runs.

    Attributes:
        flips: ``fastload.gpu.RandomHorizontalFlip`` ops: each draws its per-sample flips from
            its own generator, as it would on the batch, and DALI mirrors those samples.
        normalize: A ``fastload.gpu.Normalize`` (float32 or float16 output), or ``None``.
    """

    flips: tuple[Any, ...] = ()
    normalize: Any = None


def fold_batch_ops(ops: Any) -> tuple[Folded, Any]:
    """Split batch ops into what DALI runs and what ``fastload.gpu`` runs after it.

    The leading horizontal flips and the first normalize (float32 or float16) of ``ops`` (one
    op, or a ``fastload.gpu.Compose``) fold into DALI's ``crop_mirror_normalize``; everything
    from the first other op on runs on the batch DALI delivers.

    Returns:
        What folds, and the remaining op (``None``, one op, or a ``Compose``).
    """
    from fastload.gpu import transforms as G

    if ops is None:
        return Folded(), None
    sequence = list(ops.transforms) if type(ops) is G.Compose else [ops]
    flips: list[Any] = []
    normalize = None
    taken = 0
    for op in sequence:
        if type(op) is G.RandomHorizontalFlip:
            flips.append(op)
        elif (
            type(op) is G.Normalize
            and normalize is None
            and op.dtype in (torch.float32, torch.float16)
        ):
            normalize = op
        else:
            break
        taken += 1
    rest = sequence[taken:]
    remainder = None if not rest else rest[0] if len(rest) == 1 else G.Compose(rest)
    return Folded(tuple(flips), normalize), remainder


@dataclass(frozen=True)
class DaliOptions:
    """How the DALI pipeline runs.

    Attributes:
        device: Where batches are delivered: ``cpu`` (DALI's CPU decoder, ``device_id=None``)
            or a CUDA device (nvJPEG through ``device="mixed"``).
        num_threads: DALI's CPU threads (``max(1, num_workers)``).
        prefetch: Batches decoded ahead of the one in use (``prefetch_factor``, default 2).
        batch_size: The largest batch expected (the loader's ``batch_size``); a larger one
            rebuilds the pipeline.
        pin_memory: Deliver CPU batches in pinned memory (torch's ``pin_memory``).
    """

    device: torch.device
    num_threads: int
    prefetch: int = 2
    batch_size: int = 1
    pin_memory: bool = False


def build_pipeline(
    options: DaliOptions, translation: Translation, max_batch: int, folded: Folded | None = None
) -> Any:
    """The DALI graph: region decode, resize, (pad,) mirror, (normalize,) channels-first."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    cuda = options.device.type == "cuda"
    pipe = Pipeline(
        batch_size=max_batch,
        num_threads=options.num_threads,
        device_id=_device_index(options.device) if cuda else None,
        prefetch_queue_depth=1,  # fastload schedules `prefetch` iterations ahead itself
        exec_dynamic=True,
    )

    def feed(name: str, dtype: Any, ndim: int) -> Any:
        return fn.external_source(name=name, dtype=dtype, ndim=ndim)

    with pipe:
        data = feed("encoded", types.UINT8, 1)
        anchor, shape = feed("anchor", types.INT32, 1), feed("shape", types.INT32, 1)
        images = fn.decoders.image_slice(
            data,
            anchor,
            shape,
            axis_names="WH",
            device="mixed" if cuda else "cpu",
            output_type=types.RGB,
        )
        images = fn.resize(
            images,
            size=feed("size", types.FLOAT, 1),
            roi_start=feed("roi_start", types.FLOAT, 1),
            roi_end=feed("roi_end", types.FLOAT, 1),
            roi_relative=False,
            antialias=translation.antialias,
            interp_type=getattr(types, _INTERP[translation.interpolation]),
        )
        if translation.may_pad:  # a crop larger than the image: zeros around it
            images = fn.slice(
                images,
                feed("pad_anchor", types.INT32, 1),
                feed("pad_shape", types.INT32, 1),
                axis_names="WH",
                out_of_bounds_policy="pad",
                fill_values=0,
            )
        normalize = folded.normalize if folded is not None else None
        if normalize is None:
            images = fn.crop_mirror_normalize(
                images,
                mirror=feed("mirror", types.INT32, 0),
                dtype=types.UINT8,
                output_layout="CHW",
            )
        else:  # fastload.gpu.Normalize's units are [0, 1]: DALI's are the pixels' 0-255
            images = fn.crop_mirror_normalize(
                images,
                mirror=feed("mirror", types.INT32, 0),
                mean=[255.0 * m for m in normalize.mean],
                std=[255.0 * s for s in normalize.std],
                dtype=types.FLOAT16 if normalize.dtype == torch.float16 else types.FLOAT,
                output_layout="CHW",
            )
        pipe.set_outputs(images)
    pipe.build()
    _PIPELINES.add(pipe)
    return pipe


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@dataclass
class _Read:
    """One batch's files, read and checked (in a reader thread)."""

    indices: list[int]
    paths: list[str]
    data: list[np.ndarray] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # shown (width, height)
    good: list[int] = field(default_factory=list)  # positions in indices that are readable
    bad: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)


@dataclass
class _Fed:
    """One batch handed to DALI: everything needed to feed it again after a failure.

    A batch whose files failed the checks under ``on_error="raise"`` is never fed: it carries
    the ``error`` to raise when its turn comes, so earlier batches are still delivered first.
    """

    paths: list[str]
    labels: Any
    inputs: dict[str, list[np.ndarray]]
    error: Exception | None = None


def _shown_size(data: bytes, info: ImageInfo) -> tuple[int, int]:
    """(width, height) as displayed; from the header, or from Pillow for other formats."""
    if info.shown_size is not None:
        return info.shown_size
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _read_batch(dataset: Any, indices: list[int]) -> _Read:
    read = _Read(indices, [dataset.path(i) for i in indices])
    for k, path in enumerate(read.paths):
        try:
            with open(path, "rb") as f:
                data = f.read()
            info = check_header(data, max_pixels=dataset.max_pixels)
            size = _shown_size(data, info)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
            read.bad.append((path, reason))
            continue
        read.data.append(np.frombuffer(data, dtype=np.uint8))
        read.sizes.append(size)
        read.good.append(k)
    return read


def sample_inputs(view: View, width: int, height: int) -> dict[str, np.ndarray]:
    """The per-sample DALI inputs that render ``view`` of a ``width`` x ``height`` image.

    The region is decoded on whole pixels around the view's box, clipped to the image; the
    resize then samples the box within it, and a box reaching outside the image gets the part
    inside resized into its place on a zero canvas (torchvision's padding).
    """
    x0, y0, x1, y1 = view.box
    out_w, out_h = view.width, view.height
    sx, sy = (x1 - x0) / out_w, (y1 - y0) / out_h
    # output pixels whose source lies inside the image (all of them, unless padding)
    c0 = max(0, math.ceil(-x0 / sx - 1e-9))
    c1 = min(out_w, math.floor((width - x0) / sx + 1e-9))
    r0 = max(0, math.ceil(-y0 / sy - 1e-9))
    r1 = min(out_h, math.floor((height - y0) / sy + 1e-9))
    if c1 <= c0 or r1 <= r0:  # nothing of the image is visible: one pixel, padded away
        c0, c1, r0, r1 = 0, 1, 0, 1
    bx0, bx1 = max(x0 + c0 * sx, 0.0), min(x0 + c1 * sx, float(width))
    by0, by1 = max(y0 + r0 * sy, 0.0), min(y0 + r1 * sy, float(height))
    ax, ay = min(math.floor(bx0), width - 1), min(math.floor(by0), height - 1)
    ex, ey = max(math.ceil(bx1), ax + 1), max(math.ceil(by1), ay + 1)
    return {
        "anchor": np.array([ax, ay], dtype=np.int32),
        "shape": np.array([ex - ax, ey - ay], dtype=np.int32),
        "size": np.array([r1 - r0, c1 - c0], dtype=np.float32),
        "roi_start": np.array([by0 - ay, bx0 - ax], dtype=np.float32),
        "roi_end": np.array([by1 - ay, bx1 - ax], dtype=np.float32),
        "pad_anchor": np.array([-c0, -r0], dtype=np.int32),
        "pad_shape": np.array([out_w, out_h], dtype=np.int32),
        "mirror": np.array(int(view.mirror), dtype=np.int32),
    }


class DaliBatches:
    """Runs a fastload dataset through a DALI pipeline; owned by one ``fastload.DataLoader``.

    The pipeline is built on first use and kept across epochs. Each ``epoch()`` iterates the
    loader's batch sampler once.

    Args:
        dataset: A ``fastload.ImageList`` or ``fastload.ImageFolder``.
        options: Device, threads and prefetch depth.
        batch_ops: The loader's ``gpu_transforms``: the leading ops DALI can run are folded
            into its graph (see :func:`fold_batch_ops`); the rest are left in
            :attr:`remaining_ops` for ``fastload.gpu`` to run on the delivered batch.
    """

    def __init__(self, dataset: Any, options: DaliOptions, *, batch_ops: Any = None) -> None:
        require("dali")
        if dataset._wants_pil:  # a torchvision transform or other callable
            raise _untranslatable(dataset.transform)
        self.dataset, self.options = dataset, options
        self.translation = translate(dataset.transform)
        self.folded, self.remaining_ops = fold_batch_ops(batch_ops)
        self._names = [
            "anchor",
            "shape",
            "size",
            "roi_start",
            "roi_end",
            *(("pad_anchor", "pad_shape") if self.translation.may_pad else ()),
            "mirror",
        ]
        self._pipe: Any = None
        self._max_batch = 0
        self._pending = 0  # iterations scheduled and not yet collected
        self._held: tuple[Any, Any] | None = None  # a DALI GPU output a copy still reads
        self._epoch_token: object | None = None

    # ------------------------------------------------------------ pipeline

    def fits(self, batch: int) -> bool:
        """Whether a batch of this size can go to the current pipeline (or a new one)."""
        return self._pipe is None or batch <= self._max_batch

    def _pipeline(self, batch: int) -> Any:
        if self._pipe is None:
            self._max_batch = max(batch, self._max_batch, self.options.batch_size)
            self._pipe = build_pipeline(
                self.options, self.translation, self._max_batch, self.folded
            )
        if batch > self._max_batch:
            raise AssertionError("a pipeline must be rebuilt before it takes a larger batch")
        return self._pipe

    def discard(self, *, grow_to: int = 0) -> None:
        """Drop the pipeline (rebuilt on next use): after a failure, or to take larger batches.

        Args:
            grow_to: The next pipeline takes batches of at least this size.
        """
        if self._held is not None:
            self._held[1].synchronize()
        self._pipe, self._pending, self._held = None, 0, None
        self._max_batch = max(self._max_batch, grow_to)

    def _drain(self) -> None:
        """Collect the outputs of an epoch that was left early, so the next starts clean."""
        while self._pending and self._pipe is not None:
            self._pending -= 1
            try:
                self._pipe.outputs()
            except Exception:
                self.discard()

    def _feed(self, fed: _Fed) -> None:
        pipe = self._pipeline(len(fed.paths))
        for name, values in fed.inputs.items():
            pipe.feed_input(name, values)
        pipe.schedule_run()
        self._pending += 1

    def _collect(self) -> torch.Tensor:
        """The oldest scheduled batch, as a torch tensor on the target device."""
        (images,) = self._pipe.outputs()
        self._pending -= 1
        if not images.is_dense_tensor():
            shapes = sorted({tuple(images[i].shape()) for i in range(len(images))})
            raise ValueError(
                f"images of different sizes {shapes[:3]} cannot form a batch: give the dataset "
                "a transform that makes one size, e.g. fastload.transforms.RandomResizedCrop(224)"
            )
        from nvidia.dali.plugin.pytorch import feed_ndarray, to_torch_type

        tensor = images.as_tensor()
        device = self.options.device
        pin = self.options.pin_memory and device.type == "cpu"
        dtype = to_torch_type[tensor.dtype]
        out = torch.empty(tensor.shape(), dtype=dtype, device=device, pin_memory=pin)
        if device.type != "cuda":
            feed_ndarray(tensor, out)  # a synchronous copy
            return out
        stream = torch.cuda.current_stream(device)
        feed_ndarray(tensor, out, cuda_stream=stream)  # queued on torch's stream
        # DALI may reuse its output's memory once the output is released: keep it until the
        # queued copy has run (checked at the next batch, by when it normally has).
        done = torch.cuda.Event()
        done.record(stream)
        if self._held is not None:
            self._held[1].synchronize()
        self._held = (images, done)
        return out

    # ------------------------------------------------------------ epochs

    def epoch(
        self,
        batches: Iterator[list[int]],
        *,
        seed: int,
        target_transform: Callable[[int], Any] | None = None,
    ) -> Iterator[tuple[torch.Tensor, Any]]:
        """Iterate one epoch: ``(images, labels)`` per batch of indices from ``batches``.

        Args:
            batches: Index lists, one per batch (the loader's batch sampler).
            seed: Seeds this epoch's per-sample random draws.
            target_transform: Called on each label (the dataset's).
        """
        return _Epoch(self, batches, seed, target_transform)


class _Epoch:
    def __init__(
        self,
        owner: DaliBatches,
        batches: Iterator[list[int]],
        seed: int,
        target_transform: Callable[[int], Any] | None,
    ) -> None:
        owner._drain()  # a previous epoch's unused batches
        self._token = object()
        owner._epoch_token = self._token
        self._owner, self._batches = owner, batches
        self._target_transform = target_transform
        generator = torch.Generator()
        generator.manual_seed(seed)
        self._rng = generator.get_state()
        self._reader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fastload-dali-read")
        self._reads: deque[Future[_Read]] = deque()
        self._fed: deque[_Fed] = deque()
        self._skipped = 0
        self._done = False

    def __iter__(self) -> _Epoch:
        return self

    def _read_ahead(self) -> None:
        want = self._owner.options.prefetch + 2
        while len(self._reads) < want:
            indices = next(self._batches, None)
            if indices is None:
                return
            indices = [int(i) for i in indices]
            self._reads.append(self._reader.submit(_read_batch, self._owner.dataset, indices))

    def _prepare(self, read: _Read) -> _Fed | None:
        dataset = self._owner.dataset
        for path, reason in read.bad:
            if dataset.on_error == "raise":
                error = ImageDecodeError(f"cannot read {path!r} with the dali backend: {reason}")
                return _Fed([], None, {}, error=error)
            dataset.bad_files[path] = reason
            self._skipped += 1
        if not read.good:
            return None
        plan = self._owner.translation.plan
        views = [View.full(w, h) for w, h in read.sizes]
        if plan is not None:
            # The ops draw from torch's global generator (torchvision's draws); this epoch's
            # own state stands in for it meanwhile, so the user's random stream is untouched.
            saved = torch.get_rng_state()
            torch.set_rng_state(self._rng)
            try:
                views = [plan(v) for v in views]
            finally:
                self._rng = torch.get_rng_state()
                torch.set_rng_state(saved)
        per_sample = [sample_inputs(v, w, h) for v, (w, h) in zip(views, read.sizes, strict=True)]
        for op in self._owner.folded.flips:  # the op's own draws, one per delivered sample
            for sample, flip in zip(per_sample, (op.rand(len(views)) < op.p).tolist(), strict=True):
                sample["mirror"] = np.array(int(sample["mirror"]) ^ int(flip), dtype=np.int32)
        inputs = {"encoded": read.data}
        for name in self._owner._names:
            inputs[name] = [s[name] for s in per_sample]
        labels = dataset._labels[[read.indices[k] for k in read.good]]
        return _Fed([read.paths[k] for k in read.good], labels, inputs)

    def _schedule(self) -> None:
        self._read_ahead()
        while len(self._fed) < self._owner.options.prefetch and self._reads:
            if self._fed and self._fed[-1].error is not None:
                return  # nothing is delivered past a batch that raises
            fed = self._prepare(self._reads.popleft().result())
            self._read_ahead()
            if fed is None:
                continue
            if fed.error is None and not self._owner.fits(len(fed.paths)):
                # a larger batch than the pipeline was built for (a custom batch_sampler): a
                # new pipeline takes the batches already queued again, in their order
                self._owner.discard(grow_to=len(fed.paths))
                self._feed_again()
            if fed.error is None:
                self._owner._feed(fed)
            self._fed.append(fed)

    def _feed_again(self) -> None:
        """Feed the queued batches to a new pipeline, in their order."""
        for queued in self._fed:
            if queued.error is None:
                self._owner._feed(queued)

    def __next__(self) -> tuple[torch.Tensor, Any]:
        if self._done:
            raise StopIteration
        if self._owner._epoch_token is not self._token:
            self._finish()
            raise RuntimeError(
                "this DALI loader iterator was replaced by a newer iter(loader); "
                "a loader with backend='dali' runs one epoch at a time"
            )
        try:
            while True:
                self._schedule()
                if not self._fed:
                    self._finish()
                    raise StopIteration
                if self._fed[0].error is not None:
                    raise self._fed[0].error
                try:
                    images = self._owner._collect()
                except RuntimeError as exc:  # DALI could not decode a file of this batch
                    self._drop_bad_files(exc)
                    continue
                return images, self._labels(self._fed.popleft())
        except BaseException:
            if not self._done:
                if self._owner._epoch_token is self._token and self._fed:
                    # fed batches are left inside DALI: the next epoch starts on a new pipeline
                    self._owner.discard()
                self._finish()
            raise

    def _labels(self, fed: _Fed) -> Any:
        labels: Any
        if self._target_transform is None:
            labels = torch.from_numpy(fed.labels)
        else:
            from torch.utils.data import default_collate

            labels = default_collate([self._target_transform(int(x)) for x in fed.labels])
        device = self._owner.options.device
        if device.type == "cuda" and isinstance(labels, torch.Tensor):
            labels = labels.to(device, non_blocking=True)
        return labels

    def _drop_bad_files(self, exc: RuntimeError) -> None:
        """DALI failed on the oldest batch: name the file; raise, or drop it and feed again.

        Each file of the batch is decoded alone with DALI's CPU decoder to find the one(s) that
        failed. With ``on_error="skip"`` they are recorded and the batch without them, and the
        batches queued behind it, are fed to a new pipeline.
        """
        owner, dataset = self._owner, self._owner.dataset
        owner.discard()  # the failure took the pipeline's queued work with it
        fed = self._fed[0]
        checker = DaliBackend()
        culprits: dict[int, str] = {}
        for k, data in enumerate(fed.inputs["encoded"]):
            try:
                checker.decode_jpeg(data.tobytes(), 1)
            except ValueError as bad:
                culprits[k] = str(bad)
        if not culprits:
            listed = ", ".join(repr(p) for p in fed.paths[:4])
            more = f" and {len(fed.paths) - 4} more" if len(fed.paths) > 4 else ""
            raise ImageDecodeError(
                f"DALI failed on a batch of {len(fed.paths)} files ({listed}{more}), though "
                f"each decodes alone on its CPU decoder: {dali_error(exc)}"
            ) from exc
        if dataset.on_error == "raise":
            k, reason = next(iter(culprits.items()))
            raise ImageDecodeError(f"cannot read {fed.paths[k]!r} with the dali backend: {reason}")
        for k, reason in culprits.items():
            dataset.bad_files[fed.paths[k]] = reason
            self._skipped += 1
        keep = [k for k in range(len(fed.paths)) if k not in culprits]
        self._fed.popleft()
        if keep:
            inputs = {name: [values[k] for k in keep] for name, values in fed.inputs.items()}
            self._fed.appendleft(_Fed([fed.paths[k] for k in keep], fed.labels[keep], inputs))
        self._feed_again()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        for future in self._reads:
            future.cancel()
        self._reader.shutdown(wait=False, cancel_futures=True)
        if self._skipped:
            warnings.warn(
                f"skipped {self._skipped} unreadable image(s) this epoch; "
                "see the dataset's bad_files for the paths and reasons",
                _warning(),
                stacklevel=3,
            )
            self._skipped = 0

    def __del__(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.shutdown(wait=False, cancel_futures=True)


def _warning() -> type[Warning]:
    from fastload.datasets import UnreadableImageWarning

    return UnreadableImageWarning
