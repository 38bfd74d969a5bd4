"""What every batch executor shares: the parts that are not about its library.

A batch executor (``kind = "executor"``: DALI, and the next ones) replaces torch's worker
processes under ``fastload.DataLoader``. fastload keeps what decides the result, so that
changing the backend does not change it, and this module does it once for all of them:

* the order: the loader's batch sampler picks each batch's indices (``shuffle``, ``drop_last``,
  ``sampler``, ``generator``, ``DistributedSampler`` shards);
* the reading: reader threads read each batch's files and check their headers (format from
  the content, ``max_pixels``, truncated JPEGs) with the error policy of every backend;
* the geometry: the dataset's ``fastload.transforms`` chain is planned per sample with
  torchvision's draws, from each sample's own stream (its ``SampleKey`` seed, as on every
  backend) or else from the epoch's stream, into a region and an output size;
* the leading batch ops an executor can run itself are folded into it (:func:`fold_batch_ops`),
  their draws made by the ops' own ``make_params``;
* the faults: a batch the library fails on is re-decoded file by file to name the file, which
  is raised or (``on_error="skip"``) dropped, and the queued batches are fed again.

An executor's library work is an :class:`Engine`: build its graph, take a planned batch, hand
back a tensor. :class:`BatchExecutor` drives an engine through epochs.

One module a concern: ``translation`` (what the executor runs, and its options), ``folding``
(batch ops folded into the engine), ``reading`` (reading and planning, the planner processes),
``engine`` (the interface an executor's library implements), ``running`` (:class:`BatchExecutor`)
and ``epoch`` (one epoch's state machine).
"""

from __future__ import annotations

from fastload.backends.executor.engine import BatchFailed, Engine
from fastload.backends.executor.epoch import Epoch
from fastload.backends.executor.folding import Folded, fold_batch_ops
from fastload.backends.executor.reading import (
    PLANNERS_FROM,
    Planned,
    Read,
    plan_views,
    read_batch,
    read_planned,
    shown_size,
)
from fastload.backends.executor.running import BatchExecutor
from fastload.backends.executor.translation import ExecutorOptions, Translation, translate

__all__ = [
    "PLANNERS_FROM",
    "BatchExecutor",
    "BatchFailed",
    "Engine",
    "Epoch",
    "ExecutorOptions",
    "Folded",
    "Planned",
    "Read",
    "Translation",
    "fold_batch_ops",
    "plan_views",
    "read_batch",
    "read_planned",
    "shown_size",
    "translate",
]
