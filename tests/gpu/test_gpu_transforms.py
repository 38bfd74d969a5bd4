"""fastload.gpu's classes: per-sample independence, reproducibility, bad input."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as T

from fastload import gpu


def images(n: int = 16, h: int = 32, w: int = 40, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    g = torch.Generator().manual_seed(n + h + w)
    x = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


ALL_OPS = [
    lambda g: gpu.RandomHorizontalFlip(generator=g),
    lambda g: gpu.RandomVerticalFlip(generator=g),
    lambda g: gpu.RandomResizedCrop(24, generator=g),
    lambda g: gpu.ColorJitter(0.4, 0.4, 0.4, 0.1, generator=g),
    lambda g: gpu.RandomGrayscale(0.5, generator=g),
    lambda g: gpu.GaussianBlur(5, generator=g),
    lambda g: gpu.RandomErasing(generator=g),
    lambda g: gpu.RandomApply(gpu.GaussianBlur(3, generator=g), p=0.5, generator=g),
]


@pytest.mark.parametrize("make", ALL_OPS[:-1])  # RandomApply draws through the op it wraps
def test_make_params_draws_what_the_op_would_apply(make) -> None:
    """Drawing apart from applying: make_params + apply_params is the op's own call."""
    x = images()
    op, twin = make(seeded(5)), make(seeded(5))
    parts = twin.apply_params(x, twin.make_params(len(x), x.shape[2], x.shape[3]))
    assert torch.equal(op(x), parts)


def test_label_mixers_draw_with_make_params() -> None:
    x, labels = images(), torch.arange(16) % 4
    mixed, soft = gpu.MixUp(num_classes=4, generator=seeded(2))(x, labels)
    lam = gpu.MixUp(num_classes=4, generator=seeded(2)).make_params(16, 32, 40)["lam"]
    expected, expected_soft = gpu.functional.mixup(x, labels, lam, 4)
    assert torch.equal(mixed, expected) and torch.equal(soft, expected_soft)
    cut, _ = gpu.CutMix(num_classes=4, generator=seeded(2))(x, labels)
    boxes = gpu.CutMix(num_classes=4, generator=seeded(2)).make_params(16, 32, 40)["boxes"]
    assert torch.equal(cut, gpu.functional.cutmix(x, labels, boxes, 4)[0])


def test_one_base_owns_p() -> None:
    for op in (
        gpu.RandomHorizontalFlip(0.3),
        gpu.RandomVerticalFlip(0.3),
        gpu.RandomGrayscale(0.3),
        gpu.RandomErasing(0.3),
        gpu.RandomApply(gpu.GaussianBlur(3), p=0.3),
    ):
        assert isinstance(op, gpu.RandomTransform) and op.p == 0.3
        drawn = op.make_params(4000, 32, 40)["apply"]
        assert drawn.dtype == torch.bool and abs(drawn.float().mean().item() - 0.3) < 0.05
    with pytest.raises(ValueError, match=r"p=1\.5 must be a number within \[0, 1\]"):
        gpu.RandomGrayscale(1.5)


