"""fastload.transforms against torchvision: same parameters, same draws, close pixels.

Tolerances: crops and flips are exact; resampling is within 1.5 grey levels (mean absolute
difference) of torchvision's antialiased bilinear result on photo-like images.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as T
import torchvision.transforms.v2.functional as F
from images import photo

from fastload import transforms as fl


def tensor(width: int = 320, height: int = 240, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(photo(width, height, seed)).permute(2, 0, 1).contiguous()


def mad(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.int() - b.int()).abs().float().mean())


SIZES = [(320, 240), (240, 320), (500, 375), (64, 64), (1000, 12), (12, 1000), (7, 5)]


@pytest.mark.parametrize("width, height", SIZES)
@pytest.mark.parametrize("scale, ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.9), (0.2, 5.0))])
def test_random_resized_crop_draws_torchvisions_boxes(width, height, scale, ratio) -> None:
    ours = fl.RandomResizedCrop(224, scale=scale, ratio=ratio)
    image = torch.zeros(3, height, width, dtype=torch.uint8)
    for seed in range(40):
        torch.manual_seed(seed)
        expected = T.RandomResizedCrop.get_params(image, scale=list(scale), ratio=list(ratio))
        torch.manual_seed(seed)
        assert ours.params(height, width) == tuple(expected)
        # and the RNG is left in the same state: later draws stay in step
        after_ours = torch.rand(1)
        torch.manual_seed(seed)
        T.RandomResizedCrop.get_params(image, scale=list(scale), ratio=list(ratio))
        assert torch.equal(after_ours, torch.rand(1))


def test_draws_follow_torchs_default_dtype() -> None:
    """The ops refill one-element tensors instead of torchvision's fresh ones: still the same
    numbers under a float64 default dtype."""
    ours, image = fl.RandomResizedCrop(224), torch.zeros(3, 480, 640, dtype=torch.uint8)

    def torchvisions(seed: int) -> tuple[int, ...]:
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng():
            torch.set_rng_state(generator.get_state())
            return (*T.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3]),)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for seed in range(20):
            expected = torchvisions(seed)
            torch.manual_seed(seed)
            assert ours.params(480, 640) == expected
    finally:
        torch.set_default_dtype(previous)


def test_random_resized_crop_fallback_is_the_central_crop() -> None:
    # an extreme strip never fits the ratio range: after 10 misses, the centred fallback
    ours = fl.RandomResizedCrop(8, scale=(0.99, 1.0), ratio=(1.0, 1.0))
    torch.manual_seed(0)
    assert ours.params(10, 1000) == (0, 495, 10, 10)


@pytest.mark.parametrize("size", [224, (200, 150), 96])
def test_random_resized_crop_pixels(size) -> None:
    image = tensor(500, 375)
    for seed in range(5):
        torch.manual_seed(seed)
        ours = fl.RandomResizedCrop(size)(image)
        torch.manual_seed(seed)
        theirs = T.RandomResizedCrop(size, antialias=True)(image)
        assert ours.shape == theirs.shape
        assert mad(ours, theirs) <= 1.5


@pytest.mark.parametrize(
    "size, max_size", [(224, None), ([224], None), ((100, 300), None), (256, 300), (600, None)]
)
@pytest.mark.parametrize("width, height", [(320, 240), (240, 320), (500, 375)])
def test_resize_sizes_and_pixels(size, max_size, width, height) -> None:
    image = tensor(width, height)
    ours = fl.Resize(size, max_size=max_size)(image)
    theirs = T.Resize(size, max_size=max_size, antialias=True)(image)
    assert ours.shape == theirs.shape
    assert mad(ours, theirs) <= 1.5


@pytest.mark.parametrize("size", [100, (50, 80), 240, 321, (241, 322), (300, 400)])
def test_center_crop_is_exact_including_padding(size) -> None:
    image = tensor(320, 240)
    assert torch.equal(fl.CenterCrop(size)(image), T.CenterCrop(size)(image))


def test_resize_then_center_crop_matches_resize_then_crop() -> None:
    """Validation's pipeline: fused into one resample of a fractional box."""
    for width, height in [(500, 375), (375, 500), (401, 333)]:
        image = tensor(width, height)
        ours = fl.Compose([fl.Resize(256), fl.CenterCrop(224)])(image)
        theirs = T.Compose([T.Resize(256, antialias=True), T.CenterCrop(224)])(image)
        assert ours.shape == theirs.shape == (3, 224, 224)
        assert mad(ours, theirs) <= 1.5


