"""The region backend: decodes only the planned crop, with libjpeg-turbo's libjpeg API.

A random crop of a JPEG needs only some of its pixels. The compiled part
(``jpegregion.c``, built when fastload is installed) entropy-decodes the rows above the crop
without turning them into pixels, runs the inverse DCT, upsampling and colour conversion
only for the crop's columns, and stops after its last row, all at the DCT scale the plan
asks for. Inside the region, the pixels are those of a whole decode at the same scale, so its
samples match the turbojpeg backend's.

A JPEG with restart markers on a grid of MCUs (:func:`add_restarts`, which ``fastload.pack``'s
``pixels="seekable"`` applies) is cut before decoding: the intervals around the crop are copied
into a smaller JPEG of their own, so the rows above the crop and the columns beside it are not
even entropy-decoded. The pixels are the same.
"""

from __future__ import annotations

import collections
import importlib
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np

from fastload._optional import Availability, MissingDependencyError, version_of
from fastload.backends.base import Backend, Box, Decoded, Window
from fastload.backends.plans import JpegPlan
from fastload.backends.registry import register
from fastload.memory.stacked import Normalizing
from fastload.transforms.crop_recipes import CropRecipe

__all__ = [
    "EXTENSION",
    "INSTALL",
    "MODES",
    "RegionBackend",
    "add_restarts",
    "require_built",
    "restart_interval",
    "why_not_built",
]

EXTENSION = "fastload.backends._jpegregion"

INSTALL = (
    "install a C compiler and libjpeg-turbo's headers (Debian: apt-get install gcc "
    "libjpeg62-turbo-dev; Ubuntu: libjpeg-turbo8-dev), then reinstall fastload "
    '(pip install --force-reinstall --no-deps "fastload", or bash scripts/install.sh in a '
    "checkout, which installs them as root)"
)

# What the extension reports for each decode (its MODE_* values, in order), counted in
# RegionBackend.counts.
MODES = (
    "region",  # rows above skipped, columns cropped, stopped after the last row
    "progressive",  # the same, but every scan was entropy-decoded first (no skipping there)
    "rows",  # unusual chroma sampling (over 2x): full-width rows from the top, stopped early
    "restarts",  # only the restart intervals around the crop entropy-decoded (add_restarts)
)

_HEADER_DIRS = ("/usr/include", "/usr/local/include")


def _load() -> Any:
    try:
        return importlib.import_module(EXTENSION)
    except ImportError as exc:
        raise MissingDependencyError(
            f"the 'region' backend's compiled part is missing: {why_not_built()}. Fix: {INSTALL}"
        ) from exc


def why_not_built() -> str:
    """Why the extension is not importable here, as far as this machine shows."""
    missing = []
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None and shutil.which("cc") is None:
        missing.append(f"no C compiler ({compiler!r} is not on PATH)")
    include = sysconfig.get_paths().get("include")
    if include and not (Path(include) / "Python.h").is_file():
        missing.append(f"no Python headers (Python.h is not in {include})")
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = [*_HEADER_DIRS, *(f"{d}/{multiarch}" for d in _HEADER_DIRS if multiarch)]
    if not any((Path(d) / "jpeglib.h").is_file() for d in dirs):
        missing.append(f"no libjpeg-turbo headers (jpeglib.h is not in {', '.join(dirs)})")
    if missing:
        return "it could not be built when fastload was installed: " + "; ".join(missing)
    return (
        "it was not built when fastload was installed (the install predates the headers or "
        "the compiler, or the build failed: see the install log)"
    )


def require_built() -> None:
    """Raise :class:`MissingDependencyError`, with how to build it, when the compiled part is
    missing."""
    _load()


def add_restarts(data: bytes, *, max_pixels: int) -> bytes:
    """Rewrite a JPEG losslessly with restart markers that the region decoder cuts it at.

    The DCT coefficients are copied, not decoded, so every pixel stays as it was; the copy is
    a baseline JPEG (also from a progressive one) with Huffman tables made for the image, a
    restart marker every 1, 2 or 4 MCUs (the most that tiles an MCU row), and the original's
    APPn and COM segments (EXIF orientation, ICC profile). On photos it is about the size of
    the original (optimal tables against the markers' bytes).

    Args:
        data: A JPEG file's bytes.
        max_pixels: Refuse an image of more pixels than this.

    Returns:
        The rewritten JPEG.

    Raises:
        MissingDependencyError: The compiled part is missing (the message says how to build it).
        ValueError: ``data`` is not a JPEG libjpeg-turbo reads without a warning, or its image
            is larger than ``max_pixels``.
    """
    rewritten: bytes = _load().add_restarts(data, max_pixels)
    return rewritten


def restart_interval(data: bytes) -> int:
    """The restart interval (MCUs) a JPEG's header defines before its first scan; 0 when it
    defines none or ``data`` is no JPEG."""
    at = 2
    while data[:2] == b"\xff\xd8" and at + 4 <= len(data):
        marker = data[at + 1]
        if data[at] != 0xFF or marker in (0xD9, 0xDA):
            break
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0xDD and at + 6 <= len(data):
            return int.from_bytes(data[at + 4 : at + 6], "big")
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return 0


