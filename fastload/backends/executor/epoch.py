"""One epoch of a batch executor, as a state machine: read ahead, plan, feed, collect, and isolate
a file the library fails on (re-decoded file by file, raised or dropped, the queued batches fed
again).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from fastload import errors
from fastload.backends.executor.engine import BatchFailed
from fastload.backends.executor.reading import Planned, Read, plan_views, read_batch, read_planned
from fastload.gpu.stage import ops_seeded
from fastload.sampling import sample_seed
from fastload.system import trim_heap

__all__ = ["Epoch"]


class Epoch:
    """One pass over a batch sampler: read ahead, plan, feed, collect, isolate faults."""

    def __init__(
        self,
        owner: Any,  # the BatchExecutor that runs this epoch
        batches: Iterator[list[int]],
        seed: int,
        target_transform: Callable[[int], Any] | None,
        token: object,
        on_drop: Callable[[int], None] | None = None,
        stage: Callable[..., Any] | None = None,
    ) -> None:
        self._owner, self._engine, self._token = owner, owner.engine, token
        self._on_drop, self._delivered, self._stage = on_drop, 0, stage
        self._batches = batches
        self._target_transform = target_transform
        generator = torch.Generator()
        generator.manual_seed(seed)
        self._rng = generator.get_state()
        self._reader = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix=f"fastload-{owner.name}-read"
        )
        self._reads: deque[tuple[Future[Read], list[int | None], int | None]] = deque()
        self._queued: deque[Planned] = deque()
        self._skipped = 0
        self._done = False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if not self._owner.is_current(self._token):
            self._finish()
            raise RuntimeError(
                f"this {self._owner.name} loader iterator was replaced by a newer iter(loader); "
                f"a loader with backend={self._owner.name!r} runs one epoch at a time"
            )
        try:
            return self._next_batch()
        except BaseException:
            if not self._done:
                if self._owner.is_current(self._token) and self._queued:
                    # batches are left inside the engine: the next epoch starts on a new graph
                    self._engine.discard()
                self._finish()
            raise

    def _next_batch(self) -> Any:
        while True:
            self._schedule()
            if not self._queued:
                self._finish()
                raise StopIteration
            if self._queued[0].error is not None:
                raise self._queued[0].error
            try:
                images = self._engine.collect()
            except BatchFailed as exc:
                self._drop_bad_files(exc)
                continue
            self._delivered += 1
            planned = self._queued.popleft()
            batch = (images, self._labels(planned)) if self._owner.dataset.has_targets else images
            if self._stage is None:
                return batch
            # the flips folded into the plan drew from the batch's seed: the rest, from another
            seed = None if planned.seed is None else sample_seed(planned.seed, 1 << 32)
            return self._stage(batch, seed=seed)

    # ------------------------------------------------------------ reading and planning

    def _read_ahead(self) -> None:
        want = self._owner.options.prefetch + 2
        while len(self._reads) < want:
            indices = next(self._batches, None)
            if indices is None:
                return
            seeds = [getattr(i, "seed", None) for i in indices]
            seed = getattr(indices, "seed", None)
            indices = [int(i) for i in indices]
            planners = self._owner.planners(seeds)
            if planners is not None:  # each sample planned from its own seed, or no draws
                future = self._reader.submit(
                    read_planned, planners, self._owner.dataset, indices, seeds
                )
            else:
                future = self._reader.submit(read_batch, self._owner.dataset, indices)
            self._reads.append((future, seeds, seed))

    def _plan(self, read: Read, seeds: list[int | None], seed: int | None) -> Planned | None:
        dataset = self._owner.dataset
        for path, why, stage in read.bad:
            if dataset.on_error == "raise":
                error = errors.unusable(path, why, stage=stage, backend=self._owner.name)
                return Planned([], [], [], {}, error=error)
            dataset.bad_files[path] = why
            self._skipped += 1
        if not read.good:
            return None
        if read.views is not None:
            views = read.views
        else:
            views, self._rng = plan_views(
                self._owner.translation.plan,
                read.sizes,
                self._rng,
                [seeds[k] for k in read.good],
                python_random=self._owner.dataset.transform_split.draws_python,
            )
        flips = self._owner.folded.flips
        with ops_seeded(flips, seed):  # the batch's own stream, when it has one
            for op in flips:  # the op's own draws, one per delivered sample
                drawn = op.make_params(len(views), views[0].height, views[0].width)
                mirror = drawn["apply"].tolist()
                views = [v.mirrored() if f else v for v, f in zip(views, mirror, strict=True)]
        return Planned(
            [read.paths[k] for k in read.good],
            read.targets,
            read.data,
            self._engine.inputs(read.data, views, read.sizes, read.infos),
            seed=seed,
        )

    def _schedule(self) -> None:
        self._read_ahead()
        while len(self._queued) < self._owner.options.prefetch and self._reads:
            if self._queued and self._queued[-1].error is not None:
                return  # nothing is delivered past a batch that raises
            future, seeds, seed = self._reads.popleft()
            planned = self._plan(future.result(), seeds, seed)
            self._read_ahead()
            if planned is None:
                if self._on_drop is not None:  # delivered before it: those out, and those queued
                    self._on_drop(self._delivered + len(self._queued))
                continue
            if planned.error is None:
                if not self._engine.fits(len(planned.paths)):
                    # a larger batch than the graph was built for (a custom batch_sampler): a
                    # new graph takes the batches already queued again, in their order
                    self._engine.discard(grow_to=len(planned.paths))
                    self._feed_again()
                self._engine.feed(planned.inputs)
            self._queued.append(planned)

    def _feed_again(self) -> None:
        """Feed the queued batches to a new graph, in their order."""
        for queued in self._queued:
            if queued.error is None:
                self._engine.feed(queued.inputs)

    # ------------------------------------------------------------ delivering

    def _labels(self, planned: Planned) -> Any:
        from torch.utils.data import default_collate

        labels: Any
        if self._target_transform is None:
            labels = default_collate(planned.targets)  # ints: an int64 tensor
        else:
            labels = default_collate([self._target_transform(x) for x in planned.targets])
        device = self._owner.options.device
        if device.type == "cuda" and isinstance(labels, torch.Tensor):
            labels = labels.to(device, non_blocking=True)
        return labels

    def _drop_bad_files(self, exc: BatchFailed) -> None:
        """The engine failed on the oldest batch: name the file; raise, or drop it and feed again.

        Each file of the batch is decoded alone to find the one(s) that failed. With
        ``on_error="skip"`` they are recorded, and the batch without them and the batches
        queued behind it are fed to a new graph.
        """
        dataset, name = self._owner.dataset, self._owner.name
        self._engine.discard()  # the failure took the graph's queued work with it
        planned = self._queued[0]
        culprits: dict[int, str] = {}
        for k, data in enumerate(planned.data):
            if exc.positions is not None and k not in exc.positions:
                continue  # the library named the files it failed on
            try:
                self._engine.decode_alone(data)
            except ValueError as bad:
                culprits[k] = str(bad)
        if not culprits:
            listed = ", ".join(repr(p) for p in planned.paths[:4])
            more = f" and {len(planned.paths) - 4} more" if len(planned.paths) > 4 else ""
            raise errors.ImageDecodeError(
                f"the {name} backend failed on a batch of {len(planned.paths)} files ({listed}"
                f"{more}), though each decodes alone: {exc}"
            ) from exc
        if dataset.on_error == "raise":
            k, why = next(iter(culprits.items()))
            raise errors.cannot_read(planned.paths[k], name, why)
        for k, why in culprits.items():
            dataset.bad_files[planned.paths[k]] = why
            self._skipped += 1
        self._queued.popleft()
        keep = [k for k in range(len(planned.paths)) if k not in culprits]
        if keep:
            self._queued.appendleft(planned.keep(keep))
        elif self._on_drop is not None:
            self._on_drop(self._delivered)
        self._feed_again()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        for future, _, _ in self._reads:
            future.cancel()
        # the engine's threads fragment the C heap epoch after epoch; a few ms hand it back,
        # on a reader thread, while the next epoch starts (the engine has nothing queued)
        with contextlib.suppress(RuntimeError):  # no new threads at interpreter exit
            self._reader.submit(trim_heap)
        self._reader.shutdown(wait=False)
        errors.warn_skipped(self._skipped, stacklevel=4)
        self._skipped = 0

    def __del__(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.shutdown(wait=False, cancel_futures=True)
