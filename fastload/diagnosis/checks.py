"""What doctor reads off the objects and the measured step: one list of checks.

Each check is ``check(ctx) -> Finding | None``, in :data:`CHECKS`; a new check is one function
here and one entry in that list (and a test that plants what it finds). Checks read; they do
not time anything (timed changes are :mod:`~fastload.diagnosis.trials`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fastload.backends.region import restart_interval
from fastload.diagnosis.report import DoctorReport, Finding
from fastload.memory.tensors import inputs_of
from fastload.pixels.image import sniff
from fastload.system import cpu_cores
from fastload.transforms import RandomCrop, RandomResizedCrop

__all__ = ["CHECKS", "FUSABLE", "Context", "bias_before_norm", "has_conv", "static_findings"]

_CONV = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)
_NORM = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
FUSABLE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


@dataclass(frozen=True)
class Context:
    """What a check reads.

    Attributes:
        model: The model.
        loader: The loader (``num_workers``, ``pin_memory``... read when it has them).
        optimizer: The optimizer, if any.
        device: Where the model trains.
        batch: A batch from the loader, on ``device`` (``None``: not read).
        report: The measured step (``None`` for the checks made without measuring).
        shapes: The input shapes the measured steps saw.
    """

    model: torch.nn.Module
    loader: Any
    optimizer: torch.optim.Optimizer | None
    device: torch.device
    batch: Any = None
    report: DoctorReport | None = None
    shapes: frozenset[tuple[int, ...]] = frozenset()

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def inputs(self) -> Any:
        return inputs_of(self.batch)


def has_conv(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def bias_before_norm(model: torch.nn.Module, example: Any) -> list[tuple[str, str]]:
    """Conv/Linear layers with a bias whose output goes straight into a BatchNorm.

    Found by running ``model(example)`` once with hooks (no gradients): a BatchNorm whose input
    is the very tensor a biased layer returned. The bias is wasted there: the norm subtracts
    the mean, bias included.

    Returns:
        ``(layer name, norm name)`` pairs.
    """
    made: dict[int, tuple[str, torch.Tensor]] = {}
    training = model.training
    found: list[tuple[str, str]] = []
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, _CONV) and module.bias is not None:

            def keep(mod: Any, args: Any, out: Any, name: str = name) -> None:
                if isinstance(out, torch.Tensor):
                    made[id(out)] = (name, out)  # the tensor is held: its id stays its own

            handles.append(module.register_forward_hook(keep))
        elif isinstance(module, _NORM):

            def check(mod: Any, args: Any, name: str = name) -> None:
                if args and isinstance(args[0], torch.Tensor) and id(args[0]) in made:
                    source, tensor = made[id(args[0])]
                    if tensor is args[0]:
                        found.append((source, name))

            handles.append(module.register_forward_pre_hook(check))
    try:
        model.eval()  # nothing learnt: BatchNorm statistics stay as they are
        with torch.no_grad():
            model(example)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
        made.clear()
    return found


def num_workers_0(ctx: Context) -> Finding | None:
    if getattr(ctx.loader, "num_workers", None) != 0:
        return None
    return _priced(
        Finding(
            "num_workers_0",
            "the loader decodes in the training process (num_workers=0)",
            "fastload.DataLoader(..., num_workers='auto')",
            "decoding and the step take turns instead of overlapping",
        ),
        ctx.report,
        copying=False,
    )


def pin_memory_off(ctx: Context) -> Finding | None:
    loader = ctx.loader
    if not ctx.cuda or getattr(loader, "pin_memory", None) is not False or _on_device(loader):
        return None
    return _priced(
        Finding(
            "pin_memory_off",
            "batches are copied to the GPU from pageable memory (pin_memory=False)",
            "DataLoader(..., pin_memory=True), or fastload.DataLoader(..., device='cuda')",
            "a pageable copy is synchronous and about half the speed of a pinned one",
        ),
        ctx.report,
        copying=True,
    )


def float32_batches(ctx: Context) -> Finding | None:
    inputs = ctx.inputs
    host_floats = (
        isinstance(inputs, torch.Tensor)
        and inputs.ndim == 4
        and inputs.dtype == torch.float32
        and inputs.device.type == "cpu"
    )
    if not (ctx.cuda and host_floats):
        return None
    return _priced(
        Finding(
            "float32_batches",
            "the loader hands over float32 images",
            "deliver uint8 and normalize on the device: "
            "batch_transforms=fastload.gpu.Normalize(mean, std)",
            "4x the bytes of uint8 to collate, share between processes and copy",
        ),
        ctx.report,
        copying=True,
    )


def jpegs_without_restarts(ctx: Context) -> Finding | None:
    """The region backend cuts random crops out of JPEGs with restart markers; a dataset of
    JPEGs without them entropy-decodes all the rows above each crop, across the image."""
    dataset = getattr(ctx.loader, "dataset", None)
    transform = getattr(dataset, "transform", None)
    ops = getattr(transform, "transforms", [transform])
    if getattr(dataset, "backend", None) != "region" or not any(
        isinstance(op, (RandomResizedCrop, RandomCrop)) for op in ops
    ):
        return None
    try:
        data = dataset.read_sample(0)[0]  # type: ignore[union-attr]
    except Exception:  # an empty or unreadable dataset: nothing to say about its JPEGs
        return None
    if not isinstance(data, bytes) or sniff(data) != "jpeg" or restart_interval(data) > 0:
        return None
    return _priced(
        Finding(
            "jpegs_without_restarts",
            "the JPEGs have no restart markers: each random crop entropy-decodes every row "
            "above it, across the whole image",
            "fastload pack SOURCE OUT --pixels seekable, then fastload.ImageShards(OUT) "
            "(the same pixels)",
            "measured on photos: 1.57-1.75x a random crop's sample from the rewritten JPEGs, "
            "1.30-1.44x the loader's images/s (benchmarks/decoding/seekable.py, ffcv_peer.py)",
        ),
        ctx.report,
        copying=False,
    )


def conv_bias_before_bn(ctx: Context) -> Finding | None:
    inputs = ctx.inputs
    if ctx.batch is None or inputs is None:
        return None
    pairs = bias_before_norm(ctx.model, inputs)
    if not pairs:
        return None
    named = ", ".join(f"{a} -> {b}" for a, b in pairs[:4])
    more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
    return Finding(
        "conv_bias_before_bn",
        f"{len(pairs)} layer(s) with a bias feed a BatchNorm: {named}{more}",
        "build those layers with bias=False",
        "the norm removes the bias: its parameters, gradients and adds are wasted",
    )


def optimizer_not_fused(ctx: Context) -> Finding | None:
    optimizer = ctx.optimizer
    if not (ctx.cuda and isinstance(optimizer, FUSABLE)) or optimizer.defaults.get("fused"):
        return None
    name = type(optimizer).__name__
    return Finding(
        "optimizer_not_fused",
        f"{name} without fused=True",
        f"torch.optim.{name}(..., fused=True)",
        "the update runs as several kernels per parameter group instead of one",
    )


def cudnn_benchmark_off(ctx: Context) -> Finding | None:
    if not ctx.cuda or torch.backends.cudnn.benchmark or len(ctx.shapes) != 1:
        return None
    if not has_conv(ctx.model):
        return None
    return Finding(
        "cudnn_benchmark_off",
        "cudnn.benchmark is off and every batch has the same shape",
        "torch.backends.cudnn.benchmark = True",
        "cuDNN uses its default convolution algorithms instead of the fastest measured",
    )


def loader_bound(ctx: Context) -> Finding | None:
    report = ctx.report
    if report is None or report.bound != "loader" or report.data_wait_share < 0.1:
        return None
    gain = 1.0 / max(1.0 - report.data_wait_share, 0.05)
    remedy = (
        "fastload autotune (num_workers, prefetch_factor), a faster backend "
        "(fastload bench), or decoding on the GPU (backend='nvimgcodec' / 'dali')"
    )
    workers = getattr(ctx.loader, "num_workers", 0)
    cores = cpu_cores()
    if isinstance(workers, int) and workers >= cores:
        remedy = (
            f"its {workers} workers already fill this machine's {cores} cores: decode on the "
            "GPU (backend='nvimgcodec' / 'dali'), or on other machines' CPUs with Ray Data "
            "(fastload.ray: the loader's epochs decoded on a cluster, the same batches)"
        )
    return Finding(
        "loader_bound",
        f"the step waits {report.data_wait_share:.0%} of its time for data: the loader "
        f"gives {report.loader_rate:,.0f} samples/s, the model takes {report.step_rate:,.0f}",
        remedy,
        "measured: the data wait",
        round(gain, 2),
    )


# every check, in the order their findings are listed before ranking
CHECKS: tuple[Callable[[Context], Finding | None], ...] = (
    num_workers_0,
    pin_memory_off,
    float32_batches,
    jpegs_without_restarts,
    conv_bias_before_bn,
    optimizer_not_fused,
    cudnn_benchmark_off,
    loader_bound,
)


def run_checks(ctx: Context) -> list[Finding]:
    """The findings of every check in :data:`CHECKS`."""
    return [f for check in CHECKS if (f := check(ctx)) is not None]


def static_findings(
    model: torch.nn.Module,
    loader: Any,
    optimizer: torch.optim.Optimizer | None,
    *,
    device: torch.device,
    batch: Any = None,
) -> list[Finding]:
    """What can be read off the objects, without timing anything (the checks that need no
    measured step).

    Args:
        model: The model.
        loader: The loader (its ``num_workers`` and ``pin_memory`` are read, when it has them).
        optimizer: The optimizer, if any.
        device: Where the model trains.
        batch: A batch from the loader, on ``device`` (its first element is the input).
    """
    return run_checks(Context(model, loader, optimizer, device, batch))


def _on_device(loader: Any) -> bool:
    """A fastload loader that delivers on a CUDA device pins for itself."""
    plan = getattr(loader, "plan", None)
    device = getattr(plan, "device", None)
    return isinstance(device, torch.device) and device.type == "cuda"


def _priced(finding: Finding, report: DoctorReport | None, *, copying: bool) -> Finding:
    """A loader finding costs at most the step's time on data (waiting, and copying for the
    copy-related ones): the bound on what fixing it gives."""
    if report is None:
        return finding
    total = report.data_wait_s + report.copy_s + report.compute_s
    spent = report.data_wait_s + (report.copy_s if copying else 0.0)
    share = spent / total if total > 0 else 0.0
    if share < 0.02:
        return finding
    cost = f"{finding.cost}; {share:.0%} of each step is spent on it"
    gain = round(1.0 / max(1.0 - share, 0.05), 2)
    return Finding(finding.key, finding.what, finding.fix, cost, gain)
