"""Pure batched image ops: N x C x H x W in, per-sample parameters as tensors, no host syncs.

Every kernel takes its random parameters explicitly (one value or row per sample), so the same
parameters give the same result on any device; the classes in ``fastload.gpu.transforms`` draw
them. Inputs are uint8 (0-255) or floating point (0-1); outputs keep the input's dtype and
device unless the op's job is to change them (``normalize``). No kernel writes to its input.

Integer results are truncated toward zero after clamping, as torchvision's kernels do, so the
same parameters give the same pixels as torchvision's single-image ops (within one level
where the arithmetic order differs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fastload.gpu.normalizing import (
    NORMALIZE_KERNEL,
    float_batch,
    normalize_planes,
    normalize_terms,
    normalizing_of,
)
from fastload.memory import buffers

__all__ = [
    "NORMALIZE_KERNEL",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "check_images",
    "cutmix",
    "erase",
    "float_batch",
    "gaussian_blur",
    "hflip",
    "mixup",
    "normalize",
    "normalize_planes",
    "normalize_terms",
    "normalizing_of",
    "resized_crop",
    "rgb_to_grayscale",
    "vflip",
]

_GREY_WEIGHTS = (0.2989, 0.587, 0.114)  # ITU-R 601-2 luma, as torchvision and Pillow


def check_images(images: torch.Tensor, op: str, *, channels: Sequence[int] = (1, 3)) -> None:
    """Raise a clear error unless ``images`` is an N x C x H x W uint8 or float tensor."""
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{op} expects an N x C x H x W tensor, got {type(images).__name__}")
    ok_dtype = images.dtype == torch.uint8 or images.is_floating_point()
    if images.ndim != 4 or images.shape[1] not in channels or not ok_dtype:
        want = " or ".join(str(c) for c in channels)
        raise ValueError(
            f"{op} expects an N x C x H x W tensor with C = {want}, dtype uint8 or floating "
            f"point; got shape {tuple(images.shape)} and dtype {images.dtype}"
        )


def _bound(images: torch.Tensor) -> float:
    return 255.0 if images.dtype == torch.uint8 else 1.0


def _working(images: torch.Tensor) -> torch.Tensor:
    """The images in a float dtype fit for arithmetic (float32 for uint8 and half types)."""
    if images.dtype in (torch.uint8, torch.float16, torch.bfloat16):
        return images.float()
    return images


def _restore(result: torch.Tensor, like: torch.Tensor, *, rounding: bool = False) -> torch.Tensor:
    result = result.clamp(0.0, _bound(like))
    if like.dtype == torch.uint8:
        return (result.round() if rounding else result).to(torch.uint8)
    return result.to(like.dtype)


def to_device(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move small per-sample parameters to ``device`` without a host sync.

    A blocking copy from pageable memory waits for the stream's queued work; a non-blocking one
    stages the data at once and returns, so the parameters may be freed right after.
    """
    return values.to(device, non_blocking=True)


