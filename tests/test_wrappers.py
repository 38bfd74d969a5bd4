"""Proving from the code that a callable only hands its argument on (fastload.wrappers)."""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

from fastload.wrappers import collated_then, delegate_of


def mixing(images, labels):
    return images, labels


def _closure(then):
    def collate_fn(batch):
        return then(*default_collate(batch))

    return collate_fn


def module_level(batch):
    return mixing(*default_collate(batch))


class Collate:
    def __init__(self, then) -> None:
        self.then = then

    def __call__(self, batch):
        return self.then(*default_collate(batch))


def test_the_reference_collate_shapes_are_proved() -> None:
    assert collated_then(_closure(mixing)) is mixing  # train.py's closure
    assert collated_then(module_level) is mixing
    assert collated_then(lambda batch: mixing(*default_collate(batch))) is mixing
    assert collated_then(Collate(mixing)) is mixing
    batch = [(torch.zeros(3, 2, 2), 1), (torch.ones(3, 2, 2), 0)]
    images, labels = _closure(mixing)(batch)
    assert images.shape == (2, 3, 2, 2) and labels.tolist() == [1, 0]


def not_torchs(batch):  # a default_collate of its own
    return mixing(*sorted(batch))


def more_work(batch):
    print(len(batch))
    return mixing(*default_collate(batch))


def keywords(batch):
    return mixing(*default_collate(batch), inplace=True)


def two_steps(batch):
    collated = default_collate(batch)
    return mixing(*collated)


def test_anything_else_is_not_proved() -> None:
    assert collated_then(default_collate) is None  # torch's own: nothing after it
    for fn in (not_torchs, more_work, keywords, two_steps, print):
        assert collated_then(fn) is None, fn
    assert collated_then(_closure(3)) is None  # not callable
    assert collated_then(lambda batch, extra=1: mixing(*default_collate(batch))) is None
    assert collated_then(Collate.__call__) is None  # unbound: two arguments


def test_an_object_that_computes_its_attribute_is_not_proved() -> None:
    class Computed(Collate):
        def __getattr__(self, name):
            return mixing

    class Property:
        @property
        def then(self):
            return mixing

        def __call__(self, batch):
            return self.then(*default_collate(batch))

    assert collated_then(Computed(mixing)) is None
    assert collated_then(Property()) is None


def test_a_wrapper_is_its_inner_transform() -> None:
    class Preset:
        def __init__(self) -> None:
            self.transforms = abs

        def __call__(self, img):
            return self.transforms(img)

    assert delegate_of(Preset()) is abs


def test_a_detection_preset_hands_on_image_and_target() -> None:
    class Preset:
        def __init__(self) -> None:
            self.transforms = max

        def __call__(self, img, target):
            return self.transforms(img, target)

    class Swapped(Preset):
        def __call__(self, img, target):
            return self.transforms(target, img)

    class Dropped(Preset):
        def __call__(self, img, target):
            return self.transforms(img)

    assert delegate_of(Preset()) is max
    assert delegate_of(Swapped()) is None and delegate_of(Dropped()) is None
