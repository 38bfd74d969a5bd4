"""fastload.gpu.separable's weights against torch's own resampling kernels, on CPU tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fastload.gpu import separable as S

CPU = torch.device("cpu")


def rendered(image: torch.Tensor, rows: tuple, cols: tuple, out: tuple[int, int], mode: str):
    """``image`` (1 x 3 x H x W) resampled with the weights, padded on the way (as batched)."""
    _, _, height, width = image.shape
    buffer = torch.zeros(1, height + 7, width + 3, 3)
    buffer[0, :height, :width] = image[0].permute(1, 2, 0)
    first = S.axis_weights([rows], out[0], height + 7, mode, CPU)
    second = S.axis_weights([cols], out[1], width + 3, mode, CPU)
    return S.contract(buffer, first, second).permute(0, 3, 2, 1)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize(
    ("box", "out"),
    [
        ((0, 0, 50, 40), (20, 30)),  # shrink one way, grow the other
        ((0, 0, 50, 40), (90, 17)),
        ((5, 7, 30, 21), (13, 13)),  # a crop, then a resize
        ((0, 0, 50, 40), (50, 40)),  # nothing to do
    ],
)
def test_resize_is_interpolate(mode: str, antialias: bool, box: tuple, out: tuple) -> None:
    torch.manual_seed(0)
    image = torch.rand(1, 3, 50, 40) * 255
    y0, x0, h, w = box
    kwargs = {} if mode == "nearest" else {"align_corners": False, "antialias": antialias}
    crop = image[:, :, y0 : y0 + h, x0 : x0 + w]
    expected = F.interpolate(crop, size=out, mode=mode, **kwargs)
    rows = S.axis(S.RESIZE, y0, h, out[0], 0, 50, antialias=antialias)
    cols = S.axis(S.RESIZE, x0, w, out[1], 0, 40, antialias=antialias)
    assert (rendered(image, rows, cols, out, mode) - expected).abs().max() < 2e-3


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_resize_then_a_crop_keeps_the_rows_of_the_whole_resize(mode: str) -> None:
    image = torch.rand(1, 3, 45, 60, generator=torch.Generator().manual_seed(1)) * 255
    full = F.interpolate(image, size=(30, 40), mode=mode, align_corners=False, antialias=True)
    rows = S.axis(S.RESIZE, 0, 45, 30, 5, 45, antialias=True, mirror=True)
    cols = S.axis(S.RESIZE, 0, 60, 40, 8, 60, antialias=True)
    expected = full[:, :, 5:25, 8:32].flip(2)  # the mirror reverses the rows
    assert (rendered(image, rows, cols, (20, 24), mode) - expected).abs().max() < 2e-3


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_a_sampled_box_is_grid_sample_with_zeros_outside(mode: str) -> None:
    image = torch.rand(1, 3, 30, 40, generator=torch.Generator().manual_seed(2)) * 255
    (x0, y0, x1, y1), (h, w) = (-6.5, 3.25, 44.0, 27.5), (16, 20)
    xs = x0 + (torch.arange(w) + 0.5) * (x1 - x0) / w
    ys = y0 + (torch.arange(h) + 0.5) * (y1 - y0) / h
    grid = torch.stack(torch.meshgrid(ys / 30 * 2 - 1, xs / 40 * 2 - 1, indexing="ij")[::-1], -1)
    sampled = F.grid_sample(
        image, grid[None], mode=mode, padding_mode="border", align_corners=False
    )
    inside = ((ys >= 0) & (ys < 30))[:, None] & ((xs >= 0) & (xs < 40))[None, :]
    rows = S.axis(S.SAMPLE, y0, y1, 0, 0, 30)
    cols = S.axis(S.SAMPLE, x0, x1, 0, 0, 40, mirror=True)
    expected = (sampled * inside).flip(3)
    assert (rendered(image, rows, cols, (h, w), mode) - expected).abs().max() < 2e-3


def test_a_bad_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"mode='area': choose 'bilinear', 'bicubic' or"):
        S.axis_weights([S.axis(S.RESIZE, 0, 4, 2, 0, 4)], 2, 4, "area", CPU)


def test_exact_fp32_leaves_the_cpu_and_a_cleared_switch_alone() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    with S.exact_fp32(torch.device("cpu")):
        assert matmul.allow_tf32 == before
    matmul.allow_tf32 = True
    try:
        with S.exact_fp32(torch.device("cuda")):
            assert not matmul.allow_tf32  # what the renderer's matmuls run under
        assert matmul.allow_tf32
    finally:
        matmul.allow_tf32 = before
