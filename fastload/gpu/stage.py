"""The batch stage of ``fastload.DataLoader``: batch ops applied to whole loader batches.

With a CUDA device it runs on the prefetcher's side stream right after the copy, so it overlaps
the training step; otherwise it runs inside the worker processes, after collating, in parallel.

Under ``seeding="sample"`` each batch of a fastload dataset carries a seed of its own
(``fastload.sampling.batch_seed``): the ops draw from it (:func:`ops_seeded`), so their draws
depend on the batch's place in the epoch, not on the worker or process that runs them.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

from fastload.gpu.deferred import DeferredBatch, applying, split_drawn
from fastload.gpu.functional import normalizing_of
from fastload.gpu.lists import apply_to_images, is_image_list
from fastload.gpu.transforms import BatchTransform, Compose, Normalize, transforms_in
from fastload.memory import buffers, shared_buffers
from fastload.memory.stacked import Normalizing, StackedSamples, takes_stacked
from fastload.memory.tensors import (
    collated_around,
    images_key,
    labels_key,
    map_tensors,
    pin_batch,
    stackable_firsts,
)
from fastload.sampling import drawing, sample_seed, seeded

__all__ = ["BatchStage", "CollateThenStage", "DeviceStage", "SeedTag", "ops_seeded"]


@contextlib.contextmanager
def ops_seeded(ops: Iterable[Any], seed: int | None) -> Iterator[None]:
    """Run the block with the ops' draws coming from ``seed``; put every stream back after.

    torch's CPU generator is seeded with ``seed`` (ops without a ``generator`` draw from it);
    each op's own ``generator`` is seeded from ``seed`` and its place among the ops. ``None``
    runs the block as it is.
    """
    if seed is None:
        yield
        return
    own: dict[int, torch.Generator] = {}
    for op in ops:
        generator = getattr(op, "generator", None)
        if isinstance(generator, torch.Generator):
            own.setdefault(id(generator), generator)
    saved = [(g, g.get_state()) for g in own.values()]
    for k, generator in enumerate(own.values()):
        generator.manual_seed(sample_seed(seed, k))
    try:
        with seeded(seed):
            yield
    finally:
        for generator, state in saved:
            generator.set_state(state)


class BatchStage:
    """Applies batch ops to a batch that is an image tensor, a sequence (images, labels, ...)
    or a dict holding a 4-D image tensor
    (:func:`~fastload.memory.tensors.images_key`).

    Args:
        transforms: Called as ``transforms(images, labels)`` when the batch has labels, else
            ``transforms(images)``; ``None`` applies nothing.
        channels_last: Return the images in channels-last memory format.
        then: The rest of the user's collate function after torch's default collate (what
            :func:`fastload.callables.wrappers.collated_then` found), called on the ops' result
            unpacked (``then(images, labels, ...)``); its result is the batch. ``None``: the
            ops' result is.
        images_at: The batches are dicts (a collate function of one's own made them) whose
            images are at this key; the ops get those images alone, and the batch is a copy
            of the dict with the ops' result in their place.
    """

    def __init__(
        self,
        transforms: Callable[..., Any] | None,
        *,
        channels_last: bool,
        then: Callable[..., Any] | None = None,
        images_at: str | None = None,
    ) -> None:
        if transforms is not None and not callable(transforms):
            raise ValueError(f"batch_transforms={transforms!r} is not callable")
        self.transforms, self.channels_last, self.then = transforms, channels_last, then
        self.images_at = images_at

    def split_normalize(self) -> tuple[Normalizing, BatchStage] | None:
        """The ops' leading float32 :class:`Normalize`, as the normalizing a fastload dataset
        writes as it decodes a stacked batch (:meth:`fastload.ImageDataset.load_stacked`), and
        the stage left to run on such a batch; ``None`` where the ops start with anything else.
        A :class:`Compose` is looked into."""
        split = _leading_normalize(self.transforms)
        if split is None:
            return None
        op, rest = split
        normalizing = normalizing_of(op.mean, op.std, channels_last=self.channels_last)
        stage = BatchStage(
            rest, channels_last=self.channels_last, then=self.then, images_at=self.images_at
        )
        return normalizing, stage

    def __call__(
        self,
        batch: Any,
        *,
        seed: int | None = None,
        draws: list[Any] | None = None,
        batch_draw: Any = None,
    ) -> Any:
        """Apply the ops (their draws from ``seed``, when given: :func:`ops_seeded`; the
        per-sample ``draws`` and the ``batch_draw`` for the deferred ops:
        :mod:`fastload.gpu.deferred`)."""
        with applying(draws, batch_draw):
            if seed is not None and (self.transforms is not None or self.then is not None):
                ops = [*transforms_in(self.transforms)] if self.transforms is not None else []
                ops.append(self.then)
                if drawing.in_worker_thread() and not any(map(_draws, ops)):
                    return self._apply(batch)  # nothing drawn: in parallel with other threads
                with drawing.guard(), ops_seeded(ops, seed), drawing.drawing():
                    return self._apply(batch)
            return self._apply(batch)

    def draw(self, samples: Any) -> Any:
        """The batch's own draw (a :class:`DeferredBatch` ``then``), made where the samples
        are collated, after their own draws as torch's collate comes after them; under the
        batch's seed when the samples carry one."""
        if not isinstance(self.then, DeferredBatch):
            return None
        seed = getattr(samples, "seed", None)
        if seed is None:
            return self.then.draw(samples)
        with drawing.guard(), seeded(seed), drawing.drawing():
            return self.then.draw(samples)

    def _apply(self, batch: Any) -> Any:
        if self.images_at is not None:
            return self._apply_at(batch, self.images_at)
        if self.channels_last:  # the ops that make a new batch make it in that layout
            with buffers.channels_last():
                out = self._transform(batch)
        else:
            out = self._transform(batch)
        if self.then is not None:
            out = self.then(*out) if isinstance(out, (list, tuple)) else self.then(out)
        if not self.channels_last:
            return out
        if isinstance(out, torch.Tensor):
            return _channels_last(out)
        if isinstance(out, MutableMapping):
            key = images_key(out)
            return out if key is None else _replaced(out, {key: _channels_last(out[key])})
        if not isinstance(out, (list, tuple)) or not out:  # what a collate of one's own made
            return out
        items = (_channels_last(out[0]), *out[1:])
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)

    def _apply_at(self, batch: Any, key: str) -> Any:
        if not isinstance(batch, MutableMapping) or not isinstance(batch.get(key), torch.Tensor):
            raise TypeError(
                f"the batch ops run on the images your collate_fn stacks at {key!r}; its batch "
                f"was {type(batch).__name__} with no tensor there"
            )
        stage = BatchStage(self.transforms, channels_last=self.channels_last)
        return _replaced(batch, {key: stage._apply(batch[key])})

    def _transform(self, batch: Any) -> Any:
        if isinstance(batch, torch.Tensor):
            images, labels, rest, kind = batch, None, (), None
        elif isinstance(batch, (list, tuple)) and batch and is_image_list(batch[0]):
            # images of different sizes (detection's collate): the targets are left as they are
            if self.transforms is None:
                return batch
            items = (apply_to_images(self.transforms, batch[0]), *batch[1:])
            return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
        elif isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
            images = batch[0]
            has_labels = len(batch) > 1 and isinstance(batch[1], torch.Tensor)
            labels = batch[1] if has_labels else None
            rest, kind = tuple(batch[2 if has_labels else 1 :]), type(batch)
        elif isinstance(batch, MutableMapping) and (
            self.transforms is None or images_key(batch) is not None
        ):
            # channels_last alone: a dict with no 4-D tensor has nothing to lay out
            return self._transform_dict(batch)
        else:
            raise TypeError(
                "batch_transforms and channels_last need batches that are an image tensor, a "
                "sequence (images, labels, ...) whose images are a tensor or a list of them, or "
                f"a dict holding a 4-D image tensor; got {_described(batch)}"
            )
        if self.transforms is not None:
            if labels is None:
                images = self.transforms(images)
            else:
                images, labels = self.transforms(images, labels)
        if kind is None:
            return images
        items = (images, labels, *rest) if labels is not None else (images, *rest)
        if hasattr(batch, "_fields"):  # namedtuple
            return kind(*items)
        return kind(items)

    def _transform_dict(self, batch: MutableMapping[Any, Any]) -> Any:
        """A dict batch (torch's default collate of dict samples, as Hugging Face pipelines
        make them): the ops run on its images (:func:`~fastload.memory.tensors.images_key`) and,
        where it has them, its labels, as on an ``(images, labels)`` tuple; the other keys are
        left as they are."""
        if self.transforms is None:
            return batch
        key, labels_at = images_key(batch), labels_key(batch)
        if labels_at is None:
            return _replaced(batch, {key: self.transforms(batch[key])})
        images, labels = self.transforms(batch[key], batch[labels_at])
        return _replaced(batch, {key: images, labels_at: labels})


