"""fastload.DataLoader's own options, and what it leaves behind when iteration stops."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from garbage import Finalized

import fastload


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 4, 4), i, dtype=torch.uint8), i


@pytest.mark.parametrize(
    "device", ["bogus", "mps", "meta", 3.5, True, ["cuda"], "cuda:x"], ids=repr
)
def test_bad_device_shows_the_value_and_the_choices(device: Any) -> None:
    with pytest.raises(ValueError) as info:
        fastload.DataLoader(Squares(), device=device)
    message = str(info.value)
    assert repr(device) in message
    assert "'cpu'" in message and "'cuda'" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, torch.device("cuda")])
def test_cuda_without_cuda_fails_at_construction(device: Any) -> None:
    with pytest.raises(RuntimeError, match=r"needs CUDA.*device='cpu'"):
        fastload.DataLoader(Squares(), device=device)


@pytest.mark.gpu
def test_cuda_index_out_of_range() -> None:
    with pytest.raises(ValueError, match="valid: cuda:0"):
        fastload.DataLoader(Squares(), device=f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("value", [0, -2, 1.5, "2", True, None])
def test_bad_device_prefetch(value: Any) -> None:
    with pytest.raises(ValueError, match=r"device_prefetch=.* must be an int >= 1"):
        fastload.DataLoader(Squares(), device_prefetch=value)


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_cpu_and_none_return_torchs_own_iterator(device: Any) -> None:
    loader = fastload.DataLoader(Squares(), batch_size=8, num_workers=1, device=device)
    it = iter(loader)
    assert isinstance(it, torch.utils.data.dataloader._BaseDataLoaderIter)
    assert len(list(it)) == 5


def test_device_attribute_is_what_was_given_and_the_plan_holds_the_device() -> None:
    # "cuda" stays "cuda": a loader sent to another rank's process resolves it there
    assert fastload.DataLoader(Squares()).device is None
    loader = fastload.DataLoader(Squares(), device="cpu")
    assert loader.device == "cpu" and loader.plan.device == torch.device("cpu")


# ---------------------------------------------------------------- what the loader holds


def _batches(loader: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(3)
    return list(loader)


def _rebuilt_from_attributes(loader: fastload.DataLoader) -> fastload.DataLoader:
    """What a framework that re-instantiates a loader from its attributes passes (Lightning
    reads vars(loader) against the signature; torch's own sampler is made again)."""
    import inspect

    signature = inspect.signature(type(loader))
    given = {
        name: value
        for name, value in vars(loader).items()
        if name in signature.parameters and value is not signature.parameters[name].default
    }
    if type(loader.batch_sampler) is torch.utils.data.BatchSampler:
        given.pop("batch_sampler", None)
    return type(loader)(**given)


def _norm() -> Any:
    return fastload.gpu.Normalize([0.5] * 3, [0.25] * 3)


@pytest.mark.parametrize(
    "options",
    [{}, {"batch_transforms": _norm()}, {"channels_last": True}, {"seeding": "worker"}],
    ids=["plain", "batch ops", "channels_last", "worker seeding"],
)
def test_attributes_hold_what_was_given_so_a_rebuilt_loader_is_the_same(options: dict) -> None:
    ds = Squares()
    loader = fastload.DataLoader(ds, batch_size=8, shuffle=True, **options)
    assert loader.dataset is ds
    assert loader.collate_fn is torch.utils.data.default_collate  # torch's, not a wrapper
    for name, value in options.items():
        assert getattr(loader, name) is value
    again = _rebuilt_from_attributes(loader)
    for (a, la), (b, lb) in zip(_batches(loader), _batches(again), strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)  # nothing applied twice


def test_setting_an_option_after_construction_takes_effect() -> None:
    loader = fastload.DataLoader(Squares(), batch_size=8)
    assert next(iter(loader))[0].dtype == torch.uint8
    loader.batch_transforms = _norm()  # as a framework replaying assignments does
    assert next(iter(loader))[0].dtype == torch.float32


def test_a_new_sampler_is_the_one_read() -> None:
    loader = fastload.DataLoader(Squares(), batch_size=8)
    assert len(loader) == 5
    shard = torch.utils.data.DistributedSampler(Squares(), num_replicas=2, rank=1, shuffle=False)
    rebuilt = type(loader)(Squares(), batch_size=8, sampler=shard)
    assert len(rebuilt) == 3
    assert torch.cat([y for _, y in rebuilt]).tolist() == list(range(1, 40, 2))


def test_a_pickled_loader_is_planned_again_where_it_lands() -> None:
    import pickle

    loader = fastload.DataLoader(Squares(), batch_size=8, batch_transforms=_norm())
    iter(loader)
    copy = pickle.loads(pickle.dumps(loader))
    assert "_delivery" not in vars(copy)  # the path is made again on first use
    for (a, _), (b, _) in zip(_batches(loader), _batches(copy), strict=True):
        assert torch.equal(a, b)


def test_gpu_transforms_is_the_old_name_of_batch_transforms() -> None:
    ops = _norm()
    with pytest.warns(FutureWarning, match="now batch_transforms"):
        loader = fastload.DataLoader(Squares(), batch_size=8, gpu_transforms=ops)
    assert loader.batch_transforms is ops and loader.gpu_transforms is ops
    assert next(iter(loader))[0].dtype == torch.float32
    with pytest.raises(TypeError, match="both given"):
        fastload.DataLoader(Squares(), gpu_transforms=ops, batch_transforms=ops)


@pytest.mark.parametrize("value", ["auto", None])
def test_accelerate_auto_is_the_default_and_none_its_old_spelling(value: Any) -> None:
    loader = fastload.DataLoader(Squares(), accelerate=value)
    assert loader.accelerate == "auto" and not loader.acceleration.accelerated


@pytest.mark.parametrize("value", ["yes", 1, "AUTO"])
def test_bad_accelerate_names_the_choices(value: Any) -> None:
    with pytest.raises(
        ValueError, match=r"accelerate=.* is not valid; valid: 'auto', True, False$"
    ):
        fastload.DataLoader(Squares(), accelerate=value)


# ---------------------------------------------------------------- nothing left behind


def _live_children() -> list[multiprocessing.Process]:
    return multiprocessing.active_children()  # also reaps finished ones


def _wait_for_no_children(timeout: float = 10.0) -> list[multiprocessing.Process]:
    deadline = time.monotonic() + timeout
    while (children := _live_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return children


def _threads_left(before: set[threading.Thread], timeout: float = 10.0) -> set[threading.Thread]:
    """Threads started since ``before`` that are still alive after up to ``timeout`` seconds.

    A closed multiprocessing queue's feeder thread ends shortly after the queue, not with it.
    """
    deadline = time.monotonic() + timeout
    while (left := set(threading.enumerate()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("persistent", [False, True])
def test_breaking_out_and_deleting_leaves_no_worker_or_thread(persistent: bool) -> None:
    gc.collect()  # an earlier test's iterator in a reference cycle may still hold workers
    assert _wait_for_no_children() == []
    threads_before = set(threading.enumerate())
    loader = fastload.DataLoader(
        Squares(), batch_size=2, num_workers=2, persistent_workers=persistent, device="cpu"
    )
    for i, _batch in enumerate(loader):
        if i == 3:
            break
    if not persistent:
        # the epoch's iterator is gone with the loop: its workers must be too
        gc.collect()
        assert _wait_for_no_children() == []
    del loader, _batch
    gc.collect()
    assert _wait_for_no_children() == []
    assert _threads_left(threads_before) == set()  # nothing this loader started


_INTERRUPTED = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    import torch
    import fastload

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 10_000
        def __getitem__(self, i):
            time.sleep(0.05)
            return i

    loader = fastload.DataLoader(Slow(), batch_size=4, num_workers=2, device="cpu")
    for i, batch in enumerate(loader):
        if i == 0:
            pids = [p.pid for p in multiprocessing.active_children()]
            print("WORKERS", *pids, flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status  # a zombie has exited


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ctrl_c_during_iteration_exits_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(_INTERRUPTED)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a job in a terminal
        cwd=Path(__file__).resolve().parents[2],
    )
    line = proc.stdout.readline()
    assert line.startswith("WORKERS"), proc.stderr.read()
    workers = [int(p) for p in line.split()[1:]]
    assert len(workers) == 2
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground group
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the interrupted loader did not exit within 30 s")
    assert proc.returncode != 0
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers), "worker processes outlived an interrupted run"


def test_a_worker_dying_while_its_batch_is_received_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch lets a socket error through when a killed worker's batch is being received
    before the kernel has reaped the worker (seen once in CI): the loader names the worker."""
    loader = fastload.DataLoader(Squares(), batch_size=2, num_workers=2)
    batches = iter(loader)
    next(batches)
    # torch's SIGCHLD handler would raise its own error at the kill: this test is the race
    # where the receiving side notices first
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        victim = multiprocessing.active_children()[0]
        os.kill(victim.pid, signal.SIGKILL)

        def reset(self, timeout=0.0):
            raise ConnectionResetError(104, "Connection reset by peer")

        base = torch.utils.data.dataloader._MultiProcessingDataLoaderIter
        monkeypatch.setattr(base, "_try_get_data", reset)
        with pytest.raises(RuntimeError) as caught:
            for _ in range(len(loader)):
                next(batches)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    message = str(caught.value)
    assert f"DataLoader worker (pid {victim.pid}, killed by signal: SIGKILL)" in message
    assert isinstance(caught.value.__cause__, ConnectionResetError)
    del batches


class Collecting(Squares):
    """Each sample read runs a collection in the worker, as an allocation-heavy one would."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        gc.collect()
        return super().__getitem__(i)


@pytest.fixture(params=[False, True], ids=["nothing frozen", "objects frozen before"])
def frozen_before(request: pytest.FixtureRequest) -> Any:
    """Some environments freeze objects at start (an H200 machine's Python had 375 frozen)."""
    if request.param:
        assert gc.get_freeze_count() == 0, "this test's process froze objects already"
        gc.freeze()
        yield
        gc.unfreeze()
    else:
        yield


@pytest.mark.usefixtures("frozen_before")
def test_workers_do_not_finalize_the_main_process_garbage(tmp_path: Path) -> None:
    """A forked worker must not collect garbage it inherited: a CUDA tensor that the
    prefetcher record_stream'd would record an event there, where CUDA cannot run, and abort
    the worker (seen on an H200)."""
    record = tmp_path / "finalized"
    context = multiprocessing.get_context("fork")
    loader = fastload.DataLoader(
        Collecting(), batch_size=4, num_workers=2, multiprocessing_context=context
    )
    gc.disable()  # the cycle stays uncollected until the workers have started
    try:
        Finalized(record)
        assert [label for _, labels in loader for label in labels.tolist()] == list(range(40))
    finally:
        gc.enable()
    gc.collect()  # the main process still finalizes it, once
    assert record.read_text().split() == [str(os.getpid())]


class CollectorState(torch.utils.data.Dataset):
    """Each sample says whether the worker collects garbage on its own and has objects frozen."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[bool, bool]:
        return gc.isenabled(), gc.get_freeze_count() > 0


@pytest.mark.usefixtures("frozen_before")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_starting_workers_leaves_the_main_process_collector_as_it_was(context: str) -> None:
    """No full collection of the main process's heap at each worker start (it cost ~0.2 s an
    epoch on an H100 machine), what was frozen stays frozen, and the workers collect their
    own garbage as the main process does."""
    frozen = gc.get_freeze_count()
    full: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(os.getpid())

    loader = fastload.DataLoader(
        CollectorState(),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=multiprocessing.get_context(context),
    )
    gc.callbacks.append(note)
    try:
        batches = iter(loader)
    finally:
        gc.callbacks.remove(note)
    assert full == [] and gc.isenabled() and (gc.get_freeze_count() > 0) == (frozen > 0)
    assert [tuple(sample) for sample in batches] == [(True, True)] * 4


def test_torchs_loader_rebound_before_fastloads_import_is_no_trouble(indexed: Path) -> None:
    """A script that rebinds ``torch.utils.data.DataLoader`` to fastload's before fastload's
    loader is imported (as a swap of a script one cannot edit does) still gets a working
    loader, with worker processes."""
    code = textwrap.dedent(
        f"""
        import torch.utils.data
        import fastload
        def swapped(*args, **kwargs):  # fastload's loader first imported when called
            return fastload.DataLoader(*args, accelerate=True, **kwargs)
        torch.utils.data.DataLoader = swapped
        from fastload.datasets import ImageFolder
        from fastload import transforms as T
        dataset = ImageFolder({str(indexed)!r}, T.Resize((16, 16)))
        loader = torch.utils.data.DataLoader(dataset, batch_size=10, num_workers=2)
        print(type(loader).__name__, [tuple(x.shape) for x, _ in loader])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "DataLoader " + str([(10, 3, 16, 16)] * 3)
