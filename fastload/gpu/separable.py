"""Resampling a whole batch with two batched matmuls.

Each sample's output rows are a weight matrix over its input rows, and its output columns one
over its input columns: ``out = A @ image @ B.T`` per sample, for every sample of a batch at
once (``torch.bmm``), however their crops, sizes and flips differ. The weights are the ones
torch's own kernels use, so the result is ``F.interpolate``'s (antialiased or not, bilinear,
bicubic or nearest) or ``F.grid_sample``'s, up to float rounding:

* a *resize* axis resizes the window ``[start, start + length)`` of the input to ``full``
  pixels and keeps ``out`` of them from ``offset`` on (a crop then a resize, or a resize then
  a crop: torchvision's ``RandomResizedCrop`` and ``Resize`` + ``CenterCrop``);
* a *sample* axis samples ``[start, stop)`` at the centres of ``out`` pixels, bilinearly or at
  the nearest pixel, with the edge pixels repeated inside the image and zeros outside it
  (a box off the pixel grid, or a crop larger than the image).

A mirrored axis has its rows reversed. Inputs are zero-padded to one size, so any number of
samples costs the same number of kernel launches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

__all__ = ["RESIZE", "SAMPLE", "axis", "axis_weights", "contract", "exact_fp32", "pack"]

RESIZE, SAMPLE = 0.0, 1.0

# the columns of one axis's description (see :func:`axis`)
_KIND, _START, _LENGTH, _FULL, _OFFSET, _SIZE, _ANTIALIAS, _MIRROR = range(8)


def axis(
    kind: float,
    start: float,
    length: float,
    full: float,
    offset: float,
    size: int,
    *,
    antialias: bool = False,
    mirror: bool = False,
) -> tuple[float, ...]:
    """One axis of one sample, as a row of numbers (a batch's rows become one tensor).

    Args:
        kind: :data:`RESIZE` or :data:`SAMPLE`.
        start: Resize: the window's first input pixel. Sample: where the box starts.
        length: Resize: the window's length in pixels. Sample: where the box stops.
        full: Resize: the size the window is resized to. Sample: unused.
        offset: Resize: the first of the resized pixels kept. Sample: unused.
        size: The input's length along this axis (pixels beyond it are padding).
        antialias: Resize: torch's antialiased kernel (``antialias=True``) was asked for.
        mirror: Reverse the output along this axis.
    """
    return (kind, start, length, full, offset, float(size), float(antialias), float(mirror))


def axis_weights(
    axes: Sequence[tuple[float, ...]], out: int, length: int, mode: str, device: torch.device
) -> torch.Tensor:
    """The weight matrices of a batch's axes: N x ``out`` x ``length`` float32 on ``device``.

    Args:
        axes: N rows made by :func:`axis`.
        out: The output length (the same for every sample).
        length: The padded input length.
        mode: ``"bilinear"``, ``"bicubic"`` or ``"nearest"``.
        device: Where the weights are built and wanted (one copy of ``axes`` goes there).
    """
    if mode not in ("bilinear", "bicubic", "nearest"):
        raise ValueError(f"mode={mode!r}: choose 'bilinear', 'bicubic' or 'nearest'")
    # read on the host, so that building the weights never waits for the device
    sampled = any(row[_KIND] == SAMPLE for row in axes)
    plain = mode == "bicubic" and any(not row[_ANTIALIAS] for row in axes)
    col = pack(axes, device).unsqueeze(-1)  # N x 8 x 1: each column broadcasts over the outputs
    i = torch.arange(out, dtype=torch.float64, device=device)
    i = torch.where(col[:, _MIRROR] > 0, out - 1 - i, i)  # N x out
    j = torch.arange(length, dtype=torch.float64, device=device).view(1, 1, length)
    weight = _resize_weights(col, i, j, mode, plain=plain)
    if sampled:
        on_samples = (col[:, _KIND] == SAMPLE).unsqueeze(-1)
        weight = torch.where(on_samples, _sample_weights(col, i, j, mode), weight)
    return weight.float()


def _resize_weights(
    col: torch.Tensor, i: torch.Tensor, j: torch.Tensor, mode: str, *, plain: bool
) -> torch.Tensor:
    start, length = col[:, _START], col[:, _LENGTH]
    scale = length / col[:, _FULL]  # input pixels per resized pixel, as torch computes it
    position = col[:, _OFFSET] + i  # the resized pixel each output is
    local = (j - start.unsqueeze(-1)).expand(-1, i.shape[1], -1)  # inputs in window units
    if mode == "nearest":  # torch: floor(index * scale), clamped to the last pixel
        index = torch.minimum(torch.floor(position * scale), length - 1)
        return (local == index.unsqueeze(-1)).double()
    center = (position + 0.5) * scale
    antialias = (col[:, _ANTIALIAS] > 0) & (scale >= 1)
    half = 1.0 if mode == "bilinear" else 2.0  # the filter's support, unscaled
    support = torch.where(antialias, half * scale, torch.full_like(scale, half))
    invscale = torch.where(antialias, 1 / scale, torch.ones_like(scale))
    first = torch.floor(center - support + 0.5).clamp(min=0).unsqueeze(-1)
    stop = torch.minimum(torch.floor(center + support + 0.5), length).unsqueeze(-1)
    x = (local - center.unsqueeze(-1) + 0.5) * invscale.unsqueeze(-1)
    weight = _triangle(x) if mode == "bilinear" else _cubic(x, -0.5)
    weight = weight * ((local >= first) & (local < stop))
    weight = weight / weight.sum(-1, keepdim=True).clamp(min=1e-12)
    if plain:  # without antialias, torch's bicubic is another kernel
        clamped = _cubic_clamped(center - 0.5, local, length.unsqueeze(-1))
        weight = torch.where((col[:, _ANTIALIAS] == 0).unsqueeze(-1), clamped, weight)
    return weight


def _sample_weights(col: torch.Tensor, i: torch.Tensor, j: torch.Tensor, mode: str) -> torch.Tensor:
    start, stop, size = col[:, _START], col[:, _LENGTH], col[:, _SIZE]
    centre = start + (i + 0.5) * (stop - start) / i.shape[1]  # in input pixels
    inside = ((centre >= 0) & (centre < size)).unsqueeze(-1)
    # grid_sample with align_corners=False and border padding: the clamped pixel position
    p = torch.minimum((centre - 0.5).clamp(min=0), size - 1).unsqueeze(-1)
    # nearest: round half to even, as grid_sample
    weight = (j == torch.round(p)).double() if mode == "nearest" else _triangle(j - p)
    return weight * inside


def _triangle(x: torch.Tensor) -> torch.Tensor:
    return (1 - x.abs()).clamp(min=0)


def _cubic(x: torch.Tensor, a: float) -> torch.Tensor:
    """Keys' cubic convolution kernel (``a`` = -0.5 in torch's antialiased bicubic)."""
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def _cubic_clamped(source: torch.Tensor, local: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """torch's bicubic without antialias: four taps around ``source`` with a = -0.75, taps
    beyond the edge read the edge pixel."""
    base = torch.floor(source)
    t = (source - base).unsqueeze(-1)
    weight = torch.zeros_like(local)
    for k in (-1, 0, 1, 2):
        tap = torch.minimum((base + k).clamp(min=0).unsqueeze(-1), length - 1)
        weight = weight + _cubic(t - k, -0.75) * (local == tap)
    return weight


def contract(images: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``first`` along axis 1 and ``second`` along axis 2 of N x P x Q x C ``images``.

    Args:
        images: N x P x Q x C float32.
        first: N x p x P weights.
        second: N x q x Q weights.

    Returns:
        N x q x p x C: the second axis leads (the copy between the matmuls swaps them).
    """
    n, rows, cols, channels = images.shape
    p, q = first.shape[1], second.shape[1]
    with exact_fp32(images.device):
        half = torch.bmm(first, images.view(n, rows, cols * channels))  # N x p x Q*C
        half = half.view(n, p, cols, channels).transpose(1, 2).reshape(n, cols, p * channels)
        out = torch.bmm(second, half)  # N x q x p*C
    return out.view(n, q, p, channels)


@contextlib.contextmanager
def exact_fp32(device: torch.device) -> Iterator[None]:
    """float32 matmuls in full precision on a CUDA device while the block runs.

    TF32 (10 mantissa bits) moves pixels by up to a grey level. Its switch is process-wide, so
    another thread's matmuls in the meantime also run in full precision: slower, not wrong.
    """
    matmul = torch.backends.cuda.matmul
    if device.type != "cuda" or not matmul.allow_tf32:
        yield
        return
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = True


def pack(rows: Sequence[tuple[float, ...]], device: torch.device) -> torch.Tensor:
    """A batch's axis rows as one float64 tensor on ``device`` (one copy)."""
    return torch.tensor(rows, dtype=torch.float64).to(device, non_blocking=True)