def _replaced(batch: MutableMapping[Any, Any], changes: dict[Any, Any]) -> Any:
    """A copy of a dict batch with ``changes`` in it, of the batch's own type (an
    ``OrderedDict``, transformers' ``BatchFeature``), as torch's collate made it."""
    out = copy.copy(batch)
    out.update(changes)
    return out


def _described(batch: Any) -> str:
    if not isinstance(batch, MutableMapping):
        return type(batch).__name__
    fields = ", ".join(
        f"{k!r}: {tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}"
        for k, v in batch.items()
    )
    return f"a {type(batch).__name__} with no 4-D tensor ({fields})"


def _draws(op: Any) -> bool:
    """Whether a batch op may draw: any but a fastload op that has no parameters to draw."""
    if op is None:
        return False
    return not (
        isinstance(op, BatchTransform) and type(op).make_params is BatchTransform.make_params
    )


def _channels_last(images: Any) -> Any:
    if isinstance(images, torch.Tensor) and images.ndim == 4:
        return images.contiguous(memory_format=torch.channels_last)
    return images


class CollateThenStage:
    """A collate function followed by the batch stage, for the worker processes.

    A batch whose samples carry a seed (``fastload.sampling.SeededSamples``) is run under it.
    Otherwise (``seeding="worker"``, or a dataset that does not take seeds): a worker forked
    from the main process holds a copy of every explicit ``generator`` of the ops, and left
    alone all workers would draw the same parameters; so on its first batch each worker
    reseeds them from its own torch seed (distinct per worker, and derived from the loader's
    ``generator`` when one is given).
    """

    def __init__(self, collate_fn: Callable[[Any], Any], stage: BatchStage) -> None:
        self.collate_fn, self.stage = collate_fn, stage
        self._seeded_pid: int | None = None
        self._images = _KeptImages() if collate_fn is default_collate else None
        # the stage's leading normalize, which a fastload dataset may write as it decodes a
        # stacked batch, and the stage left to run on such a batch
        self.normalizes_stacked: Normalizing | None = None
        self._after_normalize = stage
        split = stage.split_normalize() if collate_fn is default_collate else None
        if split is not None:
            self.normalizes_stacked, self._after_normalize = split

    @property
    def takes_stacked(self) -> bool:
        return self.collate_fn is default_collate or takes_stacked(self.collate_fn)

    def __call__(self, samples: Any) -> Any:
        samples, draws = split_drawn(samples)
        batch_draw = self.stage.draw(samples)  # after the samples' draws, as torch's collate
        seed = getattr(samples, "seed", None)
        info = get_worker_info()
        if seed is None and info is not None and self._seeded_pid != os.getpid():
            for k, op in enumerate(transforms_in(self.stage.transforms)):
                generator = getattr(op, "generator", None)
                if isinstance(generator, torch.Generator):
                    generator.manual_seed((info.seed + 7919 * k) % 2**63)
            self._seeded_pid = os.getpid()
        stage = self.stage
        if isinstance(samples, StackedSamples) and self.collate_fn is default_collate:
            kept, batch = None, samples.collated()  # stacked in a batch of its own already
            if samples.normalized is not None:  # the leading normalize written as decoded
                if samples.normalized != self.normalizes_stacked:
                    raise ValueError(
                        f"a batch normalized by {samples.normalized} came to a collate whose "
                        f"stage normalizes by {self.normalizes_stacked}"
                    )
                stage = self._after_normalize
        else:
            kept = self._images.collate(samples) if self._images is not None else None
            batch = kept if kept is not None else self.collate_fn(samples)
        out = stage(batch, seed=seed, draws=draws, batch_draw=batch_draw)
        if kept is not None:
            self._images.handed_out(out)  # type: ignore[union-attr]
        shared_buffers.settle(out)  # the kept memory of what the ops made and then replaced
        return out


