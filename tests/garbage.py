"""Garbage that tells which process collected it (for tests of forked processes)."""

from __future__ import annotations

import os
from pathlib import Path


class Finalized:
    """Garbage in a reference cycle whose finalizer writes the pid of the process that
    collects it to ``record``."""

    def __init__(self, record: Path) -> None:
        self.record, self.cycle = record, self

    def __del__(self) -> None:
        with open(self.record, "a") as f:
            f.write(f"{os.getpid()}\n")
