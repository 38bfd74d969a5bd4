"""fastload.gpu.functional against torchvision's single-image ops, same parameters.

Tolerance: every op is within one grey level of torchvision (max absolute difference), the
gap coming from float arithmetic order and torchvision's fixed-point uint8 kernels; flips and
erasing are exact.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from fastload.gpu import functional as F
from fastload.gpu import normalizing


def batch(n: int = 6, h: int = 40, w: int = 48, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    g = torch.Generator().manual_seed(n * 1000 + h)
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    base = torch.stack([(x * 5 + y * 3) % 256, (x * 2 + 40) % 256, (y * 6 + 90) % 256]).float()
    images = base[None] + torch.randint(-30, 30, (n, 3, h, w), generator=g)
    images = images.clamp(0, 255).to(torch.uint8)
    return images if dtype == torch.uint8 else images.to(dtype) / 255


def assert_close_levels(ours: torch.Tensor, theirs: torch.Tensor, levels: float = 1.0) -> None:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    scale = 1.0 if ours.dtype == torch.uint8 else 255.0
    diff = (ours.double() - theirs.double()).abs() * scale
    assert diff.max() <= levels + 1e-3, float(diff.max())


DTYPES = [torch.uint8, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flips(dtype) -> None:
    x = batch(dtype=dtype)
    decide = torch.tensor([True, False, True, True, False, False])
    out = F.hflip(x, decide)
    for i in range(len(x)):
        assert torch.equal(out[i], TF.horizontal_flip(x[i]) if decide[i] else x[i])
    out = F.vflip(x, decide)
    for i in range(len(x)):
        assert torch.equal(out[i], TF.vertical_flip(x[i]) if decide[i] else x[i])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "ours, theirs, factors",
    [
        (F.adjust_brightness, TF.adjust_brightness, [0.0, 0.5, 1.0, 1.3, 2.0, 0.77]),
        (F.adjust_contrast, TF.adjust_contrast, [0.0, 0.5, 1.0, 1.3, 2.0, 0.77]),
        (F.adjust_saturation, TF.adjust_saturation, [0.0, 0.5, 1.0, 1.3, 2.0, 0.77]),
        (F.adjust_hue, TF.adjust_hue, [-0.5, -0.2, 0.0, 0.1, 0.33, 0.5]),
    ],
)
def test_colour_ops_match_torchvision_per_sample(ours, theirs, factors, dtype) -> None:
    x = batch(dtype=dtype)
    out = ours(x, torch.tensor(factors))
    for i, f in enumerate(factors):
        assert_close_levels(out[i], theirs(x[i], f), levels=1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grayscale(dtype) -> None:
    x = batch(dtype=dtype)
    grey = F.rgb_to_grayscale(x).to(dtype).expand_as(x)
    assert_close_levels(grey, TF.rgb_to_grayscale(x, num_output_channels=3), levels=1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_blur_per_sample_sigma(dtype) -> None:
    x = batch(dtype=dtype)
    sigma = torch.tensor([0.3, 0.8, 1.0, 1.5, 2.0, 3.0])
    out = F.gaussian_blur(x, (7, 5), sigma)
    for i, s in enumerate(sigma.tolist()):
        assert_close_levels(out[i], TF.gaussian_blur(x[i], [7, 5], [s, s]), levels=1.0)


def test_erase_exact() -> None:
    x = batch()
    boxes = torch.tensor(
        [[0, 0, 5, 5], [10, 3, 7, 20], [0, 0, 0, 0], [39, 47, 1, 1], [2, 2, 30, 40], [5, 9, 0, 4]]
    )
    out = F.erase(x, boxes, 17)
    for i, (t, left, h, w) in enumerate(boxes.tolist()):
        expected = (
            TF.erase(x[i], t, left, h, w, torch.tensor(17, dtype=torch.uint8)) if h and w else x[i]
        )
        assert torch.equal(out[i], expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_normalize(dtype, out_dtype) -> None:
    x = batch(dtype=dtype)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    out = F.normalize(x, mean, std, dtype=out_dtype)
    expected = TF.normalize(TF.to_dtype(x, torch.float32, scale=True), mean, std)
    assert out.dtype == out_dtype
    torch.testing.assert_close(
        out.float(), expected, atol=2e-2 if out_dtype != torch.float32 else 1e-5, rtol=1e-2
    )


@pytest.mark.parametrize("kernel", [F.resized_crop, F._resized_crop_batched])
@pytest.mark.parametrize("size", [(24, 24), (64, 80), (200, 220)])
def test_resized_crop_matches_torchvision(size, kernel) -> None:
    """Both paths: per sample (what the CPU runs) and batched (what a GPU runs)."""
    x = batch(4, 120, 160)
    boxes = torch.tensor([[0, 0, 120, 160], [10, 20, 60, 50], [33, 7, 80, 100], [100, 140, 20, 20]])
    out = kernel(x, boxes, size)
    for i, (t, left, h, w) in enumerate(boxes.tolist()):
        ref = TF.resized_crop(x[i], t, left, h, w, list(size), antialias=True)
        assert_close_levels(out[i], ref, levels=1.0)


def test_resized_crop_from_images_of_different_sizes() -> None:
    a, b = batch(1, 50, 60)[0], batch(1, 90, 30)[0]
    boxes = torch.tensor([[5, 5, 40, 50], [10, 0, 60, 30]])
    out = F.resized_crop([a, b], boxes, (16, 16))
    assert out.shape == (2, 3, 16, 16)
    assert torch.equal(out[1], F.resized_crop(b[None], boxes[1:], (16, 16))[0])


def test_mixup_formula() -> None:
    x = batch(4, dtype=torch.float32)
    labels = torch.tensor([0, 1, 2, 1])
    lam = torch.tensor([1.0, 0.25, 0.5, 0.0])
    images, soft = F.mixup(x, labels, lam, num_classes=3)
    for i in range(4):
        j = (i - 1) % 4
        torch.testing.assert_close(images[i], lam[i] * x[i] + (1 - lam[i]) * x[j])
    assert torch.allclose(soft[1], torch.tensor([0.75, 0.25, 0.0]))
    assert torch.allclose(soft.sum(1), torch.ones(4))


def test_cutmix_pastes_the_box_and_mixes_labels_by_area() -> None:
    x = batch(3, 10, 10)
    boxes = torch.tensor([[0, 0, 5, 10], [2, 2, 0, 0], [1, 1, 3, 3]])
    images, soft = F.cutmix(x, torch.tensor([0, 1, 2]), boxes, num_classes=3)
    assert torch.equal(images[0, :, :5], x[2, :, :5]) and torch.equal(images[0, :, 5:], x[0, :, 5:])
    assert torch.equal(images[1], x[1])
    assert torch.allclose(soft[0], torch.tensor([0.5, 0.0, 0.5]))
    assert torch.allclose(soft[2], torch.tensor([0.0, 0.09, 0.91]))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_mixing_normalized_images_keeps_their_values(layout: str) -> None:
    """After Normalize the values are negative and past 1: a mix lies between its two images,
    nothing is clamped (fastload clamped to [0, 1] before). Into kept memory on the CPU, with
    the same arithmetic as the batch expression; CutMix's boxes are its partner's values."""
    x = torch.randn(5, 3, 12, 10) * 2
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    labels, lam = torch.tensor([0, 1, 2, 1, 0]), torch.tensor([1.0, 0.25, 0.5, 0.0, 0.7])
    images, _ = F.mixup(x, labels, lam, num_classes=3)
    column = lam.view(-1, 1, 1, 1)
    assert torch.equal(images, x * column + x.roll(1, 0) * (1.0 - column))
    assert images.min() < 0 and images.max() > 1
    boxes = torch.tensor([[0, 0, 5, 10], [2, 2, 0, 0], [1, 1, 3, 3], [0, 0, 12, 10], [4, 3, 2, 5]])
    pasted, _ = F.cutmix(x, labels, boxes, num_classes=3)
    mask = torch.zeros(5, 1, 12, 10, dtype=torch.bool)
    for i, (top, left, h, w) in enumerate(boxes.tolist()):
        mask[i, :, top : top + h, left : left + w] = True
    assert torch.equal(pasted, torch.where(mask, x.roll(1, 0), x))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("value", [0.0, [0.5, -1.0, 2.0]])
def test_erasing_float_batches_on_the_cpu_fills_only_the_boxes(layout: str, value) -> None:
    x = torch.randn(4, 3, 12, 10)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    boxes = torch.tensor([[0, 0, 5, 10], [2, 2, 0, 0], [1, 1, 3, 3], [11, 9, 1, 1]])
    out = F.erase(x, boxes, value)
    mask = torch.zeros(4, 1, 12, 10, dtype=torch.bool)
    for i, (top, left, h, w) in enumerate(boxes.tolist()):
        mask[i, :, top : top + h, left : left + w] = True
    fill = torch.as_tensor(value, dtype=torch.float32).reshape(1, -1, 1, 1)
    assert torch.equal(out, torch.where(mask, fill, x))


def test_mixed_and_erased_batches_in_a_worker_are_written_into_its_kept_shared_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalizing, "get_worker_info", lambda: object())
    x = torch.randn(3, 3, 8, 8)
    labels, lam = torch.tensor([0, 1, 2]), torch.tensor([0.3, 0.6, 0.9])
    mixed, _ = F.mixup(x, labels, lam, num_classes=3)
    pasted, _ = F.cutmix(x, labels, torch.tensor([[0, 0, 4, 4]] * 3), num_classes=3)
    erased = F.erase(x, torch.tensor([[0, 0, 4, 4]] * 3))
    assert mixed.is_shared() and pasted.is_shared() and erased.is_shared()  # where sent from


@pytest.mark.parametrize("alpha", [0.2, 1.0, 4.0])
def test_beta_draws(alpha) -> None:
    draws = F.sample_beta(alpha, 20000, torch.Generator().manual_seed(1))
    assert draws.min() >= 0 and draws.max() <= 1
    assert abs(draws.mean().item() - 0.5) < 0.01
    assert abs(draws.var().item() - 1 / (4 * (2 * alpha + 1))) < 0.01
    again = F.sample_beta(alpha, 20000, torch.Generator().manual_seed(1))
    assert torch.equal(draws, again)


def test_kernels_do_not_modify_their_input() -> None:
    x = batch()
    before = x.clone()
    n = len(x)
    F.hflip(x, torch.ones(n, dtype=torch.bool))
    F.adjust_hue(x, torch.full((n,), 0.2))
    F.gaussian_blur(x, (3, 3), torch.ones(n))
    F.erase(x, torch.tensor([[0, 0, 4, 4]] * n))
    F.mixup(x, torch.zeros(n, dtype=torch.long), torch.full((n,), 0.5), 2)
    assert torch.equal(x, before)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(3, 8, 8, dtype=torch.uint8), r"got shape \(3, 8, 8\)"),
        (torch.zeros(2, 4, 8, 8, dtype=torch.uint8), r"C = 1 or 3.*got shape \(2, 4, 8, 8\)"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.int32), r"dtype torch.int32"),
    ],
)
def test_bad_input_names_expected_and_received(bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        F.check_images(bad, "Op")


def test_normalize_in_a_worker_writes_into_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch a worker sends goes through shared memory: made there, nothing is copied into
    it afterwards; in the main process it is ordinary memory. The values are the same."""
    x = batch(dtype=torch.uint8)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    here = F.normalize(x, mean, std)
    monkeypatch.setattr(normalizing, "get_worker_info", lambda: object())
    in_worker = F.normalize(x, mean, std)
    assert in_worker.is_shared() and not here.is_shared()
    assert in_worker.is_contiguous() and torch.equal(in_worker, here)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("channels", [1, 3])
def test_normalize_on_the_cpu_every_layout_gives_torchvisions_values(
    dtype, layout, channels
) -> None:
    """The CPU's plane-by-plane path (contiguous uint8 and float32) and torch's (any other
    layout or dtype) both give torchvision's numbers, for one mean per channel or one for all."""
    x = batch(dtype=dtype)[:, :channels]
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    mean, std = [0.485, 0.456, 0.406][:channels], [0.229, 0.224, 0.225][:channels]
    for m, s in ((mean, std), ([0.5], [0.25])):
        out = F.normalize(x, m, s)
        per_channel = channels // len(m)
        expected = TF.normalize(
            TF.to_dtype(x, torch.float32, scale=True), m * per_channel, s * per_channel
        )
        assert out.dtype == torch.float32 and out.is_contiguous()
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_normalize_of_an_empty_image_batch_on_the_cpu() -> None:
    out = F.normalize(torch.zeros(2, 3, 0, 5, dtype=torch.uint8), [0.5] * 3, [0.25] * 3)
    assert out.shape == (2, 3, 0, 5) and out.dtype == torch.float32
