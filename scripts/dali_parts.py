"""DALI's CUDA 13 wheels to the GPU machine in parts, one device call each.

``nvidia-dali-cuda130`` alone is 199 MB and a device call carries at most 64 MiB, but the GPU
machine stays warm between calls that follow each other closely and keeps ``/tmp``. So:

* ``--fetch-dali DIR`` (where the registry is reachable): download DALI's wheels (no
  dependencies: the GPU machine has torch and numpy), pack them into one tar, and cut it into
  parts of at most 56 MB (``dali.part000``, ...) with ``dali.manifest.json`` (each part's and
  the whole tar's SHA-256);
* ``--dali-part PART`` on the GPU machine, one call per part, each carrying that part and the
  manifest: the part is checked and kept under ``/tmp/fastload-dali``; it prints what is
  still missing;
* ``--dali-finish OUTDIR``, the call after the last part: the parts are joined and checked,
  the wheels installed into a temporary folder, and DALI's GPU tests and bench rows run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PART_MB = 56
STORE = Path(tempfile.gettempdir()) / "fastload-dali"
MANIFEST = "dali.manifest.json"
# DALI 2.4 for CUDA 13 and the libraries it loads; its pure-Python dependencies besides
DALI_WHEELS = [
    "nvidia-dali-cuda130==2.4.0",
    "nvidia-libnvcomp-cu13",
    "nvidia-nvjpeg2k-cu13",
    "nvidia-nvtiff-cu13",
    "astunparse>=1.6",
    "gast>=0.3.3",
    "dm-tree",
    "six",
]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split(files: list[Path], folder: Path, *, part_bytes: int = PART_MB << 20) -> dict:
    """Pack ``files`` into one tar in ``folder`` and cut it into parts; returns the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    whole = folder / "dali.tar"
    with tarfile.open(whole, "w") as tar:
        for file in files:
            tar.add(file, arcname=file.name)
    parts = []
    with whole.open("rb") as f:
        for index, block in enumerate(iter(lambda: f.read(part_bytes), b"")):
            part = folder / f"dali.part{index:03d}"
            part.write_bytes(block)
            parts.append({"name": part.name, "sha256": sha256(part), "bytes": len(block)})
    manifest = {"whole": sha256(whole), "parts": parts, "files": [f.name for f in files]}
    whole.unlink()
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def fetch(folder: Path, platform_args: list[str]) -> int:
    """Download DALI's wheels for CPython 3.12 and cut them into parts in ``folder``."""
    download = Path(tempfile.mkdtemp(prefix="fastload-dali-wheels-"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", *platform_args]
    status = subprocess.run([*command, "-d", str(download), *DALI_WHEELS]).returncode
    files = sorted(download.glob("*.whl"))
    if status != 0 or not files:
        print("gpu_check: the DALI wheels did not download", file=sys.stderr)
        return 1
    manifest = split(files, folder)
    shutil.rmtree(download)
    size = sum(p["bytes"] for p in manifest["parts"]) / 2**20
    print(
        f"gpu_check: {len(files)} wheels, {size:.0f} MB in {len(manifest['parts'])} parts in "
        f"{folder}; on the GPU machine, one call per part (carry it and {MANIFEST}):"
    )
    for part in manifest["parts"]:
        print(f"  bash scripts/gpu_check.sh --dali-part {folder / part['name']}")
    print("then: bash scripts/gpu_check.sh --wheels WHEELDIR --dali-finish $OUT/dali")
    return 0


def keep_part(part: Path, *, store: Path = STORE) -> int:
    """Check one part against the manifest beside it and keep it in ``store``."""
    manifest = json.loads((part.parent / MANIFEST).read_text())
    known = {p["name"]: p for p in manifest["parts"]}
    if part.name not in known:
        print(f"gpu_check: {part.name} is not a part of {MANIFEST}", file=sys.stderr)
        return 1
    if sha256(part) != known[part.name]["sha256"]:
        print(f"gpu_check: {part.name} does not match its checksum", file=sys.stderr)
        return 1
    if store.exists() and json.loads((store / MANIFEST).read_text())["whole"] != manifest["whole"]:
        shutil.rmtree(store)  # parts of another download: start again
    store.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(part.parent / MANIFEST, store / MANIFEST)
    shutil.copyfile(part, store / part.name)
    missing = [name for name in known if not (store / name).exists()]
    print(
        f"gpu_check: kept {part.name}; "
        + (f"still missing {', '.join(missing)}" if missing else "all parts here: --dali-finish")
    )
    return 0


def assemble(*, store: Path = STORE) -> Path:
    """Join the kept parts, check the whole, unpack the wheels; returns their folder.

    Raises:
        SystemExit: A part is missing (named) or the joined tar does not match the manifest.
    """
    if not (store / MANIFEST).exists():
        raise SystemExit(f"gpu_check: no DALI parts in {store}: run --dali-part for each first")
    manifest = json.loads((store / MANIFEST).read_text())
    missing = [p["name"] for p in manifest["parts"] if not (store / p["name"]).exists()]
    if missing:
        raise SystemExit(f"gpu_check: DALI parts missing in {store}: {', '.join(missing)}")
    whole = store / "dali.tar"
    with whole.open("wb") as out:
        for part in manifest["parts"]:
            out.write((store / part["name"]).read_bytes())
    if sha256(whole) != manifest["whole"]:
        raise SystemExit("gpu_check: the joined DALI parts do not match the manifest")
    wheels = store / "wheels"
    with tarfile.open(whole) as tar:
        tar.extractall(wheels, filter="data")
    whole.unlink()
    return wheels
