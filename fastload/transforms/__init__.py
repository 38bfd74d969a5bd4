"""Per-sample ops on uint8 images, planned before decoding so that decoding can be cut short.

Each geometric op does not touch pixels at first: it *plans*, turning a :class:`View` (which
region of the source image, resized to what size, mirrored or not) into the next one, with the
same random draws, in the same order, as torchvision's op of the same name. Once a chain of ops
is planned, the decoder knows the region and the output size up front: it decodes at a reduced
DCT scale when the region is at least twice the output, and the region is then resampled
once, straight to the output size.

Used with ``fastload.ImageFolder``, a ``Compose`` of these ops runs fused with decoding; any
other callable in the ``Compose`` runs afterwards, on the CHW uint8 tensor. Called directly on
a CHW uint8 tensor, each op gives the same result without the decoding shortcut.

Each op draws apart from applying, as the batch ops do: ``make_params(view)`` makes its random
draws (torchvision's, in torchvision's order), ``apply_params(view, params)`` turns the view
into the next one without drawing, and ``plan(view)`` is the two in turn. The views are
rendered by :mod:`fastload.pixels.resampling`.

Interpolation follows torchvision's names (``InterpolationMode`` members or the strings
``"nearest"``, ``"bilinear"``, ``"bicubic"``). Resizing with ``antialias=True`` (the default),
shrinking or enlarging, runs torch's antialiased kernel, the one torchvision's ``resize`` of a
tensor runs; ``antialias=False`` uses OpenCV's filter of the same name.

The ops live in :mod:`~fastload.transforms.base` (:class:`Transform` and the draws),
:mod:`~fastload.transforms.crops`, :mod:`~fastload.transforms.sizes`,
:mod:`~fastload.transforms.flips` and :mod:`~fastload.transforms.compose` (``Compose`` and the
split of a dataset's transform); :mod:`~fastload.transforms.crop_recipes` reads the random crop
a decoder may draw and plan itself.
"""

from fastload.pixels.resampling import (
    View,
    Visible,
    resample,
    source_window,
    visible_part,
    whole_pixels,
)
from fastload.transforms.base import Transform
from fastload.transforms.compose import Compose, TransformSplit, split_transform
from fastload.transforms.crops import (
    CenterCrop,
    PadIfSmaller,
    RandomCrop,
    RandomCropWithPadding,
    RandomResizedCrop,
)
from fastload.transforms.flips import RandomHorizontalFlip
from fastload.transforms.sizes import (
    RandomResize,
    RandomShortestSize,
    Resize,
    ScaleJitter,
    shorter_side_to,
)

__all__ = [
    "CenterCrop",
    "Compose",
    "PadIfSmaller",
    "RandomCrop",
    "RandomCropWithPadding",
    "RandomHorizontalFlip",
    "RandomResize",
    "RandomResizedCrop",
    "RandomShortestSize",
    "Resize",
    "ScaleJitter",
    "Transform",
    "TransformSplit",
    # the kernel's names, kept here for code that imported them from this module
    "View",
    "Visible",
    "resample",
    "shorter_side_to",
    "source_window",
    "split_transform",
    "visible_part",
    "whole_pixels",
]
