"""Sphinx configuration for fastload's documentation site (see docs/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # plots.py

import plots  # noqa: E402

from fastload.version import __version__  # noqa: E402

project = "fastload"
author = "the fastload developers"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_generated", "README.md", "benchmarks/results"]

# "#heading" links inside and between pages, as on GitHub
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields, so dataclass fields are described once

html_theme = "furo"
html_title = f"fastload {release}"


def _plots(app: object) -> None:
    """Draw the benchmark plots and tables from the committed JSON before reading the pages,
    so that every figure on a page is one a benchmark script wrote."""
    plots.render(HERE / "benchmarks" / "results", HERE / "_generated")


def setup(app: object) -> None:
    app.connect("builder-inited", _plots)  # type: ignore[attr-defined]
