"""The decoding-backend interface, the registry, and the decode path every backend shares.

A backend only decodes JPEG (its strength); everything around that is shared, so every backend
gives the same output for the same file:

* the format is read from the content, not the name (``fastload.image.probe``);
* an image whose header claims more than ``max_pixels`` pixels is refused before decoding;
* a planned crop/resize (``fastload.transforms``) decides the region and output size first,
  so JPEGs are decoded at a reduced DCT scale (1/2, 1/4, 1/8) when the region is at least
  twice the output, then resampled once; a backend that can decode only part of an image
  (:meth:`Backend.decode_jpeg_region`) is asked for only the pixels the resampling reads;
* EXIF orientation is applied, folded with the planned mirror into one final copy;
* CMYK/YCCK JPEGs and all other formats (PNG, WebP, GIF, BMP, TIFF) go through one Pillow-based
  path that converts grey, palette, alpha, CMYK and 16-bit images to 8-bit RGB.

Output: an H x W x 3 uint8 RGB array in display orientation.
"""

from __future__ import annotations

import importlib
import io
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fastload._optional import Availability, Requirement, availability
from fastload.errors import ImageDecodeError
from fastload.image import ImageInfo, is_truncated_jpeg, orient, orientation_ops, probe
from fastload.raw_pixels import ppm_pixels
from fastload.resampling import View, kernel_region, resample, source_window
from fastload.stacked import Normalizing

if TYPE_CHECKING:
    from fastload.crop_recipes import CropRecipe

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "FILES_KERNEL",
    "KINDS",
    "Backend",
    "Decoded",
    "ImageDecodeError",
    "JpegPlan",
    "Kind",
    "Stored",
    "check_header",
    "decode_with_pillow",
    "decodes_resized_many",
    "plan_jpeg",
    "read_file",
    "read_files",
    "read_header",
    "reduce_by_area",
    "to_stored",
]

# Pillow's own decompression-bomb threshold (about 89.5 megapixels, 0.25 GiB of RGB).
DEFAULT_MAX_PIXELS = 89_478_485

Plan = Callable[[View], View]
Window = tuple[int, int, int, int]
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Decoded:
    """What a backend decoded from a JPEG at a DCT scale: the whole image, or a region of it.

    Attributes:
        pixels: H x W x 3 uint8 RGB pixels, in stored orientation.
        size: The whole image's (width, height) at that scale.
        origin: Where ``pixels[0, 0]`` lies in the whole scaled image, (column, row);
            ``None`` when ``pixels`` is the whole image.
    """

    pixels: np.ndarray
    size: tuple[int, int]
    origin: tuple[int, int] | None = None


Kind = Literal["decoder", "executor"]
KINDS: tuple[Kind, ...] = ("decoder", "executor")