def test_flip_makes_torchvisions_decisions() -> None:
    image = tensor(64, 48)
    for seed in range(30):
        torch.manual_seed(seed)
        ours = fl.RandomHorizontalFlip(0.5)(image)
        torch.manual_seed(seed)
        assert torch.equal(ours, T.RandomHorizontalFlip(0.5)(image))


def test_mirror_then_crop_is_exact() -> None:
    image = tensor(320, 240)
    ours = fl.Compose([fl.RandomHorizontalFlip(1.0), fl.CenterCrop((100, 150))])(image)
    assert torch.equal(ours, F.center_crop(F.horizontal_flip(image), [100, 150]))
    ours = fl.Compose([fl.CenterCrop((100, 150)), fl.RandomHorizontalFlip(1.0)])(image)
    assert torch.equal(ours, F.horizontal_flip(F.center_crop(image, [100, 150])))


def test_training_pipeline_draws_in_torchvisions_order() -> None:
    image = tensor(500, 375)
    pipeline = fl.Compose([fl.RandomResizedCrop(128), fl.RandomHorizontalFlip()])
    reference = T.Compose([T.RandomResizedCrop(128, antialias=True), T.RandomHorizontalFlip()])
    for seed in range(10):
        torch.manual_seed(seed)
        ours = pipeline(image)
        torch.manual_seed(seed)
        assert mad(ours, reference(image)) <= 1.5


def test_compose_hands_the_tensor_to_other_callables() -> None:
    seen = []
    pipeline = fl.Compose([fl.CenterCrop(10), lambda t: seen.append(t) or t.float()])
    out = pipeline(tensor(32, 32))
    assert seen[0].dtype == torch.uint8 and seen[0].shape == (3, 10, 10)
    assert out.dtype == torch.float32
    assert len(pipeline.planned) == 1 and len(pipeline.rest) == 1


def test_ops_keep_single_channel_images() -> None:
    grey = tensor(64, 48)[:1]
    assert fl.RandomResizedCrop(16)(grey).shape == (1, 16, 16)
    assert fl.Resize(24)(grey).shape == (1, 24, 32)


def test_outputs_are_ordinary_writable_tensors() -> None:
    source = tensor(16, 16)
    with warnings.catch_warnings():
        # torch.from_numpy on read-only memory only warns: here that warning is a failure
        warnings.simplefilter("error")
        for op in (fl.RandomHorizontalFlip(1.0), fl.CenterCrop(8), fl.Resize(10)):
            out = op(source)
            assert all(step > 0 for step in out.stride()), op  # no negative strides
            assert out.numpy().flags.writeable, op
            out[0, 0, 0] = 7
            assert out[0, 0, 0] == 7


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: fl.RandomResizedCrop(0), "positive"),
        (lambda: fl.RandomResizedCrop((1, 2, 3)), "sequence of 1 or 2"),
        (lambda: fl.RandomResizedCrop(8, scale=(1.0, 0.5)), "must each be"),
        (lambda: fl.RandomResizedCrop(8, interpolation="lanczos"), "valid: nearest, bilinear"),
        (lambda: fl.Resize(-3), "positive"),
        (lambda: fl.Resize((10, 10), max_size=20), "only applies"),
        (lambda: fl.Resize(10, max_size=5), "must be larger"),
        (lambda: fl.RandomHorizontalFlip(1.5), "within"),
        (lambda: fl.CenterCrop("big"), "int or a sequence"),
    ],
)
def test_bad_arguments(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_interpolation_accepts_torchvisions_enum() -> None:
    assert fl.Resize(8, interpolation=T.InterpolationMode.BICUBIC).interpolation == "bicubic"


@pytest.mark.parametrize(
    "bad", [np.zeros((8, 8, 3), np.uint8), torch.zeros(3, 8, 8), torch.zeros(8, 8)]
)
def test_wrong_input_says_what_it_got(bad) -> None:
    with pytest.raises(TypeError, match="takes a C x H x W uint8 tensor, got"):
        fl.CenterCrop(4)(bad)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [True, False])
