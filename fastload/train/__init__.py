"""The training loop that fastload feeds, and its parts.

``Precision`` (bf16 / fp16 with loss scaling / fp32), ``adamw`` (fused on CUDA), ``scale_lr``
(the linear rule), per-step schedules (``one_cycle``, ``warmup_cosine``) and ``Trainer`` (the
loop: accumulation, clipping, non-finite losses, channels-last, activation checkpointing,
``torch.compile``, evaluation under ``inference_mode``, exact checkpoints), which prepares its
model with ``prepare_model`` (where the field's defaults are set: ``fastload.train.setup``).
"""

from fastload.train import distributed
from fastload.train.finders import BatchSizeResult, LRFinderResult, find_batch_size, find_lr
from fastload.train.loop import Trainer
from fastload.train.optim import adamw, one_cycle, scale_lr, warmup_cosine
from fastload.train.precision import PRECISIONS, Precision
from fastload.train.preemption import Preempted
from fastload.train.records import EpochStats, NonFiniteLossError, StepRecord, steps_per_epoch
from fastload.train.setup import prepare_model

__all__ = [
    "PRECISIONS",
    "BatchSizeResult",
    "EpochStats",
    "LRFinderResult",
    "NonFiniteLossError",
    "Precision",
    "Preempted",
    "StepRecord",
    "Trainer",
    "adamw",
    "distributed",
    "find_batch_size",
    "find_lr",
    "one_cycle",
    "prepare_model",
    "scale_lr",
    "steps_per_epoch",
    "warmup_cosine",
]
