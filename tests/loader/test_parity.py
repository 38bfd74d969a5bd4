"""fastload.DataLoader without fastload's options must behave exactly like torch's DataLoader.

Every scenario below is run once with ``torch.utils.data.DataLoader`` (the oracle) and once with
each fastload variant; the results, the exceptions (type and message, digits masked because
they carry process ids) and the warnings must be the same.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import os
import random
import re
import signal
import time
import typing
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

import fastload
from fastload import options

TorchDataLoader = torch.utils.data.DataLoader


# device="cpu" is documented to pass torch's batches through unchanged, so it is held to the
# same standard.
VARIANTS = {
    "fastload": fastload.DataLoader,
    "fastload-device-cpu": functools.partial(fastload.DataLoader, device="cpu"),
}


# ---------------------------------------------------------------- datasets (module level, so
# that spawned workers can unpickle them)


class Squares(Dataset):
    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return torch.tensor([i, i * i]), i


Point = collections.namedtuple("Point", "x y")


class Nested(Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "image": torch.full((2, 2), i, dtype=torch.uint8),
            "point": Point(np.float32(i), np.arange(3) * i),
            "name": f"item{i}",
            "weight": 0.5 * i,
            "pair": (i, [i, -i]),
        }


class RandomProbe(Dataset):
    """Reports every random source a worker seeds, and what get_worker_info() says."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, Any]:
        info = get_worker_info()
        return {
            "index": i,
            "initial_seed": torch.initial_seed(),
            "torch": torch.rand(()).item(),
            "numpy": float(np.random.rand()),
            "python": random.random(),
            "worker": None if info is None else (info.id, info.num_workers, info.seed),
            "mark": _INIT_MARK.get("value"),
        }


_INIT_MARK: dict[str, int] = {}


def _mark_worker(worker_id: int) -> None:
    _INIT_MARK["value"] = 1000 + worker_id + int(torch.randint(0, 10**6, ()).item())


class Numbers(IterableDataset):
    """An IterableDataset that ignores sharding: each worker yields everything."""

    def __init__(self, n: int = 5) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


class Sharded(IterableDataset):
    """Splits its range between workers the way torch's documentation shows."""

    def __init__(self, n: int = 11) -> None:
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class SizedIterable(IterableDataset):
    def __init__(self, reported: int, actual: int) -> None:
        self.reported, self.actual = reported, actual

    def __len__(self) -> int:
        return self.reported

    def __iter__(self):
        return iter(range(self.actual))


