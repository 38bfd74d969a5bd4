"""Check a dataset folder before a long training run: what will not decode, or decode oddly
(:func:`scan`, every file decoded), and which files are no image at all (:func:`unreadable_files`,
their first bytes sniffed: what bench and autotune leave out before measuring)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastload import backends
from fastload.backends.files import read_file
from fastload.pixels.image import is_truncated_jpeg, probe, sniff
from fastload.system import cpu_cores

__all__ = [
    "KINDS",
    "ScanFinding",
    "ScanReport",
    "scan",
    "scan_data",
    "scan_file",
    "unreadable_files",
]

KINDS = {
    "unreadable": "cannot be decoded at all (empty, corrupt, not an image)",
    "truncated": "the file ends early: a decoder would fill the rest grey",
    "oversized": "the header claims more pixels than max_pixels: refused before decoding",
    "wrong_extension": "the content's format is not the one the name says",
    "cmyk": "CMYK/YCCK colour: converted to RGB, slower, colours may differ between tools",
    "grayscale": "one colour channel: converted to 3-channel RGB",
}

_EXTENSIONS = {
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".jpe": "jpeg",
    ".png": "png",
    ".webp": "webp",
    ".bmp": "bmp",
    ".gif": "gif",
    ".tif": "tiff",
    ".tiff": "tiff",
}


@dataclass(frozen=True)
class ScanFinding:
    """One problem with one file."""

    path: str
    kind: str
    detail: str


@dataclass
class ScanReport:
    """What a scan found: how many files it read and the problems, worst first."""

    root: str
    files: int
    findings: list[ScanFinding] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Problems per kind, every kind listed."""
        found = Counter(f.kind for f in self.findings)
        return {kind: found.get(kind, 0) for kind in KINDS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "files": self.files,
            "counts": self.counts,
            "findings": [asdict(f) for f in self.findings],
        }


def scan_file(path: str, *, max_pixels: int, backend: backends.Backend) -> list[ScanFinding]:
    """Every problem with one file (an empty list when it is fine)."""
    try:
        data = read_file(path)
    except OSError as exc:
        return [ScanFinding(path, "unreadable", f"cannot read the file: {exc}")]
    return scan_data(path, data, max_pixels=max_pixels, backend=backend)


def scan_data(
    path: str, data: bytes, *, max_pixels: int, backend: backends.Backend
) -> list[ScanFinding]:
    """Every problem with one file's bytes, ``path`` naming it (a file, or a shard member)."""
    if not data:
        return [ScanFinding(path, "unreadable", "empty file")]
    info = probe(data)
    findings = []
    named = _EXTENSIONS.get(Path(path).suffix.lower())
    if info.format != "unknown" and named is not None and named != info.format:
        findings.append(
            ScanFinding(
                path, "wrong_extension", f"named {Path(path).suffix}, content is {info.format}"
            )
        )
    if info.pixels is not None and info.pixels > max_pixels:
        detail = f"{info.width} x {info.height} = {info.pixels:,} pixels > {max_pixels:,}"
        return [*findings, ScanFinding(path, "oversized", detail)]
    mode = _colour(info, data)
    if mode == "cmyk":
        findings.append(
            ScanFinding(path, "cmyk", "4-component JPEG" if info.format == "jpeg" else "CMYK")
        )
    elif mode == "grayscale":
        findings.append(ScanFinding(path, "grayscale", f"{info.format}, one channel"))
    try:
        backend.decode(data, max_pixels=max_pixels)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        findings.append(ScanFinding(path, _failure_kind(info, data, reason), reason))
    return findings


def _failure_kind(info: Any, data: bytes, reason: str) -> str:
    if info.format == "jpeg":
        # a frame header that parses, but no end-of-image marker: the file was cut short
        cut = info.pixels is not None and is_truncated_jpeg(data)
        return "truncated" if cut else "unreadable"
    return "truncated" if "truncated" in reason.lower() else "unreadable"


def _colour(info: Any, data: bytes) -> str | None:
    if info.format == "jpeg":
        return {1: "grayscale", 4: "cmyk"}.get(info.components)
    if info.format == "png":
        return "grayscale" if info.components in (1, 2) and _png_is_grey(data) else None
    if info.format in ("unknown",):
        return None
    try:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            if image.mode in ("CMYK", "YCbCr;K"):
                return "cmyk"
            if image.mode in ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"):
                return "grayscale"
    except Exception:
        return None  # the decode step reports it
    return None


def _png_is_grey(data: bytes) -> bool:
    return len(data) > 25 and data[25] in (0, 4)  # colour type: grey, grey + alpha