def _leading_normalize(transforms: Any) -> tuple[Normalize, Any] | None:
    """The batch ops' first op, where it is a :class:`Normalize` to float32, and the ops after
    it (``None`` for none); ``None`` where the first op is anything else. A :class:`Compose` is
    looked into, and rebuilt without it."""
    if type(transforms) is Normalize:
        return (transforms, None) if transforms.dtype == torch.float32 else None
    if type(transforms) is not Compose or not transforms.transforms:
        return None
    first, *others = transforms.transforms
    split = _leading_normalize(first)
    if split is None:
        return None
    op, rest = split
    after = ([rest] if rest is not None else []) + others
    return op, Compose(after) if after else None


class _KeptImages:
    """torch's ``default_collate`` for a batch the stage consumes where it is collated: the
    images are stacked into one buffer kept from batch to batch.

    In a worker, ``default_collate`` stacks into new shared memory, for sending; the stage's
    input is never sent, and faulting in fresh shared pages for it cost more than the stack
    (about 0.2 ms an image at 224 x 224). The buffer is given up when the stage hands it out
    (ops that return their input).
    """

    def __init__(self) -> None:
        self._buffers: dict[int, torch.Tensor] = {}  # one per thread that collates

    def __getstate__(self) -> dict[str, Any]:
        return {"_buffers": {}}  # a worker process makes its own

    def collate(self, samples: Any) -> list[Any] | None:
        """``[images, *rest]`` as ``default_collate`` gives it for ``(image, ...)`` tuples of
        tensors of one shape; ``None`` for anything else."""
        images = stackable_firsts(samples)
        if images is None:
            return None
        size = (len(images), *images[0].shape)
        dtype = images[0].dtype
        buffer = self._buffers.get(threading.get_ident())
        if buffer is None or buffer.shape != size or buffer.dtype != dtype:
            buffer = self._buffers[threading.get_ident()] = torch.empty(size, dtype=dtype)
        torch.stack(images, out=buffer)
        return collated_around({0: buffer}, samples)

    def handed_out(self, batch: Any) -> None:
        """Give this thread's buffer up if ``batch`` holds its memory."""
        buffer = self._buffers.get(threading.get_ident())
        if buffer is None:
            return
        ours = buffer.untyped_storage().data_ptr()
        found: list[bool] = []
        map_tensors(lambda t: found.append(t.untyped_storage().data_ptr() == ours), batch)
        if any(found):
            del self._buffers[threading.get_ident()]


