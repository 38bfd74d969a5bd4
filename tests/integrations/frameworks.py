"""What the framework tests share: running their scripts and reading what each rank saw.
(Not a conftest.py: the tests folder has one, and two modules named conftest would shadow each
other on import; the ``indexed`` folder they read is a fixture there.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = 30


def run_script(script: str, *args: str, env: dict | None = None, timeout: float = 300) -> None:
    """Run one of this folder's scripts; fail with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def read_ranks(out: Path, ranks: int) -> list[dict]:
    return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(ranks)]
