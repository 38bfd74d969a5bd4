"""The documentation site builds with warnings as errors, its API reference covers every public
name, and the README stays short with links that lead somewhere."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastload

ROOT = Path(__file__).resolve().parents[2]
# every module whose __all__ is public API, as the reference documents it
PUBLIC = [
    "fastload",
    "fastload.autotune",
    "fastload.backends",
    "fastload.gpu",
    "fastload.train",
    "fastload.transforms",
    "fastload.integrations.hf_accelerate",
    "fastload.integrations.open_clip",
    "fastload.testing",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from scratch as CI builds it: broken references and links to missing
    pages are warnings, and warnings fail the build."""
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html"]
    command += ["-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    return out / "html"


def documented(site: Path) -> set[str]:
    """Every Python object the built reference has a target for."""
    from sphinx.util.inventory import InventoryFile

    with (site / "objects.inv").open("rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    items = inventory.data.items() if hasattr(inventory, "data") else inventory.items()
    return {name for role, entries in items if role.startswith("py:") for name in entries}


def test_the_site_builds_every_page(site: Path) -> None:
    pages = {p.stem for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"}
    built = {p.stem for p in site.glob("*.html")}
    assert pages <= built
    benchmarks = (site / "benchmarks.html").read_text()
    results = sorted((ROOT / "docs" / "benchmarks" / "results").glob("*.json"))
    assert results, "no benchmark figures to plot"
    for result in results:  # each benchmark's JSON shows as its plot and its table
        assert f"{result.stem}.png" in benchmarks
        assert (site / "_images" / f"{result.stem}.png").exists()


def test_the_api_reference_covers_every_public_name(site: Path) -> None:
    names = documented(site)
    missing = []
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name.startswith("__"):
                continue
            value = getattr(module, name)
            # a name re-exported from fastload itself is documented there, once
            elsewhere = getattr(fastload, name, None) is value and f"fastload.{name}" in names
            if f"{module_name}.{name}" not in names and not elsewhere:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names without a reference entry: {missing}"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST (``myst_heading_anchors``) make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#+ (.*)", line)
        if heading and not fenced:
            found.add(slug(heading[1]))
    return found


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 300
    links = re.findall(r"\]\(([^)\s]+)\)", readme.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else readme
        assert target.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in anchors(target), f"README links to {link}: no such heading"


def test_the_loader_page_lists_every_option_of_the_loader() -> None:
    from fastload.options import NAMES

    page = (ROOT / "docs" / "loader.md").read_text()
    section = page.split("## fastload's own options", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert listed == list(NAMES)


def test_slugs_are_githubs() -> None:
    assert slug("Shards against a folder and webdataset's loader") == (
        "shards-against-a-folder-and-webdatasets-loader"
    )
    assert slug('Workers as threads: `worker_type="thread"`') == (
        "workers-as-threads-worker_typethread"
    )
