"""Compiling fastload's extensions into the source tree on the GPU machine, which runs fastload
from the tree where nothing is compiled (``scripts/gpu_check.py`` calls these before its parts)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# libjpeg-turbo's library and headers (Debian's packages), for compiling the region backend there.
REGION_DEBS = ["libjpeg62-turbo", "libjpeg62-turbo-dev"]


def build_region(wheels: Path | None, env: dict[str, str]) -> tuple[str, str]:
    """Compile the region backend's extension into the source tree when it does not import.

    The GPU machine runs fastload from the source tree, where nothing is compiled; libjpeg-turbo's
    headers and library come from the .debs ``--fetch`` carries when the machine has none.

    Returns:
        (status, detail) for the summary.
    """
    flags: list[str] = []
    debs = sorted(wheels.glob("libjpeg62-turbo*.deb")) if wheels is not None else []
    if debs and shutil.which("dpkg"):
        unpacked = Path(tempfile.mkdtemp(prefix="fastload-libjpeg-"))
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        flags += [f"-I{d}" for d in sorted({h.parent for h in unpacked.rglob("j*.h")})]
        for folder in sorted({lib.parent for lib in unpacked.rglob("libjpeg.so*")}):
            flags += [f"-L{folder}", f"-Wl,-rpath,{folder}"]
    sources = ["backends/jpegregion.c", "backends/restarts.c"]  # as setup.py builds it
    status, detail = build_extension(
        "fastload.backends._jpegregion", sources, env, [*flags, "-O3", "-ljpeg"]
    )
    if status == "skipped":
        return status, f"{detail}: the region backend is left out"
    if status == "failed" and detail.startswith("built, but"):
        return status, "built, but it does not import (libjpeg.so.62 missing?)"
    if status == "passed" and detail != "already built" and debs:
        detail += " with the carried libjpeg-turbo"
    return status, detail


def build_normalize(env: dict[str, str]) -> tuple[str, str]:
    """Compile the normalize kernel of float32 batches into the source tree when it does not
    import (without it OpenCV normalizes them, at twice the cost)."""
    status, detail = build_extension("fastload.gpu._normalizing", ["gpu/normalizing.c"], env, [])
    return status, f"{detail}: OpenCV normalizes" if status == "skipped" else detail


def build_resize(env: dict[str, str]) -> tuple[str, str]:
    """Compile the resize kernel into the source tree when it does not import (without it torch
    resizes, the same pixels)."""
    status, detail = build_extension(
        "fastload.pixels._resizing", ["pixels/resizing.c"], env, ["-O3"]
    )
    return status, f"{detail}: torch resizes" if status == "skipped" else detail


def build_files(env: dict[str, str]) -> tuple[str, str]:
    """Compile the file reader into the source tree when it does not import (without it ``os``
    reads, the same bytes)."""
    status, detail = build_extension("fastload.backends._files", ["backends/files.c"], env, [])
    return status, f"{detail}: os reads" if status == "skipped" else detail


def build_extension(
    module: str, sources: list[str], env: dict[str, str], flags: list[str]
) -> tuple[str, str]:
    """Compile ``fastload/<source>`` for each of ``sources`` into ``module`` beside the first,
    unless it already imports.

    Returns:
        (status, detail) for the summary.
    """
    probe = [sys.executable, "-c", f"import {module}"]
    if subprocess.run(probe, cwd=ROOT, env=env, capture_output=True).returncode == 0:
        return "passed", "already built"
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if compiler is None:
        return "skipped", "no C compiler"
    if not (Path(include) / "Python.h").is_file():
        return "skipped", f"no Python.h in {include}"
    folder, name = module.removeprefix("fastload.").rpartition(".")[::2]
    target = (
        ROOT
        / "fastload"
        / folder.replace(".", "/")
        / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    )
    command = [compiler, "-shared", "-fPIC", "-O2", "-std=c99", f"-I{include}"]
    paths = [str(ROOT / "fastload" / source) for source in sources]
    built = subprocess.run(
        [*command, *paths, *flags, "-o", str(target)], capture_output=True, text=True
    )
    if built.returncode != 0:
        last = built.stderr.strip().splitlines()[-1:] or [""]
        names = ", ".join(Path(source).name for source in sources)
        return "failed", f"compiling {names}: {last[0][:200]}"
    if subprocess.run(probe, cwd=ROOT, env=env, capture_output=True).returncode != 0:
        target.unlink()
        return "failed", "built, but it does not import"
    return "passed", f"built {target.name}"
