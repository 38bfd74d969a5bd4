"""Feeding DALI planned batches and collecting its output as torch tensors."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from fastload._optional import require
from fastload.backends import executor
from fastload.backends.dali.decoder import DALI, SampleDecoder, dali_error
from fastload.backends.dali.graph import INPUTS, batch_inputs, build_pipeline, sample_inputs
from fastload.backends.executor import (
    BatchExecutor,
    BatchFailed,
    Engine,
    ExecutorOptions,
    Folded,
    Translation,
)
from fastload.pixels.image import ImageInfo
from fastload.pixels.resampling import View
from fastload.transforms import split_transform

__all__ = ["NORMALIZE_DTYPES", "DaliBatches", "DaliEngine", "fold_batch_ops", "translate"]

# The Normalize outputs DALI's crop_mirror_normalize produces.
NORMALIZE_DTYPES = (torch.float32, torch.float16)


def fold_batch_ops(ops: Any) -> tuple[Folded, Any]:
    """What of ``ops`` DALI runs (leading flips, a float32/float16 Normalize), and the rest."""
    return executor.fold_batch_ops(ops, normalize_dtypes=NORMALIZE_DTYPES)


def translate(transform: Any) -> Translation:
    """A dataset ``transform`` read as DALI's per-sample work (see
    :func:`fastload.backends.executor.translate`)."""
    return executor.translate(split_transform(transform), "dali")


class DaliEngine(Engine):
    """A DALI pipeline, built on first use and kept across epochs."""

    def __init__(self, options: ExecutorOptions, translation: Translation, folded: Folded) -> None:
        self.options, self.translation, self.folded = options, translation, folded
        self._names = [n for n in INPUTS if translation.may_pad or not n.startswith("pad_")]
        self._pipe: Any = None
        self._max_batch = 0
        self._fed: deque[dict[str, Any]] = deque()  # each uncollected iteration's inputs
        self._checker: SampleDecoder | None = None

    def inputs(
        self,
        data: list[np.ndarray],
        views: list[View],
        sizes: list[tuple[int, int]],
        infos: list[ImageInfo],
    ) -> dict[str, Any]:
        per_sample = [sample_inputs(v, w, h) for v, (w, h) in zip(views, sizes, strict=True)]
        return {"encoded": data, **batch_inputs(per_sample, self._names)}

    def fits(self, batch: int) -> bool:
        return self._pipe is None or batch <= self._max_batch

    def _pipeline(self, batch: int) -> Any:
        if self._pipe is None:
            self._max_batch = max(batch, self._max_batch, self.options.batch_size)
            self._pipe = build_pipeline(
                self.options, self.translation, self._max_batch, self.folded
            )
            # DALI reads the fed arrays in place (no_copy) until their iteration is collected,
            # so they belong to the pipeline: it stops its threads when it is finalised, before
            # its attributes are freed, whether it is discarded or goes with this engine
            self._fed = self._pipe.fastload_fed = deque()
        if batch > self._max_batch:
            raise AssertionError("a pipeline must be rebuilt before it takes a larger batch")
        return self._pipe

    def discard(self, *, grow_to: int = 0) -> None:
        self._pipe, self._fed = None, deque()  # iterations still running keep their inputs
        self._max_batch = max(self._max_batch, grow_to)

    def drain(self) -> None:
        while self._fed and self._pipe is not None:
            try:
                self._pipe.outputs()
            except Exception:
                self.discard()
            else:
                self._fed.popleft()

    def feed(self, inputs: dict[str, Any]) -> None:
        pipe = self._pipeline(len(inputs["encoded"]))
        for name, values in inputs.items():
            pipe.feed_input(name, values)
        self._fed.append(inputs)
        pipe.schedule_run()

    def collect(self) -> torch.Tensor:
        try:
            (images,) = self._pipe.outputs()
        except RuntimeError as exc:  # DALI could not decode a file of this batch
            raise BatchFailed(dali_error(exc)) from exc  # the executor discards the pipeline
        self._fed.popleft()
        if not images.is_dense_tensor():
            shapes = sorted({tuple(images[i].shape()) for i in range(len(images))})
            raise ValueError(
                f"images of different sizes {shapes[:3]} cannot form a batch: give the dataset "
                "a transform that makes one size, e.g. fastload.transforms.RandomResizedCrop(224)"
            )
        tensor = images.as_tensor()
        device = self.options.device
        if device.type == "cuda":
            # the dynamic executor hands the output over: DALI does not reuse its memory while
            # the tensor lives, and the DLPack exchange orders DALI's stream before torch's
            with torch.cuda.device(device):
                return torch.from_dlpack(tensor)
        if not self.options.pin_memory:
            return torch.from_dlpack(tensor)  # no copy (DALI's own PyTorch iterator does this)
        from nvidia.dali.plugin.pytorch import feed_ndarray, to_torch_type

        dtype = to_torch_type[tensor.dtype]
        out = torch.empty(tensor.shape(), dtype=dtype, pin_memory=True)
        feed_ndarray(tensor, out)  # DALI's output is pageable: a copy into page-locked memory
        return out

    def decode_alone(self, data: np.ndarray) -> None:
        if self._checker is None:
            self._checker = SampleDecoder()
        self._checker.decode(data)


class DaliBatches(BatchExecutor):
    """Runs a fastload dataset through a DALI pipeline; owned by one ``fastload.DataLoader``.

    Args:
        dataset: A ``fastload.ImageList`` or ``fastload.ImageFolder``.
        options: Device, threads and prefetch depth.
        batch_ops: The loader's ``batch_transforms``: leading horizontal flips and a float32 or
            float16 ``Normalize`` fold into DALI's ``crop_mirror_normalize``; the rest are left
            in :attr:`remaining_ops` for ``fastload.gpu`` to run on the delivered batch.
    """

    def __init__(self, dataset: Any, options: ExecutorOptions, *, batch_ops: Any = None) -> None:
        require(DALI, backend="dali")
        super().__init__(
            "dali",
            dataset,
            options,
            lambda translation, folded: DaliEngine(options, translation, folded),
            batch_ops=batch_ops,
            normalize_dtypes=NORMALIZE_DTYPES,
        )