@pytest.mark.parametrize("make", ALL_OPS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
def test_every_op_keeps_dtype_and_device_and_leaves_input_alone(make, dtype) -> None:
    x = images(dtype=dtype)
    before = x.clone()
    out = make(seeded())(x)
    assert out.dtype == dtype and out.device == x.device and out.shape[:2] == x.shape[:2]
    assert torch.equal(x, before)


@pytest.mark.parametrize("make", ALL_OPS)
def test_same_seed_same_batch_other_seed_other_batch(make) -> None:
    x = images()
    a, b, c = make(seeded(1))(x), make(seeded(1))(x), make(seeded(2))(x)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("make", ALL_OPS)
def test_empty_batch_passes_through(make) -> None:
    empty = torch.zeros(0, 3, 32, 40, dtype=torch.uint8)
    assert make(seeded())(empty).shape[0] == 0


def test_flip_rate_is_p_and_decided_per_sample() -> None:
    x = torch.zeros(20000, 1, 1, 2, dtype=torch.uint8)
    x[..., 1] = 1  # a flipped sample reads (1, 0)
    out = gpu.RandomHorizontalFlip(0.3, generator=seeded())(x)
    flipped = out[:, 0, 0, 0] == 1
    assert abs(flipped.float().mean().item() - 0.3) < 0.02
    assert 0 < flipped[:64].sum() < 64  # mixed within one ordinary batch


def test_crop_boxes_are_distinct_and_distributed_like_torchvisions() -> None:
    op = gpu.RandomResizedCrop(8, generator=seeded())
    n = 4000
    boxes = op.boxes(
        torch.full((n,), 300.0, dtype=torch.float64), torch.full((n,), 400.0, dtype=torch.float64)
    )
    assert len({tuple(b) for b in boxes[:64].tolist()}) == 64
    torch.manual_seed(0)
    ref = torch.tensor(
        [
            T.RandomResizedCrop.get_params(torch.zeros(1, 300, 400), [0.08, 1.0], [3 / 4, 4 / 3])
            for _ in range(n)
        ]
    )
    for ours, theirs in (
        (boxes[:, 2] * boxes[:, 3] / 120000.0, ref[:, 2] * ref[:, 3] / 120000.0),
        (boxes[:, 3] / boxes[:, 2], ref[:, 3] / ref[:, 2]),
        (boxes[:, 0] / 300.0, ref[:, 0] / 300.0),
    ):
        assert abs(ours.float().mean() - theirs.float().mean()) < 0.02
        assert abs(ours.float().std() - theirs.float().std()) < 0.02
    assert (boxes[:, 0] + boxes[:, 2] <= 300).all() and (boxes[:, 1] + boxes[:, 3] <= 400).all()


def test_crop_fallback_for_strips() -> None:
    op = gpu.RandomResizedCrop(4, scale=(0.99, 1.0), ratio=(1.0, 1.0), generator=seeded())
    boxes = op.boxes(
        torch.tensor([10.0], dtype=torch.float64), torch.tensor([1000.0], dtype=torch.float64)
    )
    assert boxes.tolist() == [[0, 495, 10, 10]]  # torchvision's central fallback


def test_random_resized_crop_from_a_list_of_sizes() -> None:
    g = seeded()
    out = gpu.RandomResizedCrop((20, 30), generator=g)([images(1, 50, 60)[0], images(1, 90, 31)[0]])
    assert out.shape == (2, 3, 20, 30) and out.dtype == torch.uint8


def test_jitter_factors_are_per_sample_and_in_range() -> None:
    flat = torch.full((64, 3, 4, 4), 100, dtype=torch.uint8)
    out = gpu.ColorJitter(brightness=0.5, generator=seeded())(flat)
    levels = out[:, 0, 0, 0].float()
    assert len(set(levels.tolist())) > 30
    assert levels.min() >= 50 and levels.max() <= 150


def test_grayscale_rate() -> None:
    x = images(4000, 2, 2)
    out = gpu.RandomGrayscale(0.25, generator=seeded())(x)
    grey = (out[:, 0] == out[:, 1]).all(dim=(1, 2)) & (out[:, 1] == out[:, 2]).all(dim=(1, 2))
    assert abs(grey.float().mean().item() - 0.25) < 0.03


def test_erasing_rate_and_fill() -> None:
    x = torch.full((2000, 3, 20, 20), 200, dtype=torch.uint8)
    out = gpu.RandomErasing(p=0.4, value=7, generator=seeded())(x)
    erased = (out == 7).any(dim=(1, 2, 3))
    assert abs(erased.float().mean().item() - 0.4) < 0.04


def test_normalize_dtypes() -> None:
    x = images()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert gpu.Normalize([0.5] * 3, [0.25] * 3, dtype=dtype)(x).dtype == dtype


def test_mixup_and_cutmix_through_compose() -> None:
    x, y = images(8), torch.arange(8) % 4
    aug = gpu.Compose(
        [
            gpu.RandomHorizontalFlip(generator=seeded()),
            gpu.MixUp(0.4, num_classes=4, generator=seeded()),
        ]
    )
    out, soft = aug(x, y)
    assert (
        out.shape == x.shape and soft.shape == (8, 4) and torch.allclose(soft.sum(1), torch.ones(8))
    )
    out, soft = gpu.CutMix(num_classes=4, generator=seeded())(x, y)
    assert soft.shape == (8, 4) and torch.allclose(soft.sum(1), torch.ones(8))
    changed = (out != x).any(dim=(1, 2, 3))
    assert changed.any()


def test_compose_without_labels_returns_images_only() -> None:
    out = gpu.Compose([gpu.RandomHorizontalFlip(generator=seeded()), gpu.Normalize([0.5], [0.5])])(
        images()
    )
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: gpu.Normalize([0.5, 0.5], [0.2, 0.2]), "same length, 1 or 3"),
        (lambda: gpu.Normalize([0.5] * 3, [0.2] * 2), "same length, 1 or 3"),
        (lambda: gpu.Normalize([0.5] * 3, [0.2, 0.0, 0.1]), "must be positive"),
        (lambda: gpu.Normalize([0.5] * 3, [0.2] * 3, dtype=torch.int8), "not supported; valid"),
        (lambda: gpu.RandomHorizontalFlip(1.5), r"p=1.5 must be a number within \[0, 1\]"),
        (lambda: gpu.ColorJitter(hue=0.7), "outside"),
        (lambda: gpu.ColorJitter(brightness=-1), "non-negative"),
        (lambda: gpu.GaussianBlur(4), "odd positive"),
        (lambda: gpu.RandomResizedCrop(0), "positive int"),
        (lambda: gpu.MixUp(0.0, num_classes=10), "alpha=0.0 must be a positive number"),
        (lambda: gpu.CutMix(num_classes=1), "num_classes=1 must be an int >= 2"),
    ],
)
def test_bad_construction(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_random_apply_refuses_label_mixing() -> None:
    with pytest.raises(TypeError, match="mixes labels"):
        gpu.RandomApply(gpu.MixUp(num_classes=3))


def test_mixup_needs_labels() -> None:
    with pytest.raises(ValueError, match=r"call it as op\(images, labels\)"):
        gpu.MixUp(num_classes=3)(images())


@pytest.mark.parametrize(
    "bad",
    [
        torch.zeros(3, 8, 8, dtype=torch.uint8),
        torch.zeros(2, 4, 8, 8, dtype=torch.uint8),
        torch.zeros(2, 3, 8, 8, dtype=torch.int64),
    ],
)
def test_bad_batches_say_what_was_expected_and_received(bad) -> None:
    with pytest.raises(ValueError, match=r"expects an N x C x H x W tensor.*got shape"):
        gpu.ColorJitter(0.1)(bad)
    with pytest.raises(ValueError, match=r"got shape"):
        gpu.Normalize([0.5] * 3, [0.5] * 3)(bad)


@pytest.mark.gpu
def test_generators_must_be_cpu_generators() -> None:
    with pytest.raises(ValueError, match=r"must be a CPU torch\.Generator"):
        gpu.RandomHorizontalFlip(generator=torch.Generator(device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("make", [*ALL_OPS, lambda g: gpu.Normalize([0.4] * 3, [0.2] * 3)])
def test_same_seed_same_batch_on_cpu_and_cuda(make) -> None:
    x = images(32, 48, 64)
    cpu = make(seeded(5))(x)
    cuda = make(seeded(5))(x.cuda())
    assert cuda.is_cuda
    diff = (cpu.float() - cuda.cpu().float()).abs()
    limit = 1.0 if x.dtype == torch.uint8 else 1e-3  # one grey level: float rounding on the GPU
    assert diff.max() <= limit


def test_to_float_is_v2s_to_dtype_bit_for_bit_and_leaves_float_alone() -> None:
    batch = images()
    expected = T.ToDtype(torch.float32, scale=True)(batch)
    assert torch.equal(gpu.ToFloat()(batch), expected)
    assert gpu.ToFloat()(expected) is expected
    converted, labels = gpu.ToFloat()(batch, torch.arange(16))
    assert torch.equal(converted, expected) and torch.equal(labels, torch.arange(16))
    assert repr(gpu.ToFloat()) == "ToFloat()"
