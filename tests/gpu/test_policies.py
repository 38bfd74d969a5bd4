"""The policies as batch ops: torchvision's draws per sample, and torchvision's result for the
same parameters (its tensor kernels), applied to a whole batch at once."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms as v1
from torchvision.transforms import InterpolationMode, autoaugment

from fastload import gpu
from fastload.gpu import policy_ops
from tests.images import photo


def _batch(n: int = 12, size: tuple[int, int] = (40, 56)) -> torch.Tensor:
    h, w = size
    return torch.stack(
        [torch.from_numpy(photo(w, h, seed=s)).permute(2, 0, 1).contiguous() for s in range(n)]
    )


def _torchvision_op(images: torch.Tensor, name: str, magnitude: float, **kwargs) -> torch.Tensor:
    """torchvision's own op on one image (its policies' _apply_op, on a tensor)."""
    return autoaugment._apply_op(images, name, magnitude, **kwargs)


@pytest.mark.parametrize("name", policy_ops.NAMES)
def test_each_op_is_torchvisions_for_the_same_magnitude(name: str) -> None:
    images = _batch()
    magnitudes = {
        "Posterize": [1.0, 4.0, 6.0, 8.0],
        "Solarize": [0.0, 76.5, 127.5, 255.0],
        "TranslateX": [-11.0, 0.0, 5.3, 13.0],
        "TranslateY": [-11.0, 0.0, 5.3, 13.0],
        "Rotate": [-30.0, 0.0, 17.5, 135.0],
    }.get(name, [-0.99, -0.3, 0.0, 0.45])
    ops = [[(name, magnitudes[i % len(magnitudes)])] for i in range(len(images))]
    for interpolation, fill in [
        (InterpolationMode.NEAREST, None),
        (InterpolationMode.BILINEAR, [7.0, 8.0, 9.0]),
    ]:
        got = policy_ops.apply_ops(images, ops, interpolation=interpolation, fill=fill)
        want = torch.stack(
            [
                _torchvision_op(img, *ops[i][0], interpolation=interpolation, fill=fill)
                for i, img in enumerate(images)
            ]
        )
        diff = (got.int() - want.int()).abs()
        if name == "Contrast":  # the per-image mean may be summed in another order
            assert diff.max() <= 1
        else:
            assert torch.equal(got, want), (name, diff.max())


def test_ops_apply_in_each_samples_order() -> None:
    images = _batch(3)
    ops = [[("Invert", 0.0), ("Posterize", 2.0)], [("Posterize", 2.0), ("Invert", 0.0)], []]
    got = policy_ops.apply_ops(images, ops, interpolation=InterpolationMode.NEAREST)
    assert torch.equal(got[0], v1.functional.posterize(v1.functional.invert(images[0]), 2))
    assert torch.equal(got[1], v1.functional.invert(v1.functional.posterize(images[1], 2)))
    assert torch.equal(got[2], images[2])


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="uint8 batch"):
        policy_ops.apply_ops(_batch(2).float(), [[], []], interpolation=InterpolationMode.NEAREST)
    with pytest.raises(ValueError, match="op lists for 1 samples and a batch of 2"):
        policy_ops.apply_ops(_batch(2), [[]], interpolation=InterpolationMode.NEAREST)
    with pytest.raises(ValueError, match="'Blur' is not a policy op; valid: ShearX"):
        policy_ops.apply_ops(_batch(1), [[("Blur", 1.0)]], interpolation=InterpolationMode.NEAREST)
    with pytest.raises(ValueError, match="policy='mnist' is not valid"):
        gpu.AutoAugment("mnist")


POLICIES = {
    "ta_wide": (lambda: v1.TrivialAugmentWide(), lambda: gpu.TrivialAugmentWide()),
    "ra": (lambda: v1.RandAugment(magnitude=9), lambda: gpu.RandAugment(magnitude=9)),
    "aa-imagenet": (lambda: v1.AutoAugment(), lambda: gpu.AutoAugment("imagenet")),
    "aa-cifar10": (
        lambda: v1.AutoAugment(autoaugment.AutoAugmentPolicy.CIFAR10),
        lambda: gpu.AutoAugment("cifar10"),
    ),
    "augmix": (lambda: v1.AugMix(), lambda: gpu.AugMix()),
    "color-jitter": (
        lambda: v1.ColorJitter(0.4, 0.4, 0.4, 0.1),
        lambda: gpu.policies.PerImageColorJitter(0.4, 0.4, 0.4, 0.1),
    ),
    "color-jitter-no-hue": (
        lambda: v1.ColorJitter(0.4, (0.2, 1.8), 0.4),
        lambda: gpu.policies.PerImageColorJitter(0.4, (0.2, 1.8), 0.4),
    ),
    "augmix-deep": (
        lambda: v1.AugMix(severity=7, chain_depth=2, all_ops=False),
        lambda: gpu.AugMix(severity=7, chain_depth=2, all_ops=False),
    ),
    "aa-svhn": (
        lambda: v1.AutoAugment(autoaugment.AutoAugmentPolicy.SVHN),
        lambda: gpu.AutoAugment("svhn", interpolation="bilinear", fill=[1, 2, 3]),
    ),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_policy_draws_per_sample_as_torchvision_and_applies_its_result(policy: str) -> None:
    """Drawn one sample at a time from the same seed, the batch op's draws are torchvision's:
    torch's stream is left where torchvision leaves it, and the batch is torchvision's
    images (on tensors) for those draws."""
    make_tv, make_ours = POLICIES[policy]
    ours = make_ours()
    tv = make_tv()
    for setting in ("interpolation", "fill"):  # the policies' (ColorJitter has neither)
        if hasattr(tv, setting):
            setattr(tv, setting, getattr(ours.torchvision_op, setting))
    images = _batch(16)
    torch.manual_seed(5)
    want = torch.stack([tv(img) for img in images])
    after_tv = torch.rand(1)
    torch.manual_seed(5)
    params = {"ops": [ours.draw(40, 56) for _ in images]}
    after_ours = torch.rand(1)
    assert torch.equal(after_tv, after_ours)  # the same number of draws, so the crops after
    got = ours.apply_params(images, params)
    diff = (got.int() - want.int()).abs()
    assert diff.max() <= 1, diff.max()  # Contrast's mean: one level at most
    assert (diff > 0).float().mean() < 0.001
    assert not torch.equal(got, images)


def test_random_erasing_draws_and_erases_as_torchvision() -> None:
    images = _batch(16).float() / 255
    for value in [0.0, [0.1, 0.2, 0.3], "random"]:
        tv = v1.RandomErasing(p=0.7, value=value)
        ours = gpu.policies.PerImageRandomErasing(p=0.7, value=value)
        torch.manual_seed(3)
        want = torch.stack([tv(img) for img in images])
        torch.manual_seed(3)
        got = ours(images)
        assert torch.equal(got, want)
        assert not torch.equal(got, images)


def test_random_erasing_in_place_only_when_asked() -> None:
    images = _batch(4).float() / 255
    before = images.clone()
    torch.manual_seed(1)
    copied = gpu.policies.PerImageRandomErasing(p=1.0)(images)
    assert torch.equal(images, before) and not torch.equal(copied, before)
    own = gpu.policies.PerImageRandomErasing.of(v1.RandomErasing(p=1.0), inplace=True)
    torch.manual_seed(1)
    erased = own(images)
    assert erased.data_ptr() == images.data_ptr() and torch.equal(erased, copied)
