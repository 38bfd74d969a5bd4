"""How the nvImageCodec executor turns decoded regions into a batch of views.

:func:`render_array` is the CPU backends' renderer (what the executor runs on the CPU, so that
pixels agree with them); :func:`render_tensor` renders one view with torch's kernels on any
device; :func:`render_batch` renders a whole batch of them with the same weights in a fixed
number of kernel launches (what the executor runs on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fastload.backends.plans import Stored, to_stored
from fastload.gpu import separable as S
from fastload.pixels.image import ImageInfo, orient
from fastload.pixels.resampling import View, resample, whole_pixels

__all__ = [
    "RenderPlan",
    "Sample",
    "plan_render",
    "plan_sample",
    "render_array",
    "render_batch",
    "render_tensor",
    "size_buckets",
]

# A region this many times the batch's median area renders alone: padding every sample of
# the batch to its size would multiply the batch's work.
_OUTLIER = 8
# Size groups a batch is padded in, at most (each costs a fixed number of kernel launches).
_BUCKETS = 3


@dataclass(frozen=True)
class Sample:
    """One sample's work: the region to decode and how to render the view from it.

    Attributes:
        stored: The view in the file's stored pixels, and how to orient the result.
        region: (x0, y0, x1, y1) of the stored image to decode, ``None`` for all of it.
    """

    stored: Stored
    region: tuple[int, int, int, int] | None


def plan_sample(
    view: View, info: ImageInfo, size: tuple[int, int], *, regions: bool = True
) -> Sample:
    """Where ``view`` (display coordinates) lies in the file, and the region worth decoding.

    Only a crop on whole pixels inside the image (RandomResizedCrop's) is decoded as a region,
    and only when ``regions`` is true: every other box is rendered from the whole image,
    exactly as the CPU backends render it.
    """
    shown_w, shown_h = size
    stored = to_stored(view, info.orientation, shown_w, shown_h)
    cols, rows = (shown_h, shown_w) if stored.transpose else (shown_w, shown_h)
    x0, y0, x1, y1 = stored.box
    whole = whole_pixels(*stored.box)
    inside = x0 >= 0 and y0 >= 0 and x1 <= cols and y1 <= rows
    jpeg = info.format == "jpeg" and info.components in (1, 3)
    everything = (round(x1 - x0), round(y1 - y0)) == (cols, rows)
    if not (regions and whole and inside and jpeg) or everything:
        return Sample(stored, None)
    return Sample(stored, (round(x0), round(y0), round(x1), round(y1)))


def _relative(sample: Sample) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = sample.stored.box
    ox, oy = (sample.region[0], sample.region[1]) if sample.region is not None else (0, 0)
    return (x0 - ox, y0 - oy, x1 - ox, y1 - oy)


def render_array(array: np.ndarray, sample: Sample, options: dict[str, Any]) -> np.ndarray:
    """The view from the decoded region (H x W x 3 uint8), as the CPU backends render it."""
    stored = sample.stored
    out = resample(array, _relative(sample), stored.width, stored.height, **options)
    return orient(out, stored.transpose, stored.mirror_lr, stored.mirror_tb)


def render_tensor(image: torch.Tensor, sample: Sample, options: dict[str, Any]) -> torch.Tensor:
    """The view from a decoded region held as an H x W x 3 uint8 tensor (any device), with
    torch's kernels: 3 x h x w uint8 on the same device.

    A box on whole pixels is sliced, then resized (antialiased when shrinking, as
    torchvision); a box outside the image is padded with zeros; any other box is sampled
    bilinearly (``grid_sample``), as the CPU path's affine warp does.
    """
    return _quantize(_render(image, sample, options)).contiguous()


def render_batch(
    images: list[torch.Tensor], samples: list[Sample], options: dict[str, Any]
) -> torch.Tensor:
    """The views from their decoded regions, as :func:`render_tensor` renders each, in one
    N x 3 x h x w uint8 batch, in a number of kernel launches that does not grow with N.

    Each sample's rows and columns become weight matrices (:mod:`fastload.gpu.separable`); the
    decoded regions are copied (one copy each, oriented on the way) into a zero-padded float
    batch, in up to three buckets by size, and resampled with two batched matmuls per bucket.
    A region over eight times the batch's median area renders alone, as
    :func:`render_tensor` renders it, rather than pad the whole batch to its size.

    Args:
        images: The decoded regions, H x W x 3 uint8 tensors on one device (any strides).
        samples: Each image's :class:`Sample`.
        options: ``interpolation`` and ``antialias``, as for :func:`render_tensor`.
    """
    if not images:
        raise ValueError("render_batch needs at least one image")
    mode = options.get("interpolation", "bilinear")
    antialias = bool(options.get("antialias", True)) and mode != "nearest"
    plans = [
        plan_render(image.shape[0], image.shape[1], sample, antialias)
        for image, sample in zip(images, samples, strict=True)
    ]
    sizes = {plan.out for plan in plans}
    if len(sizes) > 1:
        raise ValueError(f"views of different sizes {sorted(sizes)[:3]} cannot form a batch")
    (height, width), device = plans[0].out, images[0].device
    buckets, alone = size_buckets([plan.shape for plan in plans])
    # the weights of every bucket at once (sliced per bucket): a few launches, not a few
    # dozen, per extra bucket
    kept = sorted(k for bucket in buckets for k in bucket)
    most = max(plans[k].shape[0] for k in kept), max(plans[k].shape[1] for k in kept)
    weights = (
        S.axis_weights([plans[k].rows for k in kept], height, most[0], mode, device),
        S.axis_weights([plans[k].columns for k in kept], width, most[1], mode, device),
    )
    if not alone and len(buckets) == 1:
        return _render_bucket(images, plans, buckets[0], weights)
    batch = torch.empty((len(images), 3, height, width), dtype=torch.uint8, device=device)
    where = {k: position for position, k in enumerate(kept)}
    for bucket in buckets:
        index = torch.tensor([[k, where[k]] for k in bucket]).to(device, non_blocking=True)
        mine = (weights[0].index_select(0, index[:, 1]), weights[1].index_select(0, index[:, 1]))
        batch.index_copy_(0, index[:, 0], _render_bucket(images, plans, bucket, mine))
    for k in alone:
        batch[k] = _quantize(_render(images[k], samples[k], options))
    return batch


@dataclass(frozen=True)
class RenderPlan:
    """One sample in the batch renderer: its input as shown, and its two axes.

    Attributes:
        shape: The input's (rows, columns) once oriented.
        rows: The :func:`~fastload.gpu.separable.axis` of the shown rows.
        columns: That of the shown columns.
        transpose: The stored image's rows are shown as columns.
        out: The output's (height, width).
    """

    shape: tuple[int, int]
    rows: tuple[float, ...]
    columns: tuple[float, ...]
    transpose: bool
    out: tuple[int, int]


def plan_render(rows: int, cols: int, sample: Sample, antialias: bool) -> RenderPlan:
    """:func:`_render`'s choices for one sample, as two axes of weights (same branches)."""
    stored = sample.stored
    width, height = stored.width, stored.height
    x0, y0, x1, y1 = _relative(sample)
    inside = x0 >= 0 and y0 >= 0 and x1 <= cols and y1 <= rows
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    full_w, full_h, left, top = cols * fx, rows * fy, x0 * fx, y0 * fy
    y: tuple[Any, ...]
    x: tuple[Any, ...]
    if inside and whole_pixels(x0, y0, x1, y1):  # a crop, then a resize
        crop_h, crop_w = round(y1 - y0), round(x1 - x0)
        aa = antialias and (height < crop_h or width < crop_w)
        y = (S.RESIZE, round(y0), crop_h, height, 0, rows, aa)
        x = (S.RESIZE, round(x0), crop_w, width, 0, cols, aa)
    elif inside and whole_pixels(full_w, full_h, left, top):  # a resize, then a crop
        size_h, size_w = round(full_h), round(full_w)
        aa = antialias and (size_h < rows or size_w < cols)
        y = (S.RESIZE, 0, rows, size_h, round(top), rows, aa)
        x = (S.RESIZE, 0, cols, size_w, round(left), cols, aa)
    else:  # sampled at the pixel centres, zeros outside
        y = (S.SAMPLE, y0, y1, 0, 0, rows, False)
        x = (S.SAMPLE, x0, x1, 0, 0, cols, False)
    if stored.transpose:  # stored columns are shown as rows
        y, x, shape, out = x, y, (cols, rows), (width, height)
    else:
        shape, out = (rows, cols), (height, width)
    shown_rows = S.axis(*y[:6], antialias=y[6], mirror=stored.mirror_tb)
    shown_cols = S.axis(*x[:6], antialias=x[6], mirror=stored.mirror_lr)
    return RenderPlan(shape, shown_rows, shown_cols, stored.transpose, out)


def size_buckets(shapes: list[tuple[int, int]]) -> tuple[list[list[int]], list[int]]:
    """Positions grouped by size (at most three groups, each padded to its largest; a group's
    positions in batch order), and the outliers that render alone."""
    areas = [rows * cols for rows, cols in shapes]
    median = sorted(areas)[len(areas) // 2]
    alone = [k for k, area in enumerate(areas) if area > _OUTLIER * median]
    groups: list[list[int]] = []
    padded = 0
    for k in sorted(set(range(len(shapes))) - set(alone), key=lambda k: -areas[k]):
        if groups and (len(groups) == _BUCKETS or 2 * areas[k] >= padded):
            groups[-1].append(k)
        else:
            groups.append([k])
            padded = areas[k]
    return [sorted(group) for group in groups], alone


def _render_bucket(
    images: list[torch.Tensor],
    plans: list[RenderPlan],
    bucket: list[int],
    weights: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """The bucket's samples, rendered together: len(bucket) x 3 x h x w uint8.

    ``weights`` are the bucket's row and column weights, in its order, padded to at least
    its largest input (the padding is cut off here)."""
    device = images[bucket[0]].device
    (height, width), n = plans[bucket[0]].out, len(bucket)
    most_rows = max(plans[k].shape[0] for k in bucket)
    most_cols = max(plans[k].shape[1] for k in bucket)
    # contract the axis that shrinks the work most first: the buffer holds it along axis 1
    swap = height * most_rows * most_cols + width * most_cols * height > (
        width * most_cols * most_rows + height * most_rows * width
    )
    first, second = (most_cols, most_rows) if swap else (most_rows, most_cols)
    buffer = torch.zeros((n, first, second, 3), dtype=torch.float32, device=device)
    along, across = second * 3, 3  # the buffer's strides along its axes 1 and 2
    for slot, k in enumerate(bucket):
        image, plan = images[k], plans[k]
        # a stored row goes along the buffer's axis 1 unless one (not both) of them turns it
        strides = (along, across, 1) if plan.transpose == swap else (across, along, 1)
        target = torch.as_strided(
            buffer, (image.shape[0], image.shape[1], 3), strides, slot * first * second * 3
        )
        target.copy_(image)
    row_weights, col_weights = weights[0][:, :, :most_rows], weights[1][:, :, :most_cols]
    if swap:
        out = S.contract(buffer, col_weights, row_weights).permute(0, 3, 1, 2)
    else:
        out = S.contract(buffer, row_weights, col_weights).permute(0, 3, 2, 1)
    batch = torch.empty((n, 3, height, width), dtype=torch.uint8, device=device)
    return batch.copy_(out.round_().clamp_(0, 255))


def _quantize(out: torch.Tensor) -> torch.Tensor:
    return out if out.dtype == torch.uint8 else out.round_().clamp_(0, 255).to(torch.uint8)


def _render(image: torch.Tensor, sample: Sample, options: dict[str, Any]) -> torch.Tensor:
    """:func:`render_tensor` before rounding: 3 x h x w, uint8 or float (0-255, unrounded)."""
    stored = sample.stored
    width, height = stored.width, stored.height
    mode = options.get("interpolation", "bilinear")
    antialias = bool(options.get("antialias", True)) and mode != "nearest"
    x0, y0, x1, y1 = _relative(sample)
    rows, cols = image.shape[0], image.shape[1]
    chw = image.permute(2, 0, 1).unsqueeze(0)
    inside = x0 >= 0 and y0 >= 0 and x1 <= cols and y1 <= rows
    # the whole image at the size that makes this box whole pixels (Resize, then CenterCrop)
    fx, fy = width / (x1 - x0), height / (y1 - y0)
    full_w, full_h, left, top = cols * fx, rows * fy, x0 * fx, y0 * fy
    if inside and whole_pixels(x0, y0, x1, y1):  # a crop, then a resize
        region = chw[:, :, round(y0) : round(y1), round(x0) : round(x1)]
        out = _resize(region, height, width, mode, antialias)
    elif inside and whole_pixels(full_w, full_h, left, top):  # a resize, then a crop
        full = _resize(chw, round(full_h), round(full_w), mode, antialias)
        out = full[:, :, round(top) : round(top) + height, round(left) : round(left) + width]
    else:
        out = _sample(chw, (x0, y0, x1, y1), height, width, mode)
    out = out[0]
    if stored.transpose:
        out = out.transpose(1, 2)
    if stored.mirror_lr:
        out = out.flip(2)
    if stored.mirror_tb:
        out = out.flip(1)
    return out


def _resize(
    region: torch.Tensor, height: int, width: int, mode: str, antialias: bool
) -> torch.Tensor:
    """``region`` resized: uint8 where torch resizes uint8 (the CPU), else float, unrounded."""
    if tuple(region.shape[-2:]) == (height, width):
        return region
    shrink = height < region.shape[-2] or width < region.shape[-1]
    source = region if region.device.type == "cpu" else region.float()
    kwargs = (
        {} if mode == "nearest" else {"align_corners": False, "antialias": antialias and shrink}
    )
    return F.interpolate(source, size=(height, width), mode=mode, **kwargs)


def _sample(
    chw: torch.Tensor, box: tuple[float, float, float, float], height: int, width: int, mode: str
) -> torch.Tensor:
    """Sample ``box`` at the centres of a ``width`` x ``height`` grid; zeros outside the image
    (float, unrounded)."""
    x0, y0, x1, y1 = box
    rows, cols = chw.shape[-2], chw.shape[-1]
    device = chw.device
    xs = x0 + (torch.arange(width, device=device, dtype=torch.float32) + 0.5) * (x1 - x0) / width
    ys = y0 + (torch.arange(height, device=device, dtype=torch.float32) + 0.5) * (y1 - y0) / height
    # grid_sample's normalised coordinates, align_corners=False: -1 and 1 are the outer edges
    gx, gy = xs / cols * 2 - 1, ys / rows * 2 - 1
    grid = torch.stack(torch.meshgrid(gy, gx, indexing="ij")[::-1], dim=-1).unsqueeze(0)
    inside = (xs >= 0) & (xs < cols)
    inside = inside[None, :] & ((ys >= 0) & (ys < rows))[:, None]
    # torchvision pads outside the image; inside, the edge pixels are replicated (as the warp)
    out = F.grid_sample(
        chw.float(),
        grid,
        mode="nearest" if mode == "nearest" else "bilinear",
        padding_mode="border",
        align_corners=False,
    )
    return out * inside
