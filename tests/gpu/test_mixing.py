"""torchvision v2's MixUp / CutMix / RandomChoice as draw-then-apply ops (fastload.gpu.mixing)."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import default_collate

from fastload.gpu.deferred import DeferredBatch, applying
from fastload.gpu.mixing import CutMixV2, MixUpV2, RandomChoice, mixing_of
from fastload.gpu.stage import BatchStage, CollateThenStage, DeviceStage, SeedTag

V2_OPS = {
    "mixup": lambda: v2.MixUp(alpha=0.2, num_classes=10),
    "cutmix": lambda: v2.CutMix(alpha=1.0, num_classes=10),
    "choice": lambda: v2.RandomChoice(
        [v2.MixUp(alpha=0.2, num_classes=10), v2.CutMix(alpha=1.0, num_classes=10)], p=[1, 3]
    ),
}


@pytest.mark.parametrize("name", sorted(V2_OPS))
@pytest.mark.parametrize("labels", ["index", "soft"])
def test_the_same_draws_and_results_as_torchvision(name: str, labels: str) -> None:
    theirs = V2_OPS[name]()
    ours = mixing_of(theirs)
    assert ours is not None
    for seed in range(12):
        images = torch.randn(6, 3, 20, 28)
        y = torch.randint(10, (6,))
        if labels == "soft":
            y = torch.softmax(torch.randn(6, 10), dim=1)
        torch.manual_seed(seed)
        want = theirs(images, y)
        after_theirs = torch.rand(3)
        torch.manual_seed(seed)
        params = ours.make_params(6, 20, 28)
        after_ours = torch.rand(3)
        assert torch.equal(after_ours, after_theirs)  # the same amount of the stream used
        got = ours.apply_params(images, params), ours.mix_labels(y, params)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed


def test_the_draws_differ_between_batches() -> None:
    op = CutMixV2(alpha=1.0, num_classes=4)
    boxes = {op.make_params(8, 32, 32)["box"] for _ in range(10)}
    assert len(boxes) > 5


def test_only_v2s_own_ops_with_their_default_labels_are_taken() -> None:
    assert isinstance(mixing_of(v2.MixUp(num_classes=3)), MixUpV2)
    assert mixing_of(v2.MixUp(num_classes=3, labels_getter=lambda x: x[1])) is None

    class MyMixUp(v2.MixUp):
        pass

    assert mixing_of(MyMixUp(num_classes=3)) is None
    assert mixing_of(v2.RandomChoice([v2.MixUp(num_classes=3), v2.RandomHorizontalFlip()])) is None
    assert mixing_of(v2.RandomChoice([v2.RandomChoice([v2.MixUp(num_classes=3)])])) is None
    assert mixing_of(abs) is None


def test_bad_settings_name_the_value() -> None:
    with pytest.raises(ValueError, match="alpha=0"):
        MixUpV2(alpha=0, num_classes=3)
    with pytest.raises(ValueError, match="p has 1 weights for 2 ops"):
        RandomChoice([MixUpV2(num_classes=3), CutMixV2(num_classes=3)], p=[1.0])
    with pytest.raises(ValueError, match="num_classes must be given"):
        MixUpV2()(torch.zeros(2, 3, 4, 4), torch.tensor([0, 1]))


def _samples(k: int) -> list:
    return [(torch.full((3, 8, 8), 10.0 * k + j), j % 3) for j in range(4)]


def test_drawn_in_the_collate_chain_applied_after_the_copy() -> None:
    """The CUDA path's parts, without CUDA: the batch's draw is made in the worker right
    after its samples, travels with the batch, and the device stage applies it last."""
    theirs = V2_OPS["choice"]()
    stage = BatchStage(None, channels_last=False, then=DeferredBatch(mixing_of(theirs)))
    tag = SeedTag(default_collate, stage)
    torch.manual_seed(3)
    tagged = [tag(_samples(k)) for k in range(4)]
    device = DeviceStage(stage)
    got = [device(batch) for batch in device.untag(iter(tagged))]
    torch.manual_seed(3)
    want = [theirs(*default_collate(_samples(k))) for k in range(4)]
    for (x, y), (u, v) in zip(got, want, strict=True):
        assert torch.equal(x, u) and torch.equal(y, v)
    on_cpu = CollateThenStage(default_collate, stage)
    torch.manual_seed(3)
    for k, (u, v) in enumerate(want):
        x, y = on_cpu(_samples(k))
        assert torch.equal(x, u) and torch.equal(y, v)


def test_a_batch_without_its_draw_is_refused() -> None:
    op = DeferredBatch(MixUpV2(num_classes=3))
    with pytest.raises(RuntimeError, match="came without it"):
        op(torch.zeros(2, 3, 4, 4), torch.tensor([0, 1]))
    with applying(None, {"lam": 0.5}), pytest.raises(ValueError, match="mixes labels too"):
        op(torch.zeros(2, 3, 4, 4))
    assert op.draw([]) is None


@pytest.mark.parametrize("name", sorted(V2_OPS))
@pytest.mark.parametrize("n", [1, 2, 7])
def test_in_place_gives_v2s_bits(name: str, n: int) -> None:
    """Mixing in the batch given (image by image on the CPU) rounds as v2 does."""
    theirs = V2_OPS[name]()
    ours = mixing_of(theirs, inplace=True)
    for seed in range(6):
        images, y = torch.randn(n, 3, 20, 28), torch.randint(10, (n,))
        torch.manual_seed(seed)
        want = theirs(images, y)
        torch.manual_seed(seed)
        params = ours.make_params(n, 20, 28)
        given = images.clone()
        got = ours.apply_params(given, params)
        assert got.data_ptr() == given.data_ptr()  # no copy of the batch
        assert torch.equal(got, want[0]) and torch.equal(ours.mix_labels(y, params), want[1])


def test_both_ways_of_mixing_in_place_round_as_v2() -> None:
    from fastload.gpu import mixing

    images = torch.randn(5, 3, 9, 11)
    want = images.roll(1, 0).mul_(1.0 - 0.3).add_(images.mul(0.3))
    for way in (mixing._mix_whole, mixing._mix_image_by_image):
        assert torch.equal(way(images.clone(), 0.3), want), way
