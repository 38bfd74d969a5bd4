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
        backend: Who executes the dataset's pipeline. ``None`` (default): the dataset itself,
            in torch's worker processes (with the decoding backend it was made with), unless it
            was made with ``backend="dali"``. ``"dali"``: NVIDIA DALI reads, decodes and
            transforms whole batches (see :mod:`fastload.backends.dali`); the dataset must be a
            ``fastload.ImageFolder`` or ``ImageList`` whose ``transform`` is made of
            ``fastload.transforms`` ops. ``num_workers`` then sets DALI's thread count
            (``max(1, num_workers)``) and ``prefetch_factor`` how many batches DALI decodes
            ahead (default 2). Under ``torch.distributed`` with no ``sampler`` given, each rank
            reads its own shard (a ``DistributedSampler``, reshuffled every epoch).
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
        backend: str | None = None,
        **kwargs: Any,
    ) -> None:
        target = resolve_device(device)
        if backend not in (None, "dali"):
            raise ValueError(
                f"backend={backend!r} is not valid here; valid: None (the dataset decodes, with "
                "the backend it was made with, e.g. fastload.ImageFolder(root, "
                "backend='turbojpeg')), 'dali'"
            )
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
                given,
                device=device,
                gpu_transforms=gpu_transforms,
                channels_last=channels_last,
                backend=backend,
            )
            args, kwargs = (), given
        dataset = given.get("dataset") if given is not None else None
        dali = backend == "dali" or (
            backend is None and getattr(dataset, "backend", None) == "dali"
        )
        cuda = target is not None and target.type == "cuda"
        auto_shard, threads, dali_prefetch = False, 0, None
        if dali and given is not None:
            given.pop("self", None)
            auto_shard = _check_dali_arguments(given)
            # DALI's threads replace the worker processes: torch gets none, so it starts none
            # and warns about none, and its worker-only options go with them.
            threads = given.get("num_workers", 0)
            dali_prefetch = given.pop("prefetch_factor", None)
            for name in ("persistent_workers", "multiprocessing_context"):
                given.pop(name, None)
            given["num_workers"] = 0
            args, kwargs = (), given
        elif cuda and given is not None and "pin_memory" not in given:
            kwargs["pin_memory"] = True
        super().__init__(*args, **kwargs)
        self.device = target
        self.device_prefetch = device_prefetch
        self.gpu_transforms = gpu_transforms
        self.channels_last = channels_last
        self.backend = "dali" if dali else None
        self._dali = None
        self._epoch = 0
        self._auto_shard = auto_shard
        if dali:
            from fastload.backends.dali import DaliBatches, DaliOptions

            self.num_workers, self.prefetch_factor = threads, dali_prefetch
            options = DaliOptions(
                device=target or torch.device("cpu"),
                num_threads=max(1, threads),
                prefetch=dali_prefetch or 2,
                batch_size=self.batch_size or 1,
                pin_memory=self.pin_memory and torch.cuda.is_available(),
            )
            self._dali = DaliBatches(self.dataset, options, batch_ops=gpu_transforms)
            # what DALI does not run of the batch ops, in this process, on the delivered batch
            remaining = self._dali.remaining_ops
            self._dali_stage = (
                BatchStage(remaining, channels_last=channels_last)
                if remaining is not None or channels_last
                else None
            )
            return
        # The batch stage runs on the prefetch stream for a CUDA device, else in the workers.
        self._device_stage = stage if cuda else None
        if stage is not None and self._device_stage is None:
            self.collate_fn = CollateThenStage(self.collate_fn, stage)
        if getattr(self.dataset, "on_error", None) == "skip":
            # A fastload dataset that skips unreadable images returns markers in their place:
            # drop them before collating, and report them in the main process.
            self.collate_fn = SkipCollate(self.collate_fn, batched=self.batch_sampler is not None)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self._dali is not None:
            return self._dali_epoch()
        batches = super().__iter__()
        if isinstance(self.collate_fn, SkipCollate):
            batches = SkipReport(batches, self.dataset)
        if self.device is None or self.device.type == "cpu":
            return batches
        prefetcher = CUDAPrefetcher(
            batches, device=self.device, depth=self.device_prefetch, transform=self._device_stage
        )
        return iter(prefetcher)  # started: `for batch in loader` calls iter() only on the loader

    def _dali_epoch(self) -> Iterator[Any]:
        if self._auto_shard:
            self.sampler.set_epoch(self._epoch)  # type: ignore[attr-defined]
        self._epoch += 1
        # one draw per epoch, as torch draws its workers' base seed
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        assert self._dali is not None and self.batch_sampler is not None
        batches = self._dali.epoch(
            iter(self.batch_sampler),
            seed=seed,
            target_transform=getattr(self.dataset, "target_transform", None),
        )
        if self._dali_stage is None:
            return batches
        return map(self._dali_stage, batches)


def _check_dali_arguments(given: dict[str, Any]) -> bool:
    """Refuse what DALI cannot honour; add a DistributedSampler under torch.distributed.

    Returns:
        Whether a DistributedSampler was added (the loader then sets its epoch).
    """
    from fastload.datasets import ImageList

    dataset = given["dataset"]
    if not isinstance(dataset, ImageList):
        raise ValueError(
            "backend='dali' reads the files itself: the dataset must be a fastload.ImageFolder "
            f"or fastload.ImageList, got {type(dataset).__name__}"
        )
    if given.get("batch_size", 1) is None and given.get("batch_sampler") is None:
        raise ValueError("backend='dali' makes whole batches: batch_size=None is not supported")
    workers, prefetch = given.get("num_workers", 0), given.get("prefetch_factor")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"num_workers={workers!r} must be an int >= 0 (DALI's thread count)")
    if prefetch is not None and (
        isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1
    ):
        raise ValueError(f"prefetch_factor={prefetch!r} must be an int >= 1")
    for name in ("collate_fn", "worker_init_fn"):
        if given.get(name) is not None:
            raise ValueError(
                f"backend='dali' makes batches without worker processes or collating, so "
                f"{name}={given[name]!r} would not run; remove it, or use a CPU backend"
            )
    import torch.distributed as dist

    if given.get("sampler") is not None or given.get("batch_sampler") is not None:
        return False
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    generator = given.get("generator")
    given["sampler"] = torch.utils.data.DistributedSampler(
        dataset,
        shuffle=bool(given.pop("shuffle", False)),
        seed=generator.initial_seed() if generator is not None else 0,
    )
    return True


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