def test_a_source_window_resamples_as_the_whole_array(interpolation, antialias) -> None:
    """What a region decoder delivers: the window source_window names, placed at its origin,
    renders the same pixels as the whole array (warps may round a source position the other
    way once the origin moves: one level, rarely)."""
    array = photo(301, 203, seed=9)
    rng = np.random.default_rng(1)
    windows = 0
    for _ in range(200):
        x0, x1 = sorted(rng.uniform(0, 301, 2).tolist())
        y0, y1 = sorted(rng.uniform(0, 203, 2).tolist())
        if rng.random() < 0.3:  # whole pixels, as RandomResizedCrop's boxes at full scale
            x0, y0, x1, y1 = (float(round(v)) for v in (x0, y0, x1, y1))
        if x1 - x0 < 2 or y1 - y0 < 2:
            continue
        box, width, height = (x0, y0, x1, y1), int(rng.integers(8, 160)), int(rng.integers(8, 160))
        options = {"interpolation": interpolation, "antialias": antialias}
        expected = fl.resample(array, box, width, height, **options)
        window = fl.source_window(box, (301, 203), width, height, interpolation=interpolation)
        if window is None:
            continue
        windows += 1
        wx0, wy0, wx1, wy1 = window
        assert 0 <= wx0 < wx1 <= 301 and 0 <= wy0 < wy1 <= 203
        part = np.ascontiguousarray(array[wy0:wy1, wx0:wx1])
        got = fl.resample(part, box, width, height, origin=(wx0, wy0), **options)
        difference = np.abs(got.astype(np.int16) - expected.astype(np.int16))
        assert difference.max() <= 1 and difference.mean() < 0.01
    assert windows > 150  # most boxes need only a window


def test_source_window_is_none_where_the_whole_array_is_read() -> None:
    # Resize(256) then CenterCrop(224) of 400 x 300: the whole image is resized, then sliced
    view = fl.CenterCrop(224).plan(fl.Resize(256).plan(fl.View.full(400, 300)))
    assert fl.source_window(view.box, (400, 300), view.width, view.height) is None
    # a box reaching outside the image is padded
    assert fl.source_window((-10.0, 0.0, 100.0, 100.0), (400, 300), 50, 50) is None
    # a crop on whole pixels needs exactly its pixels
    assert fl.source_window((10.0, 20.0, 110.0, 220.0), (400, 300), 50, 100) == (10, 20, 110, 220)


def test_a_window_that_misses_the_box_is_an_error() -> None:
    part = photo(50, 50, seed=2)
    with pytest.raises(ValueError, match="reaches outside the 50 x 50 window at origin"):
        fl.resample(part, (10.0, 10.0, 100.0, 100.0), 20, 20, origin=(0, 0))


@pytest.mark.parametrize(
    "op",
    [
        fl.RandomResizedCrop(24),
        fl.RandomCrop(16),
        fl.RandomHorizontalFlip(0.5),
        fl.Resize(20),
        fl.CenterCrop(18),
    ],
    ids=lambda op: type(op).__name__,
)
def test_each_op_draws_apart_from_applying(op: fl.Transform) -> None:
    view = fl.View.full(40, 30)
    torch.manual_seed(5)
    planned = op.plan(view)
    torch.manual_seed(5)
    params = op.make_params(view)
    after_draws = torch.get_rng_state()
    # applying draws nothing, and gives what plan gives for the same draws
    assert op.apply_params(view, params) == planned
    assert torch.equal(torch.get_rng_state(), after_draws)
    if isinstance(op, (fl.Resize, fl.CenterCrop)):
        assert params is None  # nothing to draw


@pytest.mark.parametrize("width, height", [(320, 240), (240, 320), (1500, 300)])
@pytest.mark.parametrize("min_size, max_size", [((480, 512, 800), 1333), (160, None), (200, 400)])
def test_random_shortest_size_draws_torchvisions_sizes(width, height, min_size, max_size) -> None:
    image = tensor(width, height)
    for seed in range(6):
        torch.manual_seed(seed)
        theirs = T.RandomShortestSize(min_size, max_size)(image)
        torch.manual_seed(seed)
        ours = fl.RandomShortestSize(min_size, max_size)(image)
        assert ours.shape == theirs.shape
        assert mad(ours, theirs) <= 1.5
    torch.manual_seed(0)
    T.RandomShortestSize(min_size, max_size)(image)
    after_theirs = torch.rand(1)
    torch.manual_seed(0)
    fl.RandomShortestSize(min_size, max_size)(image)
    assert torch.equal(torch.rand(1), after_theirs)  # one draw, as torchvision's