class Backend(ABC):
    """Decodes JPEG data; :meth:`decode` wraps it in the path every backend shares.

    A backend says what it is and what it needs on its class, and the registry
    (:func:`fastload.backends.register`) derives everything else from that: ``fastload info``,
    ``fastload bench``, ``"auto"``, the loader's ``backend=`` and the contract tests.

    Attributes:
        name: The registry name (``backend="..."``).
        kind: ``"decoder"``: decodes one sample at a time, in torch's worker processes.
            ``"executor"``: also executes whole batches (:meth:`executor`), replacing the
            worker processes under ``fastload.DataLoader``; its per-sample :meth:`decode`
            stays for ``ds[i]`` and ``fastload scan``.
        requires: The Python modules it imports (checked by :meth:`check`).
        auto_priority: Its place in ``"auto"``'s choice (lower first), ``None`` to never be
            chosen by ``"auto"``.
        stored_pixels: An executor that can also deliver the stored pixels of a dataset made
            with ``exif_orientation=False`` (its library does not orient them itself).
    """

    name: ClassVar[str]
    kind: ClassVar[Kind] = "decoder"
    requires: ClassVar[tuple[Requirement, ...]] = ()
    auto_priority: ClassVar[int | None] = None
    stored_pixels: ClassVar[bool] = False

    @classmethod
    def check(cls) -> Availability:
        """Whether this backend can run here, without raising; why not and the fix if not."""
        return availability(cls.name, cls.requires)

    @classmethod
    def details(cls) -> dict[str, Any]:
        """Facts ``fastload info`` reports besides usability (e.g. which decoders a GPU
        backend finds here); empty by default. Called only when the backend is usable."""
        return {}

    @classmethod
    def executor(cls, dataset: Any, options: Any, *, batch_ops: Any = None) -> Any:
        """The batch executor of an ``"executor"`` backend for ``dataset``.

        Args:
            dataset: A ``fastload.ImageList`` or ``ImageFolder``.
            options: A ``fastload.backends.executor.ExecutorOptions``.
            batch_ops: The loader's ``batch_transforms``: the executor folds what it can run.

        Returns:
            A ``fastload.backends.executor.BatchExecutor``.
        """
        raise TypeError(f"the {cls.name!r} backend decodes per sample; it has no batch executor")

    def decode_jpeg_region(
        self, data: bytes, reduce: int, window: Window | None, *, max_pixels: int
    ) -> Decoded:
        """Decode at least ``window`` of a grey or colour JPEG, at 1/``reduce`` scale.

        The default decodes the whole image with :meth:`decode_jpeg`; a backend that can skip
        the rest of the image overrides this.

        Args:
            data: The JPEG bytes (their header already checked, ``max_pixels`` included).
            reduce: 1, 2, 4 or 8, as for :meth:`decode_jpeg`.
            window: (x0, y0, x1, y1), end exclusive, in pixels of the image at 1/``reduce``
                scale (each side rounded up); ``None`` for the whole image.
            max_pixels: The caller's pixel limit, for a decoder that re-reads the header.

        Returns:
            The pixels, holding at least ``window``.
        """
        pixels = self.decode_jpeg(data, reduce)
        return Decoded(pixels, (pixels.shape[1], pixels.shape[0]))

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
    ) -> np.ndarray | None:
        """Decode ``box`` of a JPEG at 1/``reduce`` scale and resize it to ``width`` x
        ``height`` in one step, with the numbers of torch's antialiased kernel, mirrored
        left-right if asked; ``None`` (the default) leaves it to the shared path, which decodes
        (:meth:`decode_jpeg_region`), then resamples the same way.

        Asked only where that is all the shared path would do (see
        ``fastload.resampling.kernel_region``), and for a box at a reduced scale that falls
        between pixels (a span, from the same function), which the shared path warps
        without filtering: a backend that answers filters it, its kernel centred on the box's
        own positions. A backend that can do it without handing the decoded pixels back to
        Python in between overrides this (the region backend).

        Args:
            data: The JPEG bytes (their header already checked, ``max_pixels`` included).
            reduce: 1, 2, 4 or 8, as for :meth:`decode_jpeg`.
            box: (x0, y0, x1, y1), end exclusive, in pixels of the image at 1/``reduce``
                scale: exactly the pixels to resize, or a span between them.
            width: The output width.
            height: The output height.
            interpolation: ``"bilinear"`` or ``"bicubic"``.
            mirror: Mirror the output left-right.
            max_pixels: The caller's pixel limit, for a decoder that re-reads the header.

        Returns:
            H x W x 3 uint8 RGB pixels in stored orientation, or ``None``.
        """
        return None

    @abstractmethod
    def decode_jpeg(self, data: bytes, reduce: int) -> np.ndarray:
        """Decode a grey or colour (1- or 3-component) JPEG.

        Args:
            data: The JPEG bytes.
            reduce: 1, 2, 4 or 8: decode at 1/``reduce`` scale in the DCT domain (each side
                rounded up, as libjpeg does).

        Returns:
            H x W x 3 uint8 RGB pixels in stored orientation (EXIF not applied).

        Raises:
            Exception: The data cannot be decoded, or the decoder warned (a truncated file);
                the message says why.
        """

    def decode(
        self,
        data: bytes,
        *,
        plan: Plan | None = None,
        render: dict[str, Any] | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
    ) -> np.ndarray:
        """Decode an image file's bytes to display-oriented RGB, running a planned crop/resize.

        Args:
            data: The file's bytes, any supported format.
            plan: Turns the whole image's :class:`~fastload.transforms.View` into the wanted
                one (e.g. ``RandomResizedCrop(224).plan``); ``None`` keeps the whole image.
            render: Resampling options (``interpolation``, ``antialias``).
            max_pixels: Refuse images whose header claims more pixels than this.
            exif_orientation: Apply the file's EXIF orientation; ``False`` keeps the stored
                pixels, as torchvision's own image loader does.

        Returns:
            H x W x 3 uint8 RGB array.

        Raises:
            ValueError: The data is not a readable image, or is too large.
        """
        info, jpeg = read_header(data, max_pixels=max_pixels, exif_orientation=exif_orientation)
        render = render or {}
        if jpeg:
            planned = plan_jpeg(info, plan, render)
            out = self.decode_jpeg_planned(
                data, info, planned, render=render, max_pixels=max_pixels
            )
        else:
            # raw pixels (``pack(pixels="raw")``) need no decoding: a view of the bytes
            array = ppm_pixels(data) if info.format == "ppm" else None
            if array is None:
                array = decode_with_pillow(
                    data, max_pixels=max_pixels, exif_orientation=exif_orientation
                )
            view = View.full(array.shape[1], array.shape[0])
            if plan is not None:
                view = plan(view)
            out = resample(array, view.box, view.width, view.height, mirror=view.mirror, **render)
        # Pillow's arrays are read-only; a tensor made from one must not be.
        return out if out.flags.writeable else out.copy()

    def decode_jpeg_resized_many(
        self,
        jobs: list[tuple[int, bytes, JpegPlan]],
        out: np.ndarray,
        *,
        max_pixels: int,
        normalizing: Normalizing | None = None,
    ) -> list[bool] | None:
        """:meth:`decode_jpeg_resized` for several JPEGs at once, each written into its slot of
        a batch; ``None`` (the default) where the backend cannot, and the caller decodes them
        one by one.

        Asked only with plans whose :attr:`JpegPlan.region` is set and that need no orienting
        after (:attr:`JpegPlan.oriented_after`). A backend that can do all of them without
        handing the GIL over between them overrides this (the region backend).

        Args:
            jobs: ``(slot, data, plan)``: the JPEG bytes (their header already checked) and
                their plan; the output goes to ``out[slot]``.
            out: A writable N x 3 x H x W uint8 array, H x W the plans' output size; with
                ``normalizing``, float32, N x H x W x 3 where it says channels last.
            max_pixels: The caller's pixel limit, for a decoder that re-reads the header.
            normalizing: Each value written normalized as it says, as the resize makes it.

        Returns:
            Per job, whether it was written; a file that failed is the caller's to decode
            alone, which says why.
        """
        return None

    def decode_drawn_many(
        self,
        jobs: list[tuple[int, bytes, int]],
        recipe: CropRecipe,
        out: np.ndarray,
        *,
        max_pixels: int,
        exif_orientation: bool,
        normalizing: Normalizing | None = None,
    ) -> list[bool] | None:
        """Each JPEG's random crop drawn from its seed as ``recipe`` draws it, planned as
        :func:`plan_jpeg` plans it, decoded and resized into its slot of a batch, planning
        and all in one call; ``None`` (the default) where the backend cannot. The caller plans
        in Python, and decodes as before, every sample not written.

        Args:
            jobs: ``(slot, data, seed)``: the file's bytes (not yet checked) and the sample's
                seed; the output goes to ``out[slot]``.
            recipe: The transform (:func:`fastload.crop_recipes.crop_recipe`).
            out: A writable N x 3 x H x W uint8 array, H x W the recipe's output size (with
                ``normalizing``, as :meth:`decode_jpeg_resized_many` takes it).
            max_pixels: The caller's pixel limit: a larger header is left to the caller.
            exif_orientation: Whether orientations are applied: a file with one to apply is
                left to the caller.
            normalizing: Each value written normalized as it says, as the resize makes it.

        Returns:
            Per job, whether it was written: not where the file is not a JPEG this planner
            reads as the Python one does (the caller's planner reads it, and reports what is
            wrong), nor where its decode failed.
        """
        return None

    def decode_jpeg_planned(
        self,
        data: bytes,
        info: ImageInfo,
        jp: JpegPlan,
        *,
        render: dict[str, Any],
        max_pixels: int,
    ) -> np.ndarray:
        """A JPEG decoded and resampled as :func:`plan_jpeg` planned it (what :meth:`decode`
        does with a JPEG after its checks and its plan).

        Args:
            data: The JPEG bytes (their header already checked).
            info: What the header says.
            jp: The plan.
            render: Resampling options (``interpolation``, ``antialias``).
            max_pixels: The caller's pixel limit.

        Returns:
            H x W x 3 uint8 RGB pixels in display orientation.
        """
        stored = jp.stored
        out_w, out_h = stored.width, stored.height
        if jp.region is not None:
            out = self.decode_jpeg_resized(
                data,
                jp.reduce,
                jp.region,
                out_w,
                out_h,
                interpolation=jp.interpolation,
                mirror=jp.mirror,
                max_pixels=max_pixels,
            )
            if out is not None:
                return orient(
                    out, stored.transpose, stored.mirror_lr and not jp.mirror, stored.mirror_tb
                )
        window = source_window(
            stored.box, jp.scaled, out_w, out_h, interpolation=jp.interpolation, scale=jp.scale
        )
        decoded = self.decode_jpeg_region(data, jp.reduce, window, max_pixels=max_pixels)
        array = decoded.pixels
        if array.ndim != 3 or array.shape[0] == 0 or array.shape[1] == 0:
            raise ValueError(f"{self.name} decoded an empty image")
        width, height = info.width, info.height
        assert width is not None and height is not None  # checked by plan_jpeg
        scale = (decoded.size[0] / width, decoded.size[1] / height)
        out = resample(
            array,
            stored.box,
            out_w,
            out_h,
            scale=scale,
            origin=decoded.origin,
            mirror=jp.mirror,
            **render,
        )
        return orient(out, stored.transpose, stored.mirror_lr and not jp.mirror, stored.mirror_tb)


