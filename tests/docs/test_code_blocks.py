"""Every Python code block in README.md and docs/ runs, page by page, on a small image set.

A page's blocks run in order in one namespace, in a fresh interpreter whose working folder holds
``data/train`` and ``data/val`` (class folders of JPEGs), after ``snippet_setup.py`` (the names
a fragment takes as given: ``dataset``, ``model``, ``optimizer``, ...). A block whose info
string carries ``gpu`` (needs CUDA) or ``network`` (needs the internet) is compiled, not run;
on a machine with CUDA the ``gpu`` ones run too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fastload.synthetic import make_image_folder

ROOT = Path(__file__).resolve().parents[2]
SETUP = Path(__file__).with_name("snippet_setup.py")
COMPILE_ONLY = ("gpu", "network")
PYTHON = ("python", "py", "python3")


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts (1-based line of its first code line) and why it
    is only compiled, if it is."""

    page: Path
    line: int
    source: str
    flags: tuple[str, ...]

    @property
    def runs(self) -> bool:
        if "gpu" in self.flags and torch.cuda.is_available():
            return "network" not in self.flags
        return not any(flag in COMPILE_ONLY for flag in self.flags)


def pages() -> list[Path]:
    docs = ROOT / "docs"
    found = [p for p in docs.rglob("*.md") if not {"_build", "_generated"} & set(p.parts)]
    return [ROOT / "README.md", *sorted(found)]


def blocks(page: Path) -> list[Block]:
    """The page's Python fences, as markdown-it (MyST's parser) finds them."""
    from markdown_it import MarkdownIt

    out = []
    for token in MarkdownIt("commonmark").parse(page.read_text()):
        words = token.info.split()
        if token.type != "fence" or not words or words[0] not in PYTHON:
            continue
        assert token.map is not None
        out.append(Block(page, token.map[0] + 2, token.content, tuple(words[1:])))
    return out


# Runs in the child: each block compiled under its page and line, so a traceback points there.
RUNNER = """
import json, sys
ns = {"__name__": "__main__"}
setup = sys.argv[1]
exec(compile(open(setup).read(), setup, "exec"), ns)
for page, line, source in json.load(sys.stdin):
    code = compile("\\n" * (line - 1) + source, page, "exec")
    exec(code, ns)
"""


@pytest.fixture(scope="module")
def snippet_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("snippet-data")
    make_image_folder(root / "train", images=48, classes=2)
    make_image_folder(root / "val", images=16, classes=2, seed=1)
    return root


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_of_the_page_compiles_and_runs(
    page: Path, snippet_data: Path, tmp_path: Path
) -> None:
    """A page's blocks run as a reader runs them, in one process. Over a minute on 2 cores
    where a page trains on Ray Train as written (a local Ray, two trainer processes: README.md,
    docs/ray.md) or runs doctor and autotune (docs/tools.md): what the page shows is what runs."""
    found = blocks(page)
    for block in found:  # every block compiles, the ones that cannot run here included
        compile(block.source, f"{page}:{block.line}", "exec")
    running = [b for b in found if b.runs]
    if not running:
        return
    (tmp_path / "data").symlink_to(snippet_data)
    payload = [[str(b.page), b.line, b.source] for b in running]
    env = {**os.environ, "FASTLOAD_CACHE_DIR": str(tmp_path / "cache"), "PYTHONWARNINGS": ""}
    env["HF_HOME"] = str(tmp_path / "huggingface")  # datasets' cache: the test's own
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(SETUP)],
        input=json.dumps(payload),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_blocks_are_found_with_their_lines_and_flags(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\nx = 1\n```\n\ntext\n\n```python gpu\ny = 2\n```\n\n"
        "```sh\nls\n```\n\n```python\n1 +\n```\n"
    )
    found = blocks(page)
    assert [(b.line, b.flags) for b in found] == [(4, ()), (10, ("gpu",)), (18, ())]
    assert found[1].runs is torch.cuda.is_available()
    with pytest.raises(SyntaxError):  # what the test above does with a broken block
        compile(found[2].source, str(page), "exec")
