"""What the framework tests share: a folder of JPEGs whose labels are their indices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from images import jpeg_bytes, photo

HERE = Path(__file__).resolve().parent
SAMPLES = 30


@pytest.fixture(scope="session")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 photos, each in a class folder of its own: an ImageFolder's label is the index."""
    root = tmp_path_factory.mktemp("indexed")
    for i in range(SAMPLES):
        (root / f"c{i:02}").mkdir()
        image = photo(48, 40, seed=i)
        (root / f"c{i:02}" / "x.jpg").write_bytes(jpeg_bytes(np.ascontiguousarray(image)))
    return root


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
