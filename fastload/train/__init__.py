"""The training loop that fastload feeds, and its parts.

``Precision`` (bf16 / fp16 with loss scaling / fp32), ``adamw`` (fused on CUDA), ``scale_lr``
(the linear rule), per-step schedules (``one_cycle``, ``warmup_cosine``) and ``Trainer`` (the
loop: accumulation, clipping, non-finite losses, channels-last, activation checkpointing,
``torch.compile``, evaluation under ``inference_mode``, exact checkpoints).
"""

from fastload.train import distributed
from fastload.train.finders import BatchSizeResult, LRFinderResult, find_batch_size, find_lr
from fastload.train.loop import EpochStats, NonFiniteLossError, StepRecord, Trainer, steps_per_epoch
from fastload.train.optim import adamw, one_cycle, scale_lr, warmup_cosine
from fastload.train.precision import PRECISIONS, Precision

__all__ = [
    "PRECISIONS",
    "BatchSizeResult",
    "EpochStats",
    "LRFinderResult",
    "NonFiniteLossError",
    "Precision",
    "StepRecord",
    "Trainer",
    "adamw",
    "distributed",
    "find_batch_size",
    "find_lr",
    "one_cycle",
    "scale_lr",
    "steps_per_epoch",
    "warmup_cosine",
]
