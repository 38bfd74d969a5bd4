"""Proving from the code that a callable only hands its argument on
(fastload.callables.wrappers)."""

from __future__ import annotations

import types

import torch
from torch.utils.data import default_collate

from fastload.callables.wrappers import collated_then, delegate_of, sequence_of, zips_samples


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


class Chain:
    """The segmentation references' own ``Compose`` (their ``transforms.py``), in shape."""

    def __init__(self, transforms) -> None:
        self.transforms = transforms

    def __call__(self, image, target):
        for t in self.transforms:
            image, target = t(image, target)
        return image, target


def _swap(image, target):
    return target, image


def test_a_chain_of_image_and_target_ops_is_its_ops() -> None:
    chain = Chain([_swap, mixing])
    assert sequence_of(chain) == [_swap, mixing]
    assert chain(1, 2) == (2, 1)  # what the proof claims: each result is the next's input


def test_a_chain_of_one_argument_ops_is_its_ops() -> None:
    class Single:
        def __init__(self) -> None:
            self.ops = (abs, round)

        def __call__(self, image):
            """Each op on the image."""
            for op in self.ops:
                image = op(image)
            return image

    assert sequence_of(Single()) == [abs, round]


def test_a_loop_that_does_anything_else_is_not_a_chain() -> None:
    class Reordered(Chain):
        def __call__(self, image, target):
            for t in self.transforms:
                target, image = t(image, target)
            return image, target

    class Skipping(Chain):
        def __call__(self, image, target):
            for t in self.transforms[1:]:
                image, target = t(image, target)
            return image, target

    class Extra(Chain):
        def __call__(self, image, target):
            for t in self.transforms:
                image, target = t(image, target)
                print(t)
            return image, target

    class Global(Chain):
        def __call__(self, image, target):
            for t in self.transforms:
                image, target = t(image, target)
            return target, image

    class Computed(Chain):
        @property
        def transforms(self):  # computed on each call: not the object's own list
            return [_swap]

        @transforms.setter
        def transforms(self, value) -> None:
            pass

    for kind in (Reordered, Skipping, Extra, Global, Computed):
        assert sequence_of(kind([_swap])) is None, kind.__name__
    assert sequence_of(Chain("not ops")) is None and sequence_of(Chain([1, 2])) is None


def test_a_chain_without_source_is_not_proved() -> None:
    namespace: dict = {}
    exec(  # compiled from a string: inspect finds no source to read
        "class Made:\n"
        "    def __init__(self, transforms):\n"
        "        self.transforms = transforms\n"
        "    def __call__(self, image, target):\n"
        "        for t in self.transforms:\n"
        "            image, target = t(image, target)\n"
        "        return image, target\n",
        namespace,
    )
    assert sequence_of(namespace["Made"]([_swap])) is None


def references_collate(batch):
    """The detection references' utils.collate_fn."""
    return tuple(zip(*batch))  # noqa: B905 (theirs)


def test_the_references_zip_collate_is_proved_and_nothing_like_it() -> None:
    assert zips_samples(references_collate)
    assert zips_samples(lambda samples: tuple(zip(*samples)))  # noqa: B905
    assert not zips_samples(lambda samples: list(zip(*samples)))  # noqa: B905
    assert zips_samples(lambda samples: tuple(zip(*samples, strict=True)))
    assert not zips_samples(lambda samples: tuple(zip(*samples, strict=True), 0))
    assert not zips_samples(lambda samples: tuple(zip(*samples, *samples, strict=True)))
    keywords = {"strict": True, "x": 1}
    assert not zips_samples(lambda samples: tuple(zip(*samples, **keywords)))  # noqa: B905
    assert not zips_samples(lambda samples, extra=1: tuple(zip(*samples)))  # noqa: B905
    assert not zips_samples(default_collate)
    shadowed = types.FunctionType(references_collate.__code__, {"zip": lambda *a: a}, "collate")
    assert not zips_samples(shadowed)  # a zip of its own: not the builtin
