"""How often the samples of a batch are faulted in again by glibc's malloc, in a fresh process
(malloc's thresholds are the process's own): the test of ``fastload.system.keep_freed_heap``
and of the batch memory that calls it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

GLIBC = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
glibc_only = pytest.mark.skipif(not GLIBC, reason="glibc's malloc thresholds")

SAMPLE = 3 * 224 * 224  # a uint8 picture: past glibc's first mmap threshold (128 KiB)
SAMPLES = 64
PAGES = SAMPLE * SAMPLES // 4096  # what a batch's samples take


def faults_a_batch(setup: str, *, sample: int = SAMPLE, samples: int = SAMPLES) -> float:
    """The page faults of making a batch's ``samples`` of ``sample`` bytes each (malloc'd,
    written, freed, as a dataset's tensors are) after ``setup`` ran in a fresh process,
    averaged over 20 batches."""
    code = textwrap.dedent(
        f"""
        import ctypes, resource
        import torch
        from fastload.system import keep_freed_heap
        from fastload.memory.buffers import BatchRing
        from fastload.memory.shared_buffers import SlotTable, WorkerRing

        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

        def samples():
            blocks = [libc.malloc({sample}) for _ in range({samples})]
            for block in blocks:
                libc.memset(block, 1, {sample})
            for block in blocks:
                libc.free(block)

        kept = [{setup}]
        samples()  # the first batch maps them afresh, whatever the thresholds
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            samples()
        print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)
