"""A batch's samples decoded straight into one batch tensor (:class:`StackedLoading`, which
:class:`~fastload.datasets.image_dataset.ImageDataset` is): the same samples, pixels and draws
as each loaded alone, in the memory the batch is handed on in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fastload import backends
from fastload.backends.headers import read_header
from fastload.backends.plans import JpegPlan, plan_jpeg
from fastload.gpu import functional as batch_ops
from fastload.memory import buffers, shared_buffers
from fastload.memory.stacked import Normalizing, StackedSamples
from fastload.pixels.image import ImageInfo
from fastload.sampling import SeededSamples, seeded, streams_kept
from fastload.transforms import TransformSplit
from fastload.transforms.crop_recipes import CropRecipe

__all__ = ["StackedLoading"]

_UNSET = object()  # a target not transformed yet


class StackedLoading:
    """The batch decode of an image dataset: :meth:`load_stacked`. What it asks of the dataset
    is declared below; :class:`~fastload.datasets.image_dataset.ImageDataset` defines it."""

    max_pixels: int
    exif_orientation: bool
    target_transform: Callable[[Any], Any] | None
    has_targets: bool
    _split: TransformSplit
    _crop_recipe: CropRecipe | None

    def _backend(self) -> backends.Backend:
        raise NotImplementedError

    def _stackable(self, keys: list[Any]) -> bool:
        raise NotImplementedError

    def _drawing_plan(self) -> Any:
        raise NotImplementedError

    def _load(self, index: int) -> Any:
        raise NotImplementedError

    def _finish(self, index: int, data: bytes, target: Any) -> Any:
        raise NotImplementedError

    def _load_image(self, index: int, data: bytes) -> Any:
        raise NotImplementedError

    def _with_target(self, image: Any, target: Any) -> Any:
        raise NotImplementedError

    def _transform_target(self, target: Any) -> Any:
        raise NotImplementedError

    def read_samples(self, indices: list[int]) -> list[tuple[bytes, Any] | None]:
        raise NotImplementedError

    def __getitems__(self, indices: list[int]) -> Any:
        raise NotImplementedError

    def load_stacked(self, keys: list[Any], *, normalizing: Normalizing | None = None) -> Any:
        """``__getitems__(keys)``, with the images decoded straight into one batch tensor
        where they can be: a :class:`~fastload.memory.stacked.StackedSamples`, which fastload's
        collate links take as the batch (thread workers ask for it, see
        ``fastload.loader.threads``, and worker processes through ``__getitems__``, see
        :func:`fastload.memory.stacked.welcome`). The same samples, pixels and draws as each loaded
        alone.

        With ``normalizing`` (the normalize the collate chain runs first), the batch is
        float32, each value written normalized by the decoder's resize as it makes it (no
        uint8 batch, no second pass), and says so (``StackedSamples.normalized``); the
        samples it falls back to a list for are the uint8 images as ever.

        It can be done where every key carries its seed (:class:`~fastload.sampling.SampleKey`),
        the transform is all fused with decoding, and the backend decodes many JPEGs at once
        (``Backend.decode_jpeg_resized_many``); else, and for the samples it cannot do that way
        (other formats, an EXIF orientation, a file that fails), each is loaded alone. Where
        one of those cannot join the batch (a skipped file, another size), the samples come
        back as a list.
        """
        if not self._stackable(keys):
            return self.__getitems__(keys)  # a subclass's own, or each sample alone
        return self._load_stacked(keys, normalizing)

    def _load_stacked(self, keys: list[Any], normalizing: Normalizing | None) -> Any:
        with streams_kept():
            reads = self.read_samples([int(k) for k in keys])
            out, drawn = self._decode_drawn(keys, reads, normalizing)
            plans, targets = self._plan_stacked(keys, reads, drawn)
            if out is None:
                first = next((p for p in plans if p is not None), None)
                if first is None:  # no JPEG to stack: each loaded alone, from the bytes read
                    return self._stacked(keys, reads, targets, None, set(), None)
                width, height = _shown_size(first[1])
                out = _batch_tensor(len(keys), height, width, normalizing)
            written = drawn | self._decode_into(out, reads, plans, normalizing)
            return self._stacked(keys, reads, targets, out, written, normalizing)

    def _decode_drawn(
        self,
        keys: list[Any],
        reads: list[tuple[bytes, Any] | None],
        normalizing: Normalizing | None,
    ) -> tuple[torch.Tensor | None, set[int]]:
        """The batch tensor and the slots the backend wrote, drawing and planning the crops
        itself (:mod:`fastload.transforms.crop_recipes`), where the transform is such a crop and the
        backend can; ``(None, set())`` elsewhere. The targets of the slots written must then
        be the labels as read: there is no ``target_transform``, whose draws would follow the
        crop's."""
        recipe = self._crop_recipe
        if recipe is None or self.target_transform is not None:
            return None, set()
        if torch.get_default_dtype() != torch.float32:  # torch's draws then differ
            return None, set()
        out = _batch_tensor(len(keys), recipe.height, recipe.width, normalizing)
        jobs = [
            (slot, read[0], key.seed)
            for slot, (key, read) in enumerate(zip(keys, reads, strict=True))
            if read is not None
        ]
        done = self._backend().decode_drawn_many(
            jobs,
            recipe,
            _written(out),
            max_pixels=self.max_pixels,
            exif_orientation=self.exif_orientation,
            normalizing=normalizing,
        )
        if done is None:  # the backend cannot: Python plans them all
            return None, set()
        return out, {slot for (slot, _, _), ok in zip(jobs, done, strict=True) if ok}

    def _plan_stacked(
        self, keys: list[Any], reads: list[tuple[bytes, Any] | None], drawn: set[int]
    ) -> tuple[list[tuple[ImageInfo, JpegPlan] | None], list[Any]]:
        """Each read JPEG's draws and plan, made under its seed, and its target, transformed
        there after the draws, as ``_load`` does (:data:`_UNSET` for the samples not planned,
        whose targets are transformed when they are loaded alone). The slots in ``drawn``
        were planned and decoded by the backend: their targets are the labels read."""
        plans: list[tuple[ImageInfo, JpegPlan] | None] = []
        targets: list[Any] = []
        for slot, (key, read) in enumerate(zip(keys, reads, strict=True)):
            planned, target = None, _UNSET
            if slot in drawn:
                target = read[1]  # type: ignore[index]
            elif read is not None:
                with seeded(key.seed):
                    planned = self._jpeg_plan(read[0])
                    if planned is not None:
                        target = self._transform_target(read[1])
            plans.append(planned)
            targets.append(target)
        return plans, targets

    def _decode_into(
        self,
        out: torch.Tensor,
        reads: list[tuple[bytes, Any] | None],
        plans: list[tuple[ImageInfo, JpegPlan] | None],
        normalizing: Normalizing | None,
    ) -> set[int]:
        """Decode the planned JPEGs into their slots of ``out`` (N x 3 x H x W, normalized
        as ``normalizing`` says where it is given): those the backend takes many at a time
        in one call, the others one by one. The slots written; the rest are for ``_load``
        (another size, or a file that fails, which it reports)."""
        backend, render = self._backend(), self._split.render or {}
        size = (out.shape[3], out.shape[2])
        jobs, alone = [], []
        for slot, (read, planned) in enumerate(zip(reads, plans, strict=True)):
            if read is None or planned is None or _shown_size(planned[1]) != size:
                continue
            jp = planned[1]
            if jp.region is not None and not jp.oriented_after:
                jobs.append((slot, read[0], jp))
            else:
                alone.append(slot)
        written: set[int] = set()
        if jobs:  # (each call lets go of the GIL: none when the backend drew them all)
            done = backend.decode_jpeg_resized_many(
                jobs, _written(out), max_pixels=self.max_pixels, normalizing=normalizing
            )
            assert done is not None  # the backend decodes many: _stackable asked
            written = {slot for (slot, _, _), ok in zip(jobs, done, strict=True) if ok}
        for slot in alone:
            data, (info, jp) = reads[slot][0], plans[slot]  # type: ignore[index,misc]
            try:
                pixels = backend.decode_jpeg_planned(
                    data, info, jp, render=render, max_pixels=self.max_pixels
                )
            except Exception:
                continue  # loaded alone, which reports it
            if pixels.shape == (size[1], size[0], 3):
                _put(out, slot, pixels.transpose(2, 0, 1), normalizing)
                written.add(slot)
        return written

    def _jpeg_plan(self, data: bytes) -> tuple[ImageInfo, JpegPlan] | None:
        """A JPEG's header and plan; ``None`` for any other file, or one whose header fails
        (loaded alone, where its errors are reported)."""
        try:
            info, jpeg = read_header(
                data, max_pixels=self.max_pixels, exif_orientation=self.exif_orientation
            )
        except ValueError:
            return None
        if not jpeg:
            return None
        return info, plan_jpeg(info, self._drawing_plan(), self._split.render or {})

    def _stacked(
        self,
        keys: list[Any],
        reads: list[tuple[bytes, Any] | None],
        targets: list[Any],
        out: torch.Tensor | None,
        written: set[int],
        normalizing: Normalizing | None,
    ) -> Any:
        """The batch: the samples not written into ``out`` loaded alone and copied into their
        slots (normalized as the rest); a list of samples where one of them cannot be (or
        there is no ``out``), whose images are the samples' own (uint8)."""
        samples: list[Any] = [None] * len(keys)
        stackable = out is not None
        for slot, (key, read) in enumerate(zip(keys, reads, strict=True)):
            if slot in written:
                continue
            index, target = int(key), targets[slot]
            with seeded(key.seed):
                if read is None:
                    sample = self._load(index)
                elif target is _UNSET:
                    sample = self._finish(index, *read)
                else:  # its target was transformed after its draws, made again here
                    sample = self._with_target(self._load_image(index, read[0]), target)
            samples[slot] = sample
            image = sample[0] if self.has_targets and isinstance(sample, tuple) else sample
            if (
                out is None
                or not isinstance(image, torch.Tensor)
                or image.shape != out.shape[1:]
                or image.dtype != torch.uint8
            ):
                stackable = False
                continue
            _put(out, slot, image.numpy(), normalizing)
            targets[slot] = sample[1] if self.has_targets else None
        seed = getattr(keys, "seed", None)
        if stackable and out is not None:
            kept = targets if self.has_targets else None
            return StackedSamples(out, kept, seed, normalized=normalizing)
        for slot in written:
            assert out is not None
            image = out[slot] if normalizing is None else _decoded(out[slot], normalizing)
            samples[slot] = (image, targets[slot]) if self.has_targets else image
        return samples if seed is None else SeededSamples(samples, seed)