def _column(values: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Per-sample values shaped (N, 1, 1, 1) on the images' device, in float32."""
    return to_device(values.float(), images.device).reshape(-1, 1, 1, 1)


def hflip(images: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror left-right the samples where ``flip`` (N booleans) is true."""
    mask = to_device(flip, images.device).reshape(-1, 1, 1, 1)
    return torch.where(mask, images.flip(-1), images)


def vflip(images: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror top-bottom the samples where ``flip`` (N booleans) is true."""
    mask = to_device(flip, images.device).reshape(-1, 1, 1, 1)
    return torch.where(mask, images.flip(-2), images)


def rgb_to_grayscale(images: torch.Tensor) -> torch.Tensor:
    """Luma of RGB images, as an N x 1 x H x W float tensor on the images' scale."""
    x = _working(images)
    r, g, b = x.unbind(1)
    return (r * _GREY_WEIGHTS[0] + g * _GREY_WEIGHTS[1] + b * _GREY_WEIGHTS[2]).unsqueeze(1)


def _grey_reference(images: torch.Tensor) -> torch.Tensor:
    """The grey image the contrast and saturation blends use (floored for integer images)."""
    if images.shape[1] == 1:
        return _working(images)
    grey = rgb_to_grayscale(images)
    return grey.floor() if images.dtype == torch.uint8 else grey


def adjust_brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Scale each sample's intensities by its factor (0 black, 1 unchanged)."""
    return _restore(_working(images) * _column(factor, images), images)


def _blend(images: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = _column(factor, images)
    return _restore(_working(images) * f + other * (1.0 - f), images)


def adjust_contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each sample with its mean grey level (0 flat grey, 1 unchanged)."""
    mean = _grey_reference(images).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(images, mean, factor)


def adjust_saturation(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each sample with its grey version (0 grey, 1 unchanged); grey images pass."""
    if images.shape[1] == 1:
        return images.clone()
    return _blend(images, _grey_reference(images), factor)


def adjust_hue(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate each sample's hue by its shift, in turns (-0.5 to 0.5); grey images pass."""
    if images.shape[1] == 1 or images.shape[0] == 0:
        return images.clone()
    x = _working(images) / _bound(images)
    r, g, b = x.unbind(1)
    value, _ = x.max(dim=1)
    low, _ = x.min(dim=1)
    chroma = value - low
    has_colour = chroma > 0
    safe_chroma = torch.where(has_colour, chroma, torch.ones_like(chroma))
    saturation = torch.where(value > 0, chroma / torch.where(value > 0, value, 1.0), 0.0)
    # Hue in sixths of a turn, from whichever channel is largest (red first, then green).
    hue = torch.where(
        value == r,
        ((g - b) / safe_chroma) % 6.0,
        torch.where(value == g, (b - r) / safe_chroma + 2.0, (r - g) / safe_chroma + 4.0),
    )
    hue = torch.where(has_colour, hue, torch.zeros_like(hue))
    hue = (hue + 6.0 * _column(shift, images)[:, 0]) % 6.0
    # Back to RGB: channel n is v - v*s*clamp(min(k, 4 - k), 0, 1), k = (n + h) mod 6.
    out = []
    for n in (5.0, 3.0, 1.0):
        k = (n + hue) % 6.0
        out.append(value - value * saturation * torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0))
    rgb = torch.stack(out, dim=1)
    if images.dtype == torch.uint8:
        # float -> integer the way torchvision converts: scale by 256 - epsilon, truncate
        return (rgb * (256.0 - 1e-3)).clamp(0, 255).to(torch.uint8)
    return rgb.clamp(0.0, 1.0).to(images.dtype)


def _gaussian_kernels(size: int, sigma: torch.Tensor) -> torch.Tensor:
    """(N, size) normalised 1-D Gaussian kernels, one per sigma."""
    half = (size - 1) * 0.5
    x = torch.linspace(-half, half, size, device=sigma.device, dtype=torch.float32)
    pdf = torch.exp(-0.5 * (x[None, :] / sigma[:, None]) ** 2)
    return pdf / pdf.sum(dim=1, keepdim=True)


def gaussian_blur(
    images: torch.Tensor, kernel_size: tuple[int, int], sigma: torch.Tensor
) -> torch.Tensor:
    """Blur each sample with its own Gaussian.

    Args:
        images: N x C x H x W.
        kernel_size: (width, height) of the kernel, odd and positive.
        sigma: (N, 2) standard deviations along x and y, or (N,) for both.
    """
    n, c, h, w = images.shape
    if n == 0:
        return images.clone()
    sigma = to_device(sigma.float(), images.device)
    if sigma.ndim == 1:
        sigma = torch.stack([sigma, sigma], dim=1)
    kx = _gaussian_kernels(kernel_size[0], sigma[:, 0]).repeat_interleave(c, dim=0)
    ky = _gaussian_kernels(kernel_size[1], sigma[:, 1]).repeat_interleave(c, dim=0)
    pad_x, pad_y = kernel_size[0] // 2, kernel_size[1] // 2
    x = _working(images).reshape(1, n * c, h, w)
    x = F.pad(x, [pad_x, pad_x, pad_y, pad_y], mode="reflect")
    # separable: one grouped pass along x, one along y, a kernel per sample and channel
    x = F.conv2d(x, kx[:, None, None, :], groups=n * c)
    x = F.conv2d(x, ky[:, None, :, None], groups=n * c)
    return _restore(x.reshape(n, c, h, w), images, rounding=True)


def _box_mask(boxes: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
    """(N, 1, H, W) booleans: inside each sample's box (top, left, height, width)."""
    boxes = to_device(boxes, device)
    ys = torch.arange(height, device=device).view(1, height, 1)
    xs = torch.arange(width, device=device).view(1, 1, width)
    top, left, h, w = (boxes[:, i].view(-1, 1, 1) for i in range(4))
    inside = (ys >= top) & (ys < top + h) & (xs >= left) & (xs < left + w)
    return inside.unsqueeze(1)


def erase(
    images: torch.Tensor, boxes: torch.Tensor, value: float | Sequence[float] | torch.Tensor = 0.0
) -> torch.Tensor:
    """Fill each sample's box (top, left, height, width) with ``value``; a box of zero size
    erases nothing.

    Args:
        images: N x C x H x W.
        boxes: (N, 4) integer boxes.
        value: One value, a value per channel, or a tensor broadcastable to the images.
    """
    fill = to_device(torch.as_tensor(value, dtype=images.dtype), images.device)
    if fill.ndim == 1:
        fill = fill.view(1, -1, 1, 1)
    out = _kept_like(images) if fill.numel() in (1, images.shape[1]) else None
    if out is not None:  # the batch copied into kept memory, then each box filled
        out.copy_(images)
        per_channel = fill.reshape(-1, 1, 1)
        for i, (top, left, height, width) in enumerate(boxes.tolist()):
            if height > 0 and width > 0:
                out[i, :, top : top + height, left : left + width] = per_channel
        return out
    mask = _box_mask(boxes, images.shape[2], images.shape[3], images.device)
    return torch.where(mask, fill, images)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(x - mean) / std per channel, after scaling uint8 images to [0, 1]; returns ``dtype``.

    ``mean`` and ``std`` are in torchvision's [0, 1] units whatever the input dtype.
    """
    c = images.shape[1]
    scale = 255.0 if images.dtype == torch.uint8 else 1.0
    mean_t = to_device(torch.as_tensor(mean, dtype=torch.float32), images.device).reshape(
        1, -1, 1, 1
    )
    std_t = to_device(torch.as_tensor(std, dtype=torch.float32), images.device).reshape(1, -1, 1, 1)
    if mean_t.shape[1] not in (1, c) or std_t.shape[1] not in (1, c):
        raise ValueError(
            f"normalize got mean of length {mean_t.shape[1]} and std of length {std_t.shape[1]} "
            f"for images with {c} channels"
        )
    if images.device.type == "cpu" and dtype == torch.float32 and images.ndim == 4:
        factors, shifts = normalize_terms(mean, std, channels=c, uint8=scale == 255.0)
        return normalize_planes(images, factors, shifts)
    # one fused multiply-add: x * (1 / (scale * std)) - mean / std
    return torch.addcmul(-mean_t / std_t, images.float(), 1.0 / (scale * std_t)).to(dtype)


def _taps(start: torch.Tensor, length: torch.Tensor, out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source indices and weights that resample [start, start + length) to ``out`` pixels.

    The weights are the antialiased bilinear (triangle) filter torchvision and Pillow use: its
    support widens with the shrink factor, and taps outside the crop get no weight, as when the
    crop is cut out first and then resized. Computed on the CPU: (N, out, K) each.
    """
    start, length = start.double(), length.double()
    scale = length / out
    support = scale.clamp(min=1.0)
    center = (torch.arange(out, dtype=torch.float64)[None, :] + 0.5) * scale[:, None]
    first = torch.floor(center - support[:, None] + 0.5).clamp(min=0.0)
    k = int(torch.ceil(2.0 * support.max()).item()) + 1  # a CPU tensor: no device sync
    taps = first[..., None] + torch.arange(k, dtype=torch.float64)
    weight = (1.0 - ((taps + 0.5 - center[..., None]) / support[:, None, None]).abs()).clamp(
        min=0.0
    )
    weight = weight * (taps < length[:, None, None])
    weight = weight / weight.sum(-1, keepdim=True)
    last = (start + length - 1.0)[:, None, None]
    index = torch.minimum(taps + start[:, None, None], last).long()
    return index, weight.float()


def resized_crop(
    images: torch.Tensor | Sequence[torch.Tensor],
    boxes: torch.Tensor,
    size: tuple[int, int],
) -> torch.Tensor:
    """Crop each sample's box (top, left, height, width) and resize it to ``size`` (h, w).

    Samples may differ in size when given as a list of C x H x W tensors. Resampling is
    torchvision's antialiased bilinear (a crop, then ``resize(antialias=True)``): on a GPU,
    batched, each output pixel gathering a few source taps per axis with per-sample weights; on
    the CPU, torch's antialiased kernel per sample.
    """
    if isinstance(images, torch.Tensor):
        batch = images
    else:
        if len(images) == 0:
            raise ValueError("resized_crop got an empty list of images")
        height = max(im.shape[-2] for im in images)
        width = max(im.shape[-1] for im in images)
        batch = images[0].new_zeros((len(images), images[0].shape[0], height, width))
        for i, im in enumerate(images):  # the padding gets no weight
            batch[i, :, : im.shape[-2], : im.shape[-1]] = im
    n, c, _, width = batch.shape
    out_h, out_w = size
    if n == 0:
        return batch.new_zeros((0, c, out_h, out_w))
    boxes = boxes.cpu()
    if batch.device.type == "cpu":
        # On the CPU, torch's own antialiased kernel per sample (torchvision's result exactly)
        # beats any batched gather: there is no kernel launch to amortise.
        return _resized_crop_each(batch, boxes, size)
    return _resized_crop_batched(batch, boxes, size)


def _resized_crop_each(
    batch: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    native = batch.dtype in (torch.uint8, torch.float32, torch.float64)
    work = batch if native else batch.float()  # no half-precision kernel on the CPU
    crops = [
        F.interpolate(
            work[i : i + 1, :, t : t + h, left : left + w],
            size=size,
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
        for i, (t, left, h, w) in enumerate(boxes.tolist())
    ]
    return torch.cat(crops).to(batch.dtype)


def _resized_crop_batched(
    batch: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    n, c, _, width = batch.shape
    out_h, out_w = size
    top, left, h, w = boxes.unbind(1)
    device = batch.device
    rows, row_weights = (to_device(t, device) for t in _taps(top, h, out_h))
    cols, col_weights = (to_device(t, device) for t in _taps(left, w, out_w))
    x = _working(batch)
    # rows first: the output has fewer rows than most sources, so the next gather is smaller
    ky = rows.shape[-1]
    gathered = torch.gather(x, 2, rows.view(n, 1, out_h * ky, 1).expand(n, c, out_h * ky, width))
    x = (gathered.view(n, c, out_h, ky, width) * row_weights.view(n, 1, out_h, ky, 1)).sum(3)
    kx = cols.shape[-1]
    gathered = torch.gather(x, 3, cols.view(n, 1, 1, out_w * kx).expand(n, c, out_h, out_w * kx))
    x = (gathered.view(n, c, out_h, out_w, kx) * col_weights.view(n, 1, 1, out_w, kx)).sum(4)
    return _restore(x, batch, rounding=True)


def one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    if labels.ndim == 2:  # already soft: (N, num_classes)
        if labels.shape[1] != num_classes:
            raise ValueError(f"soft labels have {labels.shape[1]} classes, expected {num_classes}")
        return labels.to(dtype)
    if labels.ndim != 1 or labels.is_floating_point():
        raise ValueError(
            f"labels must be N integer class indices or N x {num_classes} soft labels; "
            f"got shape {tuple(labels.shape)} and dtype {labels.dtype}"
        )
    return F.one_hot(labels.long(), num_classes).to(dtype)


def label_dtype(images: torch.Tensor) -> torch.dtype:
    return images.dtype if images.is_floating_point() else torch.float32


def mixup(
    images: torch.Tensor, labels: torch.Tensor, lam: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mix each sample with the one before it in the batch (the batch rolled by one).

    Returns the mixed images (same dtype) and soft labels (N x num_classes):
    ``lam * own + (1 - lam) * partner`` for both, with one ``lam`` per sample. A mix of two
    images lies between them: float images keep their values' range whatever it is (normalized
    ones included); uint8 ones are rounded.
    """
    soft = one_hot(labels, num_classes, label_dtype(images))
    lam_images = _column(lam, images)
    out = _kept_like(images)
    if out is not None:  # the same arithmetic, sample by sample into kept memory
        for i in range(images.shape[0]):
            torch.mul(images[i], lam_images[i], out=out[i])
            out[i].add_(images[i - 1] * (1.0 - lam_images[i]))
        mixed = out
    else:
        mixed = _working(images) * lam_images + _working(images.roll(1, 0)) * (1.0 - lam_images)
        mixed = _restore(mixed, images, rounding=True) if images.dtype == torch.uint8 else mixed
    lam_labels = to_device(lam.to(soft.dtype), soft.device).view(-1, 1)
    return (
        mixed.to(images.dtype),
        soft * lam_labels + soft.roll(1, 0) * (1.0 - lam_labels),
    )


def cutmix(
    images: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Paste each sample's box (top, left, height, width) from the sample before it.

    Labels mix by area: ``own * (1 - box area / image area) + partner * box area / image area``.
    """
    h, w = images.shape[-2:]
    soft = one_hot(labels, num_classes, label_dtype(images))
    out = _kept_like(images)
    if out is not None:  # the batch copied into kept memory, then each box from its partner
        out.copy_(images)
        for i, (top, left, height, width) in enumerate(boxes.tolist()):
            box = (slice(None), slice(top, top + height), slice(left, left + width))
            out[i][box] = images[i - 1][box]
        pasted = out
    else:
        mask = _box_mask(boxes, h, w, images.device)
        pasted = torch.where(mask, images.roll(1, 0), images)
    boxes = to_device(boxes, soft.device)
    kept = 1.0 - (boxes[:, 2] * boxes[:, 3]).to(soft.dtype).view(-1, 1) / (h * w)
    return pasted, soft * kept + soft.roll(1, 0) * (1.0 - kept)


def _kept_like(images: torch.Tensor) -> torch.Tensor | None:
    """Kept memory (:func:`float_batch`) laid out as ``images``, for a CPU float32 batch op
    whose result is a new batch; ``None`` elsewhere, or for images in another layout than the
    kept memory's (the op's own torch expression then).

    Made anew, a float32 batch of 64 x 3 x 224 x 224 faults in 38.5 MB of fresh pages (past
    glibc's largest threshold for reusing freed memory, 32 MB), and in a worker process goes
    through shared memory once more when sent: MixUp, CutMix and RandomErasing after Normalize
    ran the loader at 0.2-0.35x its rate (measured, 2 workers).
    """
    if images.device.type != "cpu" or images.dtype != torch.float32 or images.ndim != 4:
        return None
    layout = torch.channels_last if buffers.in_channels_last() else torch.contiguous_format
    if images.shape[0] == 0 or not images.is_contiguous(memory_format=layout):
        return None  # asked before taking: a slot taken and dropped would wait for settle
    return float_batch(images.shape)


def sample_beta(alpha: float, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``n`` draws from Beta(alpha, alpha) on the CPU, reproducible from ``generator``.

    torch's Beta distribution cannot take a generator; this draws two Gamma variates per sample
    (Marsaglia and Tsang's method, with the boost for shapes below 1) from uniform and normal
    draws that can.
    """
    g1 = _sample_gamma(alpha, n, generator)
    g2 = _sample_gamma(alpha, n, generator)
    return g1 / (g1 + g2)


def _sample_gamma(shape: float, n: int, generator: torch.Generator | None) -> torch.Tensor:
    boost = shape < 1.0
    k = shape + 1.0 if boost else shape
    d = k - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(n, dtype=torch.float64)
    todo = torch.arange(n)
    while todo.numel():
        m = todo.numel()
        z = torch.randn(m, generator=generator, dtype=torch.float64)
        u = torch.rand(m, generator=generator, dtype=torch.float64)
        v = (1.0 + c * z) ** 3
        accept = (v > 0) & (
            torch.log(u) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp_min(1e-300))
        )
        out[todo[accept]] = (d * v)[accept]
        todo = todo[~accept]
    if boost:
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        out = out * u ** (1.0 / shape)
    return out.float()
