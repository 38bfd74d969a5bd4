"""The decoding-backend interface, the registry, and the decode path every backend shares.

A backend only decodes JPEG (its strength); everything around that is shared, so every backend
gives the same output for the same file:

* the format is read from the content, not the name (``fastload.pixels.image.probe``);
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

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from fastload._optional import Availability, Requirement, availability
from fastload.backends.headers import DEFAULT_MAX_PIXELS, decode_with_pillow, read_header
from fastload.backends.plans import Box, JpegPlan, Plan, Window, plan_jpeg
from fastload.errors import ImageDecodeError
from fastload.memory.stacked import Normalizing
from fastload.pixels.image import ImageInfo, orient
from fastload.pixels.raw_pixels import ppm_pixels
from fastload.pixels.resampling import View, resample, source_window
from fastload.pixels.resampling import render as render_view

if TYPE_CHECKING:
    from fastload.transforms.crop_recipes import CropRecipe

__all__ = ["KINDS", "Backend", "Decoded", "ImageDecodeError", "Kind", "decodes_resized_many"]


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
        ``fastload.pixels.resampling.kernel_region``), and for a box at a reduced scale that falls
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
            out = render_view(array, view, **render)
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
            recipe: The transform (:func:`fastload.transforms.crop_recipes.crop_recipe`).
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
            **{**render, "interpolation": jp.interpolation},  # the image's own, if drawn
        )
        return orient(out, stored.transpose, stored.mirror_lr and not jp.mirror, stored.mirror_tb)


def decodes_resized_many(backend: Backend) -> bool:
    """Whether ``backend`` decodes many JPEGs into a batch at once
    (:meth:`Backend.decode_jpeg_resized_many` is its own)."""
    return type(backend).decode_jpeg_resized_many is not Backend.decode_jpeg_resized_many