def _batch_tensor(
    count: int, height: int, width: int, normalizing: Normalizing | None
) -> torch.Tensor:
    """An uninitialised uint8 batch (float32 where it is to be ``normalizing``'s, laid out as
    it says) in the memory it is handed on in: the calling thread's ring (a worker thread's,
    or the loader's own with no workers), or a worker process's shared memory (sent to the
    loader's process as it is), where there is one."""
    shape = (count, 3, height, width)
    if normalizing is not None:
        layout = buffers.channels_last() if normalizing.channels_last else contextlib.nullcontext()
        with layout:
            return batch_ops.float_batch(torch.Size(shape))
    ring = buffers.current()
    if ring is not None:
        return ring.take(shape, torch.uint8)
    kept = shared_buffers.take(torch.Size(shape), torch.uint8)
    return kept if kept is not None else torch.empty(shape, dtype=torch.uint8)


def _written(out: torch.Tensor) -> np.ndarray:
    """The memory a decoder writes the batch ``out`` through: N x 3 x H x W, or N x H x W x 3
    for a batch in channels-last memory."""
    return out.numpy() if out.is_contiguous() else out.permute(0, 2, 3, 1).numpy()


def _put(out: torch.Tensor, slot: int, image: np.ndarray, normalizing: Normalizing | None) -> None:
    """A sample's uint8 image (3 x H x W) into its slot of the batch, normalized as the
    decoder wrote the others where ``normalizing`` is given."""
    if normalizing is None:
        out.numpy()[slot] = image
        return
    planes = torch.from_numpy(np.require(image, requirements=["C", "W"]))[None]
    factors, shifts = normalizing.factors, normalizing.shifts
    batch_ops.normalize_planes(planes, factors, shifts, out=out[slot : slot + 1])


def _decoded(image: torch.Tensor, normalizing: Normalizing) -> torch.Tensor:
    """The uint8 image a slot was normalized from: ``v * factor + shift`` is one to one on
    0-255 (the factors are not zero), and undone in float64 its rounding errors are far under
    half a level, so the bytes come back exactly."""
    factors = torch.tensor(normalizing.factors, dtype=torch.float64).reshape(3, 1, 1)
    shifts = torch.tensor(normalizing.shifts, dtype=torch.float64).reshape(3, 1, 1)
    levels = ((image.double() - shifts) / factors).round_().clamp_(0, 255)
    return levels.to(torch.uint8).contiguous()


def _shown_size(plan: JpegPlan) -> tuple[int, int]:
    """The (width, height) ``plan`` decodes to, once oriented."""
    stored = plan.stored
    return (stored.height, stored.width) if stored.transpose else (stored.width, stored.height)