class SeedTag:
    """A collate function whose batches keep their samples' seed and per-sample draws, for a
    stage run later.

    With a CUDA device the batch stage runs in the main process after the copy
    (:class:`DeviceStage`): the seed and the draws travel with the batch from the worker as a
    :class:`Tagged`.
    """

    def __init__(self, collate_fn: Callable[[Any], Any], stage: BatchStage) -> None:
        self.collate_fn, self.stage = collate_fn, stage

    @property
    def takes_stacked(self) -> bool:
        return takes_stacked(self.collate_fn)

    def __call__(self, samples: Any) -> Any:
        samples, draws = split_drawn(samples)
        batch_draw = self.stage.draw(samples)
        batch = self.collate_fn(samples)
        seed = getattr(samples, "seed", None)
        if seed is None and draws is None and batch_draw is None:
            return batch
        return Tagged(batch, seed, draws, batch_draw)


class Tagged:
    """A collated batch, its seed, its samples' draws and its own, on their way from a
    worker."""

    __slots__ = ("batch", "batch_draw", "draws", "seed")

    def __init__(
        self, batch: Any, seed: int | None, draws: list[Any] | None = None, batch_draw: Any = None
    ) -> None:
        self.batch, self.seed, self.draws, self.batch_draw = batch, seed, draws, batch_draw

    def pin_memory(self) -> Tagged:  # called by torch's pin-memory thread
        return Tagged(pin_batch(self.batch), self.seed, self.draws, self.batch_draw)


class DeviceStage:
    """The batch stage run by the CUDA prefetcher, each batch under its own seed.

    :meth:`untag` takes the :class:`Tagged` batches apart and remembers the seed and draws of
    the last one drawn; the prefetcher calls this stage on a batch right after drawing and
    copying it (before it draws the next), so they are the batch's.

    Args:
        stage: The batch stage.
    """

    def __init__(self, stage: BatchStage) -> None:
        self.stage = stage
        self.seed: int | None = None
        self.draws: list[Any] | None = None
        self.batch_draw: Any = None

    def untag(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The batches without their tags (the seed of the last one is kept)."""
        return _Untagged(batches, self)

    def __call__(self, batch: Any) -> Any:
        seed, self.seed = self.seed, None
        draws, self.draws = self.draws, None
        batch_draw, self.batch_draw = self.batch_draw, None
        return self.stage(batch, seed=seed, draws=draws, batch_draw=batch_draw)


class _Untagged:
    def __init__(self, batches: Iterator[Any], owner: DeviceStage) -> None:
        self._batches, self._owner = batches, owner

    def __iter__(self) -> _Untagged:
        return self

    def __next__(self) -> Any:
        item = next(self._batches)
        owner = self._owner
        if isinstance(item, Tagged):
            owner.seed, owner.draws, owner.batch_draw = item.seed, item.draws, item.batch_draw
            return item.batch
        owner.seed, owner.draws, owner.batch_draw = None, None, None
        return item

    def __len__(self) -> int:
        return len(self._batches)  # type: ignore[arg-type]
