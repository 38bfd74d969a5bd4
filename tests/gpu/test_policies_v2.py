"""torchvision v2's policies as batch ops: v2's draws per sample, and v2's result (on uint8
tensors) for them, applied to a whole batch at once."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as v2

from fastload.gpu import policies_v2
from tests.images import photo


def _named_interpolation() -> v2.TrivialAugmentWide:
    """The policy with its interpolation given by name, where this torchvision takes one
    (0.26, the GPU machine's, takes only ``InterpolationMode``)."""
    try:
        return v2.TrivialAugmentWide(interpolation="bilinear", fill=[7, 8, 9])
    except ValueError as refused:
        pytest.skip(f"this torchvision takes no interpolation by name: {refused}")


V2 = {
    "ta_wide": lambda: v2.TrivialAugmentWide(),
    "ta_wide-bilinear-fill": lambda: v2.TrivialAugmentWide(
        interpolation=v2.InterpolationMode.BILINEAR, fill=[7, 8, 9]
    ),
    "ta_wide-bilinear-by-name": _named_interpolation,
    "ra": lambda: v2.RandAugment(magnitude=9),
    "ra-3-ops": lambda: v2.RandAugment(num_ops=3, magnitude=15),
    "aa-imagenet": lambda: v2.AutoAugment(),
    "aa-cifar10": lambda: v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10),
    "aa-svhn": lambda: v2.AutoAugment(v2.AutoAugmentPolicy.SVHN),
    "augmix": lambda: v2.AugMix(),
    "augmix-deep": lambda: v2.AugMix(severity=7, chain_depth=2, all_ops=False),
}


def _batch(n: int = 16, size: tuple[int, int] = (40, 56)) -> torch.Tensor:
    h, w = size
    return torch.stack(
        [torch.from_numpy(photo(w, h, seed=s)).permute(2, 0, 1).contiguous() for s in range(n)]
    )


@pytest.mark.parametrize("policy", sorted(V2))
def test_v2_draws_per_sample_and_v2s_result(policy: str) -> None:
    """Drawn one sample at a time from the same seed: torch's stream is left where v2 leaves
    it, and the batch is v2's images for those draws."""
    theirs = V2[policy]()
    ours = policies_v2.of(theirs)
    images = _batch()
    torch.manual_seed(5)
    want = torch.stack([theirs(img) for img in images])
    after_theirs = torch.rand(1)
    torch.manual_seed(5)
    params = {"ops": [ours.draw(40, 56) for _ in images]}
    after_ours = torch.rand(1)
    assert torch.equal(after_theirs, after_ours)  # the same draws, so the crops after too
    got = ours.apply_params(images, params)
    diff = (got.int() - want.int()).abs()
    # v2's uint8 kernels of Color, Sharpness and AutoContrast round otherwise than v1's,
    # which fastload applies: one level at most, on up to a tenth of those ops' pixels
    # (other draws would differ by tens of levels)
    assert diff.max() <= 1, diff.max()
    assert (diff > 0).float().mean() < 0.1, (diff > 0).float().mean()
    assert not torch.equal(got, images)


def test_v1s_draws_are_not_v2s() -> None:
    """The control: v1's class draws otherwise from the same stream."""
    from fastload import gpu

    torch.manual_seed(2)
    v1_drawn = [gpu.TrivialAugmentWide().draw(40, 56) for _ in range(20)]
    torch.manual_seed(2)
    v2_drawn = [policies_v2.of(v2.TrivialAugmentWide()).draw(40, 56) for _ in range(20)]
    assert v1_drawn != v2_drawn


def test_what_is_not_v2s_policy_is_named() -> None:
    with pytest.raises(ValueError, match="is not one of v2's TrivialAugmentWide"):
        policies_v2.of(v2.RandomHorizontalFlip())
    with pytest.raises(ValueError, match="a fill per input type"):
        policies_v2.of(v2.TrivialAugmentWide(fill={v2.functional.to_image: 0}))
