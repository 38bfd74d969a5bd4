"""Preparing a model for the loop, in one visible function (as Lightning Fabric's ``setup``),
and where the field's speed defaults are set.

The defaults, each set in one place: ``cudnn.benchmark`` on for a CUDA model and channels-last
memory format on request (:func:`prepare_model`, here); bf16 autocast where the device computes
it fast, fp16 with loss scaling on older GPUs (``Trainer(precision="auto")``, resolved by
:meth:`fastload.train.Precision.resolve`); AdamW, fused on CUDA (:func:`fastload.train.adamw`);
the one-cycle schedule (:func:`fastload.train.one_cycle`). :class:`fastload.train.Trainer` calls
:func:`prepare_model` with its own options; a loop of your own can call it alone.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fastload import compat
from fastload.train import checkpoint as ckpt

__all__ = ["prepare_model"]

log = logging.getLogger("fastload")


def prepare_model(
    model: torch.nn.Module,
    *,
    channels_last: bool = False,
    compile: bool | str = False,
    checkpoint_activations: Sequence[str] = (),
) -> torch.nn.Module:
    """The model, ready to train: channels-last, activation checkpointing and ``torch.compile``
    as asked; for a CUDA model, ``torch.backends.cudnn.benchmark`` is turned on for the process
    (fixed input sizes: cuDNN measures and keeps the fastest kernels).

    Args:
        model: The model, on its device (under DistributedDataParallel already, or not).
        channels_last: Convert the parameters to channels-last memory format (a DDP model must
            be converted before it was wrapped).
        compile: ``True`` (torch.compile's default backend), a backend name, or ``False``.
        checkpoint_activations: Names of submodules (as in ``named_modules``) whose
            activations are recomputed in the backward pass instead of kept.

    Returns:
        The model to train (``torch.compile``'s wrapper when compiled; the same object
        otherwise, its submodules' ``forward`` replaced where their activations are
        recomputed).

    Raises:
        ValueError: A DDP model not in channels-last, a submodule name the model lacks, or a
            compile backend torch does not have here.
    """
    parameter = next(model.parameters(), None)
    if parameter is not None and parameter.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if channels_last and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        four_d = [p for p in model.parameters() if p.ndim == 4]
        if not all(p.is_contiguous(memory_format=torch.channels_last) for p in four_d):
            raise ValueError(
                "channels_last=True with a model already in DistributedDataParallel: convert "
                "it before wrapping, with train.distributed.wrap(model, world, "
                "channels_last=True); DDP lays out its gradient buckets by the strides it "
                "sees when wrapping"
            )
    elif channels_last:
        model = model.to(memory_format=torch.channels_last)
    for name in checkpoint_activations:
        module = dict(ckpt.unwrap(model).named_modules()).get(name)
        if module is None:
            raise ValueError(f"checkpoint_activations: the model has no submodule {name!r}")
        module.forward = functools.partial(_checkpointed, module.forward, module)
    if compile:
        backend = "inductor" if compile is True else compile
        available = compat.dynamo_backends()
        if backend not in available:
            raise ValueError(
                f"compile={compile!r}: torch.compile has no backend {backend!r} here; "
                f"valid: {', '.join(sorted(available))}"
            )
        model = torch.compile(model, backend=backend)  # type: ignore[assignment]
    return model


def _checkpointed(forward: Callable[..., Any], module: torch.nn.Module, *args: Any, **kw: Any):
    if module.training and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kw)
    return forward(*args, **kw)