class Failing(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 3:
            raise ValueError(f"sample {i} is broken")
        return i


class KillsItsWorker(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        if i == 2 and get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class Slow(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        time.sleep(2.0)
        return i


class Pid(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return os.getpid()


class CudaProbe(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> bool:
        return torch.cuda.is_initialized()


# ---------------------------------------------------------------- machinery

SCENARIOS: dict[str, Callable[[type], Any]] = {}


def scenario(fn: Callable[[type], Any]) -> Callable[[type], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


def _mask(text: str) -> str:
    """Hide what differs between two runs of the same thing: object addresses and pids."""
    return re.sub(r"\d+", "N", re.sub(r"0x[0-9a-fA-F]+", "ADDR", text))


def _plain(value: Any) -> Any:
    """A comparable, hashable-free form of a nested batch."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.tolist())
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.shape, value.tolist())
    if isinstance(value, dict):
        return ("dict", type(value).__name__, [(k, _plain(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v) for v in value])
    return value


def _outcome(fn: Callable[[Any], Any], loader_cls: Any) -> Any:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = ("returned", _plain(fn(loader_cls)))
        except Exception as exc:
            result = ("raised", type(exc).__name__, _mask(str(exc)))
    warned = sorted({(w.category.__name__, _mask(str(w.message))) for w in caught})
    return result, warned


def test_is_a_torch_dataloader() -> None:
    loader = fastload.DataLoader(Squares())
    assert isinstance(loader, TorchDataLoader)
    assert issubclass(fastload.DataLoader, TorchDataLoader)


def test_signature_is_torchs_then_keyword_only_options() -> None:
    ours = list(inspect.signature(fastload.DataLoader).parameters.values())
    theirs = list(inspect.signature(TorchDataLoader).parameters.values())
    assert ours[: len(theirs)] == theirs  # names, order, defaults, kinds, annotations
    extra = ours[len(theirs) :]
    # fastload's options, in the order of their one definition, then the deprecated names
    # (kept in the signature: frameworks that rebuild a loader pass back what it was given)
    assert [p.name for p in extra] == [*options.NAMES, *options.DEPRECATED]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra)
    assert {p.name: p.default for p in extra if p.name in options.NAMES} == {
        f.name: f.default for f in dataclasses.fields(options.LoaderOptions)
    }


def test_fastload_options_cannot_be_positional() -> None:
    n_positional = sum(
        p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        for p in inspect.signature(TorchDataLoader).parameters.values()
    )
    args = [Squares(), 1, None, None, None, 0, None, False, False, 0, None, None, None]
    assert len(args) == n_positional
    with pytest.raises(TypeError):
        TorchDataLoader(*args, "cpu")
    with pytest.raises(TypeError):
        fastload.DataLoader(*args, "cpu")


# ---------------------------------------------------------------- scenarios: batches and order


@scenario
def sequential_batches(DL):
    return list(DL(Squares(10), batch_size=3))


@scenario
def default_batch_size_is_one(DL):
    return list(DL(Squares(4)))


@scenario
def positional_arguments(DL):
    return list(DL(Squares(7), 2, False, None, None, 0, None, False, True))


@scenario
def dataset_keyword_only_call(DL):
    return list(DL(dataset=Squares(5), batch_size=2))


@scenario
def plain_list_dataset(DL):
    return list(DL([1, 2, 3, 4, 5], batch_size=2))


@scenario
def shuffle_with_generator(DL):
    g = torch.Generator().manual_seed(1234)
    return list(DL(Squares(20), batch_size=4, shuffle=True, generator=g))


@scenario
def shuffle_with_global_seed(DL):
    torch.manual_seed(99)
    return list(DL(Squares(20), batch_size=4, shuffle=True))


@scenario
def generator_draws_one_int64_per_iter(DL):
    g = torch.Generator().manual_seed(7)
    loader = DL(Squares(6), batch_size=2, generator=g)
    states = []
    for _ in range(3):
        iter(loader)
        states.append(g.get_state())
    return states


@scenario
def generator_state_after_shuffled_epoch(DL):
    g = torch.Generator().manual_seed(7)
    list(DL(Squares(9), batch_size=2, shuffle=True, generator=g))
    return g.get_state()


@scenario
def reshuffles_every_epoch(DL):
    g = torch.Generator().manual_seed(5)
    loader = DL(Squares(12), batch_size=5, shuffle=True, generator=g)
    return [list(loader) for _ in range(3)]


@scenario
def drop_last(DL):
    return list(DL(Squares(10), batch_size=4, drop_last=True))


@scenario
def no_auto_batching(DL):
    return list(DL(Squares(4), batch_size=None))


@scenario
def custom_sampler(DL):
    return list(DL(Squares(6), batch_size=2, sampler=[5, 0, 3, 3, 1]))


@scenario
def custom_batch_sampler(DL):
    return list(DL(Squares(6), batch_sampler=[[0, 1], [5, 2, 3], [4]]))


@scenario
def custom_collate_fn(DL):
    return list(DL(Squares(7), batch_size=3, collate_fn=lambda batch: [len(batch), batch[-1][1]]))


@scenario
def default_collate_nested(DL):
    return list(DL(Nested(), batch_size=4))


@scenario
def default_convert_without_batching(DL):
    return list(DL(Nested(), batch_size=None))


@scenario
def break_then_new_epoch(DL):
    loader = DL(Squares(10), batch_size=2, num_workers=2)
    first = []
    for i, batch in enumerate(loader):
        first.append(batch)
        if i == 1:
            break
    return first, list(loader)


# ---------------------------------------------------------------- scenarios: len


@scenario
def len_map_style(DL):
    return [len(DL(Squares(10), batch_size=3)), len(DL(Squares(10), batch_size=3, drop_last=True))]


@scenario
def len_without_batching(DL):
    return len(DL(Squares(10), batch_size=None))


@scenario
def len_iterable_dataset(DL):
    ds = SizedIterable(10, 10)
    return [len(DL(ds, batch_size=3)), len(DL(ds, batch_size=3, drop_last=True))]


@scenario
def len_of_iterator(DL):
    it = iter(DL(Squares(10), batch_size=4))
    next(it)
    return len(it)


@scenario
def iterable_longer_than_reported_warns(DL):
    loader = DL(SizedIterable(3, 5), batch_size=None)
    len(loader)
    return list(loader)


# ---------------------------------------------------------------- scenarios: workers


@scenario
def workers_same_batches(DL):
    g = torch.Generator().manual_seed(3)
    return list(DL(Squares(23), batch_size=3, shuffle=True, num_workers=2, generator=g))


@scenario
def worker_initial_seed(DL):
    g = torch.Generator().manual_seed(11)
    return [
        s["initial_seed"] for s in DL(RandomProbe(), batch_size=None, num_workers=2, generator=g)
    ]


@scenario
def worker_torch_random(DL):
    g = torch.Generator().manual_seed(11)
    return [s["torch"] for s in DL(RandomProbe(), batch_size=None, num_workers=2, generator=g)]


@scenario
def worker_numpy_random(DL):
    g = torch.Generator().manual_seed(11)
    return [s["numpy"] for s in DL(RandomProbe(), batch_size=None, num_workers=2, generator=g)]


@scenario
def worker_python_random(DL):
    g = torch.Generator().manual_seed(11)
    return [s["python"] for s in DL(RandomProbe(), batch_size=None, num_workers=2, generator=g)]


@scenario
def worker_info_fields(DL):
    g = torch.Generator().manual_seed(11)
    return [s["worker"] for s in DL(RandomProbe(), batch_size=None, num_workers=3, generator=g)]


@scenario
def worker_info_is_none_in_main_process(DL):
    return [s["worker"] for s in DL(RandomProbe(), batch_size=None)]


@scenario
def worker_init_fn_runs_in_each_worker(DL):
    g = torch.Generator().manual_seed(2)
    loader = DL(
        RandomProbe(), batch_size=None, num_workers=2, worker_init_fn=_mark_worker, generator=g
    )
    return [s["mark"] for s in loader]


@scenario
def iterable_sharded_by_worker_info(DL):
    return list(DL(Sharded(11), batch_size=2, num_workers=2))


@scenario
def iterable_unsharded_is_duplicated(DL):
    return list(DL(Numbers(5), batch_size=2, num_workers=2))


@scenario
def workers_are_separate_processes(DL):
    pids = {int(p) for batch in DL(Pid(), batch_size=2, num_workers=2) for p in batch}
    return len(pids), os.getpid() in pids


@scenario
def workers_never_initialise_cuda(DL):
    return list(DL(CudaProbe(), batch_size=None, num_workers=2))


@scenario
def persistent_workers_are_reused(DL):
    loader = DL(Pid(), batch_size=2, num_workers=2, persistent_workers=True)
    first = {int(p) for batch in loader for p in batch}
    second = {int(p) for batch in loader for p in batch}
    return len(first), first == second


@scenario
def persistent_workers_epochs(DL):
    g = torch.Generator().manual_seed(4)
    loader = DL(
        Squares(9), batch_size=2, shuffle=True, num_workers=2, persistent_workers=True, generator=g
    )
    return [list(loader) for _ in range(3)]


@scenario
def prefetch_factor_one(DL):
    return list(DL(Squares(9), batch_size=2, num_workers=2, prefetch_factor=1))


@scenario
def out_of_order_delivery_same_content(DL):
    loader = DL(Squares(12), batch_size=2, num_workers=2, in_order=False)
    return sorted(int(i) for _, idx in loader for i in idx)


@scenario
def spawn_context(DL):
    return list(DL(Squares(6), batch_size=2, num_workers=1, multiprocessing_context="spawn"))


@scenario
def timeout_met(DL):
    return list(DL(Squares(6), batch_size=2, num_workers=2, timeout=30))


@scenario
def timeout_exceeded(DL):
    return list(DL(Slow(), batch_size=None, num_workers=1, timeout=0.3))


@scenario
def worker_exception_reraised_with_traceback(DL):
    try:
        list(DL(Failing(), batch_size=2, num_workers=2))
    except ValueError as exc:
        text = str(exc)
        return (
            "Caught ValueError in DataLoader worker process" in text,
            "Original Traceback" in text,
            "__getitem__" in text,
            "sample 3 is broken" in text,
        )
    return "no error"


@scenario
def main_process_exception(DL):
    return list(DL(Failing(), batch_size=2))


@scenario
def killed_worker_raises(DL):
    # torch words this two ways, depending on whether its SIGCHLD handler or its status poll
    # notices first; either way it is a RuntimeError that names the worker, not a hang.
    try:
        list(DL(KillsItsWorker(), batch_size=None, num_workers=2))
    except RuntimeError as exc:
        text = str(exc)
        return "DataLoader worker (pid" in text and ("killed by signal" in text or "exited" in text)
    return "no error"


@scenario
def pin_memory_without_accelerator(DL):
    return [
        (b[0].is_pinned(), b[1].is_pinned()) for b in DL(Squares(4), batch_size=2, pin_memory=True)
    ]


@scenario
def too_many_workers_warns(DL):
    return DL(Squares(4), batch_size=2, num_workers=64).num_workers


# ---------------------------------------------------------------- scenarios: attributes


@scenario
def attributes_after_init(DL):
    loader = DL(Squares(5), batch_size=2, shuffle=True, num_workers=1, timeout=3)
    return {
        "sampler": type(loader.sampler).__name__,
        "batch_sampler": type(loader.batch_sampler).__name__,
        "collate_fn": loader.collate_fn.__name__,
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "persistent_workers": loader.persistent_workers,
        "multiprocessing_context": loader.multiprocessing_context,
        "in_order": getattr(loader, "in_order", None),
    }


@scenario
def attributes_without_batching(DL):
    loader = DL(Squares(5), batch_size=None)
    return (
        type(loader.sampler).__name__,
        loader.batch_sampler,
        loader.collate_fn.__name__,
        loader.prefetch_factor,
    )


@scenario
def set_batch_size_after_init(DL):
    DL(Squares(5)).batch_size = 4


@scenario
def set_other_attribute_after_init(DL):
    loader = DL(Squares(5))
    loader.timeout = 3
    return loader.timeout


# ---------------------------------------------------------------- scenarios: bad arguments


@scenario
def err_negative_num_workers(DL):
    DL(Squares(), num_workers=-1)


@scenario
def err_negative_timeout(DL):
    DL(Squares(), timeout=-1)


@scenario
def err_prefetch_factor_without_workers(DL):
    DL(Squares(), prefetch_factor=2)


@scenario
def err_negative_prefetch_factor(DL):
    DL(Squares(), num_workers=1, prefetch_factor=-1)


@scenario
def err_persistent_without_workers(DL):
    DL(Squares(), persistent_workers=True)


@scenario
def err_batch_sampler_with_batch_size(DL):
    DL(Squares(), batch_size=2, batch_sampler=[[0, 1]])


@scenario
def err_batch_sampler_with_shuffle(DL):
    DL(Squares(), batch_size=1, shuffle=True, batch_sampler=[[0, 1]])


@scenario
def err_sampler_with_shuffle(DL):
    DL(Squares(), shuffle=True, sampler=[0, 1])


@scenario
def err_drop_last_without_batching(DL):
    DL(Squares(), batch_size=None, drop_last=True)


@scenario
def err_shuffle_on_iterable(DL):
    DL(Numbers(), shuffle=True)


@scenario
def err_sampler_on_iterable(DL):
    DL(Numbers(), sampler=[0, 1])


@scenario
def err_batch_sampler_on_iterable(DL):
    DL(Numbers(), batch_size=None, batch_sampler=[[0, 1]])


@scenario
def err_unknown_start_method(DL):
    DL(Squares(), num_workers=1, multiprocessing_context="teleport")


@scenario
def err_context_without_workers(DL):
    DL(Squares(), multiprocessing_context="fork")


@scenario
def err_context_of_wrong_type(DL):
    DL(Squares(), num_workers=1, multiprocessing_context=42)


@scenario
def err_zero_batch_size(DL):
    DL(Squares(), batch_size=0)


@scenario
def err_batch_size_not_int(DL):
    DL(Squares(), batch_size="4")


@scenario
def err_unknown_keyword(DL):
    DL(Squares(), batch_sise=4)


@scenario
def err_too_many_positional(DL):
    DL(Squares(), 1, None, None, None, 0, None, False, False, 0, None, None, None, 2)


@scenario
def err_missing_dataset(DL):
    DL(batch_size=2)


def _generic_user(loader: TorchDataLoader[list[torch.Tensor]]) -> int:
    return len(loader)


@scenario
def generic_type_parameter(DL):
    cls = getattr(DL, "func", DL)  # the device="cpu" variant is a partial of the class
    alias = cls[list[torch.Tensor]]
    hints = typing.get_type_hints(_generic_user, localns={"TorchDataLoader": cls})
    loader = alias(Squares(), batch_size=4)
    return (
        typing.get_origin(alias) is cls,
        typing.get_args(alias),
        typing.get_origin(hints["loader"]) is cls,
        [b for b in loader],
    )


# ---------------------------------------------------------------- the check (after every
# scenario is registered)

_ORACLE: dict[str, Any] = {}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_torch(name: str, variant: str) -> None:
    fn = SCENARIOS[name]
    if name not in _ORACLE:
        _ORACLE[name] = _outcome(fn, TorchDataLoader)
    assert _outcome(fn, VARIANTS[variant]) == _ORACLE[name]