@register
class RegionBackend(Backend):
    """Decodes only the pixels a planned crop and resize read, at the planned DCT scale.

    Attributes:
        counts: How each region decode went, by :data:`MODES` name, plus ``"whole"`` for the
            decodes that needed the whole image (no plan, or a resize before the crop). Per
            instance, so per worker process.
    """

    name = "region"
    auto_priority = 5  # the fastest on the CPU when built (benchmarks/decoding/decode_floor.py)

    @classmethod
    def check(cls) -> Availability:
        try:
            module = importlib.import_module(EXTENSION)
        except ImportError:
            reason = f"its compiled part is missing: {why_not_built()}"
            return Availability(cls.name, False, version_of("fastload"), reason, INSTALL)
        return Availability(cls.name, True, f"libjpeg-turbo {module.LIBJPEG_TURBO_VERSION}")

    def __init__(self) -> None:
        module = _load()  # raises with the install command when missing
        self._decode, self._decode_resized = module.decode, module.decode_resized
        self._decode_resized_many = module.decode_resized_many
        self._decode_drawn_many = module.decode_drawn_many
        self.counts: collections.Counter[str] = collections.Counter()

    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        # decode_jpeg has no pixel limit (decode() checks the header before it gets here)
        return self.decode_jpeg_region(data, reduce, None, max_pixels=2**62).pixels

    def decode_jpeg_region(
        self, data: bytes, reduce: int, window: Window | None, *, max_pixels: int
    ) -> Decoded:
        whole = window is None
        x0, y0, x1, y1 = (0, 0, 2**31, 2**31) if window is None else window
        pixels, rows, cols, left, top, width, height, mode = self._decode(
            data, reduce, x0, y0, x1, y1, max_pixels
        )
        self.counts["whole" if whole else MODES[mode]] += 1
        array = np.frombuffer(pixels, np.uint8).reshape(rows, cols, 3)
        if whole:
            return Decoded(array, (width, height))
        return Decoded(array, (width, height), (left, top))

    def decode_jpeg_resized(
        self,
        data: bytes,
        reduce: int,
        box: Box,
        width: int,
        height: int,
        *,
        interpolation: str,
        mirror: bool,
        max_pixels: int,
    ) -> np.ndarray:
        # decoded and resized in one call that lets go of the GIL once (jpegregion.c, with
        # resizing.h): the decoded pixels never reach Python
        cubic = interpolation == "bicubic"
        planes, _, _, mode = self._decode_resized(
            data, reduce, *box, max_pixels, width, height, cubic, mirror
        )
        self.counts[MODES[mode]] += 1
        return np.frombuffer(planes, np.uint8).reshape(3, height, width).transpose(1, 2, 0)

    def decode_jpeg_resized_many(
        self,
        jobs: list[tuple[int, bytes, JpegPlan]],
        out: np.ndarray,
        *,
        max_pixels: int,
        normalizing: Normalizing | None = None,
    ) -> list[bool]:
        # every file decoded and resized into its slot in one call that lets go of the GIL
        # once for the batch: in a process of worker threads, one wait a batch
        calls = []
        for slot, data, plan in jobs:
            assert plan.region is not None  # the caller's promise
            width, height = plan.stored.width, plan.stored.height
            cubic = plan.interpolation == "bicubic"
            mirror = plan.mirror
            calls.append(
                (data, plan.reduce, *plan.region, max_pixels, width, height, cubic, mirror, slot)
            )
        return self._counted(self._decode_resized_many(calls, out, _floats(normalizing)))

    def decode_drawn_many(
        self,
        jobs: list[tuple[int, bytes, int]],
        recipe: CropRecipe,
        out: np.ndarray,
        *,
        max_pixels: int,
        exif_orientation: bool,
        normalizing: Normalizing | None = None,
    ) -> list[bool]:
        # each file's header read, its crop drawn and planned (cropplans.h), decoded and
        # resized, with the GIL let go once for the batch: no Python a sample
        made = recipe.as_tuple(exif_orientation=exif_orientation, max_pixels=max_pixels)
        return self._counted(self._decode_drawn_many(jobs, made, out, _floats(normalizing)))

    def _counted(self, modes: list[int]) -> list[bool]:
        """A batch call's modes counted in :attr:`counts`; per job, whether it was written."""
        for mode in modes:
            if mode >= 0:
                self.counts[MODES[mode]] += 1
        return [mode >= 0 for mode in modes]


def _floats(normalizing: Normalizing | None) -> tuple[Any, ...] | None:
    """The batch calls' float32 output, as jpegregion.c takes it: each value normalized by
    the resize as it writes it (resizing.h), as planes or pixel by pixel."""
    if normalizing is None:
        return None
    return (normalizing.factors, normalizing.shifts, normalizing.channels_last)
