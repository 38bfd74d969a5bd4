"""``fastload.DataLoader``: torch's DataLoader, plus batches delivered on the device."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

# torch's worker loop seeds numpy.random in every worker. numpy >= 2 imports that submodule
# lazily, and importing it for the first time inside a forked worker has crashed workers here
# (KeyError in importlib's module lock). Importing it once in the parent removes that hazard.
import numpy.random  # noqa: F401
import torch.utils.data

from fastload.datasets import SkipCollate, SkipReport
from fastload.gpu.stage import BatchStage, CollateThenStage
from fastload.prefetch import CUDAPrefetcher, DeviceLike, resolve_device

__all__ = ["DataLoader"]

_TORCH_INIT = inspect.signature(torch.utils.data.DataLoader.__init__)
log = logging.getLogger("fastload")


class DataLoader(torch.utils.data.DataLoader):
    """A drop-in ``torch.utils.data.DataLoader`` that can also deliver batches on a CUDA device.

    Every parameter of the installed torch's ``DataLoader`` is accepted in the same order, with
    the same defaults, and passed to torch unchanged. With none of fastload's own options set,
    the loader *is* torch's: same batches, same order for the same ``generator``, same worker
    seeding, same errors. fastload's options are keyword-only and come after torch's.

    ``num_workers="auto"`` (fastload's only extension of a torch parameter) measures which
    worker count loads fastest with these very arguments (:func:`fastload.autotune.autotune`,
    cached on disk), passes that int to torch, and logs the choice on the ``fastload`` logger.

    Args:
        *args: torch's positional parameters (``dataset``, ``batch_size``, ...).
        device: Where batches are delivered. ``None`` (default) or ``"cpu"``: exactly torch's
            batches, as torch yields them. ``"cuda"`` / ``"cuda:N"``: batches arrive on that
            device through a :class:`~fastload.CUDAPrefetcher`, copied on a side stream from
            pinned memory while the previous batch is in use. With a CUDA device,
            ``pin_memory`` defaults to ``True`` (pinning runs in torch's pin-memory thread);
            pass ``pin_memory=False`` explicitly to turn it off.
        device_prefetch: With a CUDA ``device``, how many batches are copied ahead of the one
            in use.
        gpu_transforms: Batch ops (``fastload.gpu``) applied to each batch's images, and to its
            labels when the batch is ``(images, labels, ...)``. With a CUDA ``device`` they run
            on the prefetcher's side stream right after the copy, overlapping the training step;
            otherwise they run in the worker processes, after collating.
        channels_last: Deliver 4-D images in channels-last memory format.
        **kwargs: torch's keyword parameters (``shuffle``, ``num_workers``, ...).

    Raises:
        ValueError: A bad value for one of fastload's options (the message shows the value
            and the valid choices); torch's own checks raise torch's exceptions.
        RuntimeError: A CUDA ``device`` on a machine where torch sees no CUDA device.
    """

    def __init__(
        self,
        *args: Any,
        device: DeviceLike | None = None,
        device_prefetch: int = 2,
        gpu_transforms: Callable[..., Any] | None = None,
        channels_last: bool = False,
        **kwargs: Any,
    ) -> None:
        target = resolve_device(device)
        if (
            isinstance(device_prefetch, bool)
            or not isinstance(device_prefetch, int)
            or device_prefetch < 1
        ):
            raise ValueError(f"device_prefetch={device_prefetch!r} must be an int >= 1")
        if not isinstance(channels_last, bool):
            raise ValueError(f"channels_last={channels_last!r} must be True or False")
        stage = None
        if gpu_transforms is not None or channels_last:
            stage = BatchStage(gpu_transforms, channels_last=channels_last)
        try:
            given: dict[str, Any] | None = dict(_TORCH_INIT.bind(self, *args, **kwargs).arguments)
        except TypeError:
            given = None  # torch raises its own error for these arguments below
        if given is not None and given.get("num_workers") == "auto":
            # fastload's own value for a torch parameter: measure, then hand torch an int
            given.pop("self")
            given["num_workers"] = _autotuned_workers(
                given, device=device, gpu_transforms=gpu_transforms, channels_last=channels_last
            )
            args, kwargs = (), given
        cuda = target is not None and target.type == "cuda"
        if cuda and given is not None and "pin_memory" not in given:
            kwargs["pin_memory"] = True
        super().__init__(*args, **kwargs)
        self.device = target
        self.device_prefetch = device_prefetch
        self.gpu_transforms = gpu_transforms
        self.channels_last = channels_last
        # The batch stage runs on the prefetch stream for a CUDA device, else in the workers.
        self._device_stage = stage if cuda else None
        if stage is not None and self._device_stage is None:
            self.collate_fn = CollateThenStage(self.collate_fn, stage)
        if getattr(self.dataset, "on_error", None) == "skip":
            # A fastload dataset that skips unreadable images returns markers in their place:
            # drop them before collating, and report them in the main process.
            self.collate_fn = SkipCollate(self.collate_fn, batched=self.batch_sampler is not None)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        batches = super().__iter__()
        if isinstance(self.collate_fn, SkipCollate):
            batches = SkipReport(batches, self.dataset)
        if self.device is None or self.device.type == "cpu":
            return batches
        prefetcher = CUDAPrefetcher(
            batches, device=self.device, depth=self.device_prefetch, transform=self._device_stage
        )
        return iter(prefetcher)  # started: `for batch in loader` calls iter() only on the loader


def _autotuned_workers(arguments: dict[str, Any], **fastload_options: Any) -> int:
    """Run fastload.autotune for a loader built with these arguments; log and return the choice."""
    from fastload.autotune import autotune

    dataset = arguments["dataset"]
    batch_size = arguments.get("batch_size", 1)
    if batch_size is None:
        raise ValueError("num_workers='auto' needs a batch_size to measure with")
    skip = ("dataset", "batch_size", "num_workers", "persistent_workers")
    others = {
        k: v
        for k, v in arguments.items()
        if k not in skip and not _is_default(k, v)  # spelled-out defaults change nothing
    }
    result = autotune(dataset, batch_size=batch_size, loader_kwargs={**others, **fastload_options})
    source = "cached" if result.cached else "measured"
    log.info(
        "num_workers='auto': %d workers (%s, %.0f images/s): %s",
        result.num_workers,
        source,
        result.images_per_sec,
        result.reason,
    )
    return result.num_workers


def _is_default(name: str, value: Any) -> bool:
    default = _TORCH_INIT.parameters[name].default
    if value is default:
        return True
    simple = (bool, int, float, str)
    return isinstance(value, simple) and isinstance(default, simple) and value == default


def _public_signature() -> inspect.Signature:
    """torch's parameters, in torch's order, then fastload's keyword-only options."""
    own = inspect.signature(DataLoader.__init__).parameters
    torch_params = list(_TORCH_INIT.parameters.values())
    extra = [p for name, p in own.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return _TORCH_INIT.replace(parameters=[*torch_params, *extra])


# What help(), IDEs that introspect at run time and inspect.signature() show: the installed
# torch's parameters exactly, whatever its version, followed by fastload's own.
DataLoader.__init__.__signature__ = _public_signature()  # type: ignore[attr-defined]