@dataclass(frozen=True)
class Stored:
    """A planned view in the stored pixels of a file with an EXIF orientation.

    Attributes:
        box: (x0, y0, x1, y1): the region to resample, in stored pixel coordinates.
        width: The resampled width, before orienting.
        height: The resampled height, before orienting.
        transpose: Orient by transposing first (``fastload.image.orient``'s order) ...
        mirror_lr: ... then mirroring left-right (the view's own mirror folded in) ...
        mirror_tb: ... then top-bottom.
    """

    box: tuple[float, float, float, float]
    width: int
    height: int
    transpose: bool
    mirror_lr: bool
    mirror_tb: bool


def to_stored(view: View, orientation: int, shown_w: int, shown_h: int) -> Stored:
    """Where a view planned in display coordinates lies in the stored pixels.

    The region is found there, decoded and resampled there, and only the small result is
    oriented (``fastload.image.orient(out, s.transpose, s.mirror_lr, s.mirror_tb)``).

    Args:
        view: The planned view, in display coordinates.
        orientation: The file's EXIF orientation (1-8).
        shown_w: The displayed width.
        shown_h: The displayed height.
    """
    transpose, mirror_lr, mirror_tb = orientation_ops(orientation)
    x0, y0, x1, y1 = view.box
    if mirror_lr:
        x0, x1 = shown_w - x1, shown_w - x0
    if mirror_tb:
        y0, y1 = shown_h - y1, shown_h - y0
    if transpose:
        return Stored(
            (y0, x0, y1, x1), view.height, view.width, True, mirror_lr != view.mirror, mirror_tb
        )
    return Stored(
        (x0, y0, x1, y1), view.width, view.height, False, mirror_lr != view.mirror, mirror_tb
    )