def image_files(root: str | os.PathLike[str]) -> list[str]:
    """Files under ``root`` with an image extension (those an ImageFolder would load), sorted."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    found: list[str] = []
    for folder, _, names in os.walk(root, followlinks=True):
        found.extend(os.path.join(folder, n) for n in names if n.lower().endswith(IMG_EXTENSIONS))
    return sorted(found)


_WORKER: dict[str, Any] = {}


def _init_worker(backend: str, max_pixels: int, shards: Any = None) -> None:
    _WORKER["backend"] = backends.create(backend)
    _WORKER["max_pixels"] = max_pixels
    _WORKER["shards"] = shards


def _init_pool_worker(backend: str, max_pixels: int, shards: Any = None) -> None:
    # the pool ends its workers with SIGTERM; a forked worker inherits the parent's handler
    # (ray.init installs one), which runs only once the worker runs Python again: a scan hung
    # at the pool's terminate in CI, in a test process where Ray had run. The default action
    # ends a worker wherever it waits
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _init_worker(backend, max_pixels, shards)


def _scan_one(item: Any) -> list[ScanFinding]:
    options = {"max_pixels": _WORKER["max_pixels"], "backend": _WORKER["backend"]}
    shards = _WORKER["shards"]
    if shards is None:
        return scan_file(str(item), **options)
    name = shards.path(item)
    try:
        data = shards.read_sample(item)[0]
    except Exception as exc:  # a member cut short, an index that no longer fits, no label
        return [ScanFinding(name, "unreadable", str(exc))]
    return scan_data(name, data, **options)


def _shard_items(root: str | os.PathLike[str]) -> tuple[Any, list[int], list[ScanFinding]]:
    """The shards as a dataset, its sample numbers, and what its construction left out."""
    import warnings

    from fastload.shards.dataset import ImageShards

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what was left out is reported as findings
        shards = ImageShards(root, on_error="skip", target=None)  # the images are checked
    lost = [ScanFinding(where, "unreadable", why) for where, why in shards.bad_files.items()]
    return shards, list(range(len(shards))), lost


def scan(
    root: str | os.PathLike[str],
    *,
    workers: int | None = None,
    backend: str = "auto",
    max_pixels: int = backends.DEFAULT_MAX_PIXELS,
    progress: Callable[[int, int], None] | None = None,
) -> ScanReport:
    """Check every image file under ``root``, or every sample's image in shards, in parallel.

    Args:
        root: The dataset folder, or shards (see :class:`fastload.ImageShards`).
        workers: Processes to use (default: one per core; 0 or 1 scans in this process).
        backend: The decoder to try each file with, as training would.
        max_pixels: The limit above which a file is reported as oversized.
        progress: Called as ``progress(done, total)`` while scanning.

    Returns:
        The report; findings sorted by kind (worst first), then path.

    Raises:
        NotADirectoryError: ``root`` is neither a folder nor shards.
    """
    from fastload.shards.sources import is_shards

    shards: Any = None
    lost: list[ScanFinding] = []
    items: list[Any]
    if is_shards(root):  # each sample's image member, named SHARD:MEMBER
        shards, items, lost = _shard_items(root)
    elif os.path.isdir(root):
        items = image_files(root)
    else:
        raise NotADirectoryError(f"{os.fspath(root)!r} is not a folder or shards")
    resolved = backends.resolve(backend)
    if workers is None:
        workers = cpu_cores()
    results: Iterable[list[ScanFinding]]
    findings: list[ScanFinding] = list(lost)
    if workers <= 1 or len(items) < 64:
        _init_worker(resolved, max_pixels, shards)
        results = map(_scan_one, items)
        findings += _collect(results, len(items), progress)
    else:
        with multiprocessing.get_context("spawn" if os.name == "nt" else "fork").Pool(
            workers, initializer=_init_pool_worker, initargs=(resolved, max_pixels, shards)
        ) as pool:
            results = pool.imap_unordered(_scan_one, items, chunksize=16)
            findings += _collect(results, len(items), progress)
    order = list(KINDS)
    findings.sort(key=lambda f: (order.index(f.kind), f.path))
    return ScanReport(os.fspath(root), len(items), findings)


def _collect(
    results: Iterable[list[ScanFinding]], total: int, progress: Callable[[int, int], None] | None
) -> list[ScanFinding]:
    findings: list[ScanFinding] = []
    for done, found in enumerate(results, 1):
        findings.extend(found)
        if progress is not None:
            progress(done, total)
    return findings


MAGIC_BYTES = 64  # enough for every format's signature: a file is opened, not read


def unreadable_files(
    root: str | Path, *, progress: Callable[..., None] | None = None
) -> tuple[int, list[str]]:
    """How many image files a class-folder set holds (torchvision's ImageFolder rules), and
    those whose first bytes are no image format's signature (empty files, an HTML error page
    saved as .jpg, files that cannot be opened). Only the first 64 bytes of each file are
    read: anything broken further in is found when it is decoded.

    Raises:
        ValueError: ``root`` holds no class folder with an image file.
    """
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    try:
        _, class_to_idx = find_classes(os.fspath(root))
        found = make_dataset(os.fspath(root), class_to_idx, IMG_EXTENSIONS)
    except FileNotFoundError:
        found = []
    if not found:
        raise ValueError(
            f"no image files found in {os.fspath(root)!r}: bench and autotune read "
            "DIR/<class>/<image> files (torchvision's ImageFolder layout)"
        )
    bad = []
    for k, (path, _) in enumerate(found):
        try:
            with open(path, "rb") as f:
                if sniff(f.read(MAGIC_BYTES)) == "unknown":
                    bad.append(path)
        except OSError:
            bad.append(path)
        if progress is not None and k % 1000 == 999:  # a small set is checked in a blink
            progress(k + 1, len(found))
    return len(found), bad
