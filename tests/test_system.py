"""fastload.system: what the process runs on, and handing its free heap back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from heap import PAGES, SAMPLE, SAMPLES, faults_a_batch, glibc_only

from fastload import system

GLIBC = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None


@pytest.mark.skipif(
    not GLIBC or not Path("/proc/self/statm").exists(), reason="glibc's malloc_trim, on Linux"
)
def test_trim_heap_hands_fragmented_free_memory_back() -> None:
    """200 MB of 64 KiB blocks (under glibc's mmap threshold, so on the heap), all freed but
    every 50th: the survivors pin the heap, so without a trim the freed pages stay resident."""
    code = textwrap.dedent(
        """
        import os
        from fastload.system import trim_heap

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        blocks = [bytearray(64 * 1024) for _ in range(3200)]
        kept = blocks[::50]
        del blocks
        before = rss()
        print(trim_heap(), before - rss())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ran, released = done.stdout.split()
    assert ran == "True"
    assert float(released) > 100  # MiB of the 196 freed


@glibc_only
def test_keep_freed_heap_keeps_a_batchs_samples_for_the_next() -> None:
    """Freed, a batch's samples go back to the system and are faulted in again each batch
    (glibc's thresholds at their start), unless the heap was told to keep that much."""
    assert faults_a_batch("None") > PAGES / 2, "glibc keeps freed samples of itself now"
    assert faults_a_batch(f"keep_freed_heap({SAMPLE * SAMPLES})") < PAGES / 20


@glibc_only
def test_keep_freed_heap_keeps_the_samples_of_a_batch_of_two_fields_past_32_mib() -> None:
    """Two float32 views of 64 x 3 x 224 x 224: each view's batch is past glibc's largest mmap
    threshold, and the samples (77 MB) are more than its top may hold free by itself (twice
    that threshold): a batch's worth of the largest block raised, the samples are still
    faulted in again each batch, unless the top was told to keep them."""
    view, samples = 4 * SAMPLE, 2 * SAMPLES  # float32 pictures, two a sample
    pages = view * samples // 4096
    mapped_and_freed = "libc.free(libc.malloc((32 << 20) - (64 << 10)))"  # glibc's own raising
    assert faults_a_batch(mapped_and_freed, sample=view, samples=samples) > pages / 2
    kept = f"keep_freed_heap({view * SAMPLES})"
    assert faults_a_batch(kept, sample=view, samples=samples) < pages / 20


def test_cpu_cores_and_load_average() -> None:
    assert system.cpu_cores() >= 1
    load = system.load_average()
    assert load is None or load >= 0


def test_children_cpu_seconds_counts_a_childs_cpu_time() -> None:
    # the child burns 0.3 s of CPU time (not of wall time: a loaded machine only makes it
    # slower), says so, and waits to be read
    burn = (
        "import sys, time\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n"
        "print('done', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        used = system.children_cpu_seconds()
        assert used is not None and used >= 0.3
    finally:
        child.communicate("")