@dataclass(frozen=True)
class JpegPlan:
    """How a planned view of a JPEG is decoded: at which DCT scale, and what is resized.

    Attributes:
        stored: The view in the stored pixels (:func:`to_stored`).
        reduce: The DCT scale, 1/``reduce`` (1, 2, 4 or 8).
        scaled: The whole image's (width, height) at that scale.
        scale: ``scaled`` over the full size, per axis.
        interpolation: The resize's interpolation.
        mirror: Whether the resize writes the view's left-right mirror (none is left for
            after, where no transpose comes first).
        region: The box of the scaled image that only needs resizing with the antialiased
            kernel (``fastload.resampling.kernel_region``): on whole pixels, or, at a reduced
            DCT scale, between them (a backend that decodes such a span itself filters it, the
            shared path warps it); ``None`` when the resize is more than that.
    """

    stored: Stored
    reduce: int
    scaled: tuple[int, int]
    scale: tuple[float, float]
    interpolation: str
    mirror: bool
    region: Box | None

    @property
    def oriented_after(self) -> bool:
        """Whether the resized pixels still need orienting (an EXIF orientation)."""
        stored = self.stored
        return stored.transpose or stored.mirror_tb or (stored.mirror_lr and not self.mirror)


def decodes_resized_many(backend: Backend) -> bool:
    """Whether ``backend`` decodes many JPEGs into a batch at once
    (:meth:`Backend.decode_jpeg_resized_many` is its own)."""
    return type(backend).decode_jpeg_resized_many is not Backend.decode_jpeg_resized_many