def test_random_shortest_size_refuses_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"min_size=\[0\] must be positive ints"):
        fl.RandomShortestSize([0])
    with pytest.raises(ValueError, match=r"max_size=-1"):
        fl.RandomShortestSize(10, -1)


@pytest.mark.parametrize("width, height", [(320, 240), (90, 300)])
def test_random_resize_draws_torchvisions_sizes(width, height) -> None:
    image = tensor(width, height)
    for seed in range(5):
        torch.manual_seed(seed)
        theirs = T.RandomResize(100, 400)(image)
        after_theirs = torch.rand(1)
        torch.manual_seed(seed)
        ours = fl.RandomResize(100, 400)(image)
        assert ours.shape == theirs.shape and mad(ours, theirs) <= 1.5
        assert torch.equal(torch.rand(1), after_theirs)


@pytest.mark.parametrize("width, height", [(320, 240), (90, 300), (1333, 97)])
@pytest.mark.parametrize(
    "target_size, scale_range", [((1024, 1024), (0.1, 2.0)), ((300, 500), (0.5, 0.9))]
)
def test_scale_jitter_draws_torchvisions_sizes(width, height, target_size, scale_range) -> None:
    """Sizes equal in every seed: the scale is drawn and multiplied in float32, as v2's."""
    image = tensor(width, height)
    theirs_op = T.ScaleJitter(target_size, scale_range)
    ours_op = fl.ScaleJitter(target_size, scale_range)
    for seed in range(40):
        torch.manual_seed(seed)
        theirs_size = theirs_op.make_params([image])["size"]
        after_theirs = torch.rand(1)
        torch.manual_seed(seed)
        assert ours_op.make_params(fl.View.full(width, height)) == theirs_size, seed
        assert torch.equal(torch.rand(1), after_theirs)
    torch.manual_seed(1)
    theirs = theirs_op(image)
    torch.manual_seed(1)
    ours = ours_op(image)
    assert ours.shape == theirs.shape and mad(ours, theirs) <= 1.5


def test_scale_jitter_refuses_bad_ranges() -> None:
    with pytest.raises(ValueError, match=r"scale_range=\(2.0, 1.0\): need 0 < low <= high"):
        fl.ScaleJitter((100, 100), (2.0, 1.0))
    with pytest.raises(ValueError, match=r"target_size=\(0, 5\)"):
        fl.ScaleJitter((0, 5))


@pytest.mark.parametrize("padding", [None, [3, 5, 7, 2], 4])
@pytest.mark.parametrize("size", [(200, 150), (300, 400), 100])
def test_random_crop_with_padding_is_v2s_exactly(padding, size) -> None:
    image = tensor(320, 240)
    theirs_op = T.RandomCrop(size, padding=padding, pad_if_needed=True)
    ours_op = fl.RandomCropWithPadding(
        size, padding=tuple(theirs_op.padding or (0, 0, 0, 0)), pad_if_needed=True
    )
    for seed in range(4):
        torch.manual_seed(seed)
        theirs = theirs_op(image)
        torch.manual_seed(seed)
        assert torch.equal(ours_op(image), theirs)


def test_random_crop_with_padding_refuses_what_it_cannot_crop() -> None:
    with pytest.raises(ValueError, match="larger than the padded 240 x 320"):
        fl.RandomCropWithPadding(300)(tensor(320, 240))
    with pytest.raises(ValueError, match="must be 4 sizes"):
        fl.RandomCropWithPadding(10, padding=(1, 2))


@pytest.mark.parametrize("size", [100, 240, 300, 400])
def test_pad_if_smaller_pads_right_and_bottom_with_zeros(size) -> None:
    image = tensor(320, 240)
    padding = [0, 0, max(size - 320, 0), max(size - 240, 0)]
    assert torch.equal(fl.PadIfSmaller(size)(image), F.pad(image, padding, fill=0))
    flipped = fl.Compose([fl.RandomHorizontalFlip(1.0), fl.PadIfSmaller(size)])(image)
    assert torch.equal(flipped, F.pad(F.horizontal_flip(image), padding, fill=0))


def test_pad_if_smaller_refuses_a_bad_size() -> None:
    with pytest.raises(ValueError, match=r"size=0 must be a positive int"):
        fl.PadIfSmaller(0)
