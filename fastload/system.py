"""What this process runs on: its CPU cores and the load on them, its child processes' CPU
time, the C heap, torch's intra-op threads, its torch.distributed world, and the folder
fastload caches in."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "cache_dir",
    "children_cpu_seconds",
    "cpu_cores",
    "distributed",
    "keep_freed_heap",
    "load_average",
    "single_threaded_ops",
    "trim_heap",
    "world_size",
]


def cpu_cores() -> int:
    """The cores this process may run on (its affinity on Linux, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's load average over the last minute (runnable processes), where the
    system reports one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc's; musl and macOS have none
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Give the free memory of this process's C heap back to the system (glibc's
    ``malloc_trim``), where the C library has it.

    Threads that allocate and free image buffers of many sizes, epoch after epoch (DALI's CPU
    stages), fragment glibc's arenas: the process's RSS creeps up 8-15 % before it levels off.
    Trimming at each epoch's end keeps it within 5 % of the first epoch, for about 6 ms a call
    (``benchmarks/loader/fault_soak.py``, README).

    Returns:
        Whether it ran.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


# the largest block whose freeing raises glibc's thresholds (its DEFAULT_MMAP_THRESHOLD_MAX on
# 64-bit systems, 32 MiB), less room for the block's header and its rounding up to pages
_MMAP_THRESHOLD_MAX = (32 << 20) - (64 << 10)
_M_TRIM_THRESHOLD = -1  # mallopt's parameter (malloc.h)
# the free heap glibc's top may hold before it is given back, per block kept past the maximum:
# the samples of a batch of a few such fields (two views, an image and its mask)
_TRIM_PER_BLOCK = 4
_trim_threshold = 0  # the largest this process set, where it set one


@functools.cache
def _glibc_malloc() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None:
    """glibc's ``malloc``, ``free`` and ``mallopt``, where the process runs on glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc's alone: musl's malloc has no thresholds)
    except (OSError, AttributeError):
        return None
    malloc, free = libc.malloc, libc.free
    malloc.argtypes, malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    free.argtypes, free.restype = [ctypes.c_void_p], None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return malloc, free, mallopt


def keep_freed_heap(nbytes: int) -> bool:
    """Have glibc's malloc keep freed memory for reuse, where it would give it back to the
    system and fault it in again: a block of up to ``nbytes`` (at most 32 MiB), and at the
    heap's top as much as the samples of a batch of a few fields of ``nbytes`` take.

    glibc maps a block past its mmap threshold afresh, and gives the top of its heap back
    once more than twice that threshold is free there; both start low and rise to the size of
    the largest mapped block freed, up to 32 and 64 MiB. A batch made anew each time (torch's
    loader) is such a block, so the samples it is collated from come from the heap, which
    keeps them. A batch kept from batch to batch (:class:`~fastload.memory.buffers.BatchRing`)
    is never freed: the thresholds stay at a sample's size, and in most processes the samples
    freed after each batch go back to the system and are faulted in again, page by page
    (``benchmarks/loader/heap_reuse.py``). One block of ``nbytes`` mapped and freed here
    raises the thresholds as that batch did. Past 32 MiB, where the mmap threshold is then at
    its maximum and the samples of two such fields (two float32 views of 64 x 3 x 224 x 224)
    are more than the top may hold, the top's threshold is set to four times ``nbytes``.

    Returns:
        Whether it ran (glibc's malloc only).
    """
    global _trim_threshold
    heap = _glibc_malloc()
    if heap is None:
        return False
    malloc, free, mallopt = heap
    free(malloc(min(nbytes, _MMAP_THRESHOLD_MAX)))
    trim = _TRIM_PER_BLOCK * nbytes
    if nbytes > _MMAP_THRESHOLD_MAX and trim > _trim_threshold:
        # set after the block above: setting it ends glibc's raising of the mmap threshold,
        # which is at its maximum by now
        mallopt(_M_TRIM_THRESHOLD, min(trim, 2**31 - 1))
        _trim_threshold = trim
    return True


@functools.cache
def _openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch runs its CPU ops' threads with, as loaded in this process."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/lib" in line}
    except OSError:  # no /proc: not Linux
        return None
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith(("libgomp", "libiomp5", "libomp")) and ".so" in name:
            try:
                return ctypes.CDLL(path)  # the library already loaded, not a second copy
            except OSError:
                return None
    return None


def single_threaded_ops() -> bool:
    """Run torch's CPU ops on the calling thread alone, as torch's worker processes do
    (``torch.set_num_threads(1)``), leaving the process's other threads as they are.

    ``torch.set_num_threads`` would also change the count every thread started later begins
    with, the training loop's included. OpenMP keeps the count per thread, so it is set for
    this one only, after torch's own first setting of it in this thread (which would undo it).

    Returns:
        Whether it could be set (``False`` where torch does not run on OpenMP).
    """
    import torch

    torch.get_num_threads()  # torch sets this thread's count once, on first use: first
    runtime = _openmp()
    if runtime is None:
        return False
    runtime.omp_set_num_threads(1)
    return torch.get_num_threads() == 1


def distributed() -> bool:
    """Whether a ``torch.distributed`` process group is initialised."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The number of ranks in the default process group; 1 without one."""
    import torch.distributed as dist

    return dist.get_world_size() if distributed() else 1


def children_cpu_seconds() -> float | None:
    """CPU seconds (user + system) used so far by this process's live child processes.

    Read from ``/proc`` (Linux): ``None`` where it cannot be read. The workers of a torch
    ``DataLoader`` are such children.
    """
    try:
        tick = os.sysconf("SC_CLK_TCK")
        pids: set[str] = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(f.read().split())
    except (OSError, ValueError, AttributeError):
        return None
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def cache_dir() -> Path:
    """Where fastload caches results: ``$FASTLOAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/fastload``,
    else ``~/.cache/fastload``."""
    if os.environ.get("FASTLOAD_CACHE_DIR"):
        return Path(os.environ["FASTLOAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "fastload"