def plan_jpeg(info: ImageInfo, plan: Plan | None, render: dict[str, Any]) -> JpegPlan:
    """Plan the decode of a JPEG whose header says ``info``: the view ``plan`` makes of the
    whole (displayed) image, where it lies in the stored pixels, the DCT scale (the largest
    of 1/8, 1/4, 1/2 the view still shrinks from) and what the resize does.

    Args:
        info: The header (with a width and a height).
        plan: Turns the whole image's view into the wanted one; ``None`` keeps the whole.
        render: Resampling options (``interpolation``, ``antialias``).
    """
    width, height = info.width, info.height
    assert width is not None and height is not None  # the caller checked the header
    shown_w, shown_h = info.shown_size or (width, height)
    view = View.full(shown_w, shown_h)
    if plan is not None:
        view = plan(view)
    stored = to_stored(view, info.orientation, shown_w, shown_h)
    box, out_w, out_h = stored.box, stored.width, stored.height
    shrink = min((box[2] - box[0]) / out_w, (box[3] - box[1]) / out_h)
    reduce = next(r for r in (8, 4, 2, 1) if shrink >= r or r == 1)
    scaled = (-(-width // reduce), -(-height // reduce))  # libjpeg rounds each side up
    interpolation = render.get("interpolation", "bilinear")
    scale = (scaled[0] / width, scaled[1] / height)
    region = kernel_region(
        box,
        scaled,
        out_w,
        out_h,
        interpolation=interpolation,
        antialias=render.get("antialias", True),
        scale=scale,
    )
    # a mirror before any transpose is the resize's to write
    mirror = stored.mirror_lr and not stored.transpose
    return JpegPlan(stored, reduce, scaled, scale, interpolation, mirror, region)


FILES_KERNEL = "fastload.backends._files"  # compiled from fastload/backends/files.c


def read_file(path: str) -> bytes:
    """A file's bytes, read with one ``read`` call of its size (without the buffered file
    object ``open`` builds: a quarter less time for a photo read from the page cache).

    Through fastload's compiled reader (``files.c``) where it was built: the same system calls
    with the GIL let go twice, where ``os``'s four calls hand it over four times (each a wait
    in a process of worker threads)."""
    try:
        files = importlib.import_module(FILES_KERNEL)
    except ImportError:
        files = None
    if files is not None:
        data: bytes | None = files.read(path)
        if data is not None:
            return data
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)  # one more, to see the end
        if len(data) == size:
            return data
        # a file that changed since, a short read (some network filesystems), or a size the
        # system does not know (/proc): read on to the end
        parts = [data]
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def read_files(paths: list[str]) -> list[bytes | None]:
    """Many files' bytes, as :func:`read_file` reads one; ``None`` for a file it could not
    read that way (missing, unreadable, not a regular file, changed meanwhile): the caller
    reads it alone with :func:`read_file`, which reads it or raises the error.

    Through fastload's compiled reader, the GIL let go twice for all of them; without it,
    each file read as :func:`read_file` does."""
    try:
        files = importlib.import_module(FILES_KERNEL)
    except ImportError:
        files = None
    if files is not None:
        found: list[bytes | None] = files.read_many(paths)
        return found
    out: list[bytes | None] = []
    for path in paths:
        try:
            out.append(read_file(path))
        except OSError:
            out.append(None)
    return out


def read_header(data: bytes, *, max_pixels: int, exif_orientation: bool) -> tuple[ImageInfo, bool]:
    """The header :meth:`Backend.decode` goes by: :func:`check_header`'s, its orientation
    dropped without ``exif_orientation``, and whether the JPEG path decodes the file (a grey or
    colour JPEG whose size the header gives: :func:`plan_jpeg` can plan it).

    Raises:
        ValueError: As :func:`check_header`.
    """
    info = check_header(data, max_pixels=max_pixels)
    if not exif_orientation:
        info = replace(info, orientation=1)
    return info, info.format == "jpeg" and info.components in (1, 3) and bool(info.pixels)


def check_header(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageInfo:
    """The checks made on every file before any decoder sees it, whatever the backend.

    Args:
        data: The file's bytes.
        max_pixels: Refuse images whose header claims more pixels than this.

    Returns:
        What the header says.

    Raises:
        ValueError: The file is empty, not in a format fastload reads, too large, or a JPEG
            without its end-of-image marker (truncated); the message says which.
    """
    if not data:
        raise ValueError("empty file")
    info = probe(data)
    if info.pixels is not None and info.pixels > max_pixels:
        raise ValueError(_too_large(info.width, info.height, max_pixels))
    if info.format == "unknown":
        head = data[:8].hex(" ")
        raise ValueError(f"not an image format fastload reads (starts with {head})")
    if info.format == "jpeg" and is_truncated_jpeg(data):
        raise ValueError("truncated JPEG: no end-of-image marker")
    return info


def _too_large(width: int | None, height: int | None, max_pixels: int) -> str:
    return (
        f"image of {width} x {height} = {(width or 0) * (height or 0):,} pixels is over "
        f"max_pixels={max_pixels:,}; raise max_pixels if the file is trusted"
    )


def decode_with_pillow(
    data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, exif_orientation: bool = True
) -> np.ndarray:
    """Decode any format Pillow reads to display-oriented 8-bit RGB (H x W x 3 uint8).

    Grey, palette, alpha (dropped, as ``Image.convert("RGB")`` does), CMYK and YCCK become RGB;
    16-bit images are scaled to 8 bits (65535 -> 255), not saturated. With
    ``exif_orientation=False`` the stored pixels are kept, unrotated.
    """
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as image:
        if image.width * image.height > max_pixels:
            raise ValueError(_too_large(image.width, image.height, max_pixels))
        image.load()  # raises on truncated data
        if exif_orientation:
            image = ImageOps.exif_transpose(image)
        return _to_rgb(image)


def _to_rgb(image: Any) -> np.ndarray:
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        wide = np.asarray(image).astype(np.uint32).clip(0, 65535)
        grey = ((wide * 255 + 32767) // 65535).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode == "F":
        grey = np.asarray(image).clip(0, 255).round().astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image)


def reduce_by_area(array: np.ndarray, reduce: int) -> np.ndarray:
    """A whole decoded image brought to libjpeg's 1/``reduce`` size by averaging areas: what a
    decoder without DCT-domain scaling (DALI's, nvImageCodec's) gives in place of it."""
    if reduce <= 1:
        return array
    import cv2

    rows, cols = array.shape[:2]
    size = (math.ceil(cols / reduce), math.ceil(rows / reduce))
    return cv2.resize(array, size, interpolation=cv2.INTER_AREA)
