"""Batch augmentation on any device, with parameters drawn per sample.

``fastload.gpu.functional`` holds the pure kernels; the classes here draw parameters and call
them. Wire them into a loader with ``fastload.DataLoader(..., batch_transforms=...)``.
"""

from fastload.gpu import functional, mixing, policies, policies_v2
from fastload.gpu.policies import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from fastload.gpu.transforms import (
    BatchTransform,
    ColorJitter,
    Compose,
    CutMix,
    GaussianBlur,
    MixUp,
    Normalize,
    RandomApply,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomTransform,
    RandomVerticalFlip,
    ToFloat,
)

__all__ = [
    "AugMix",
    "AutoAugment",
    "BatchTransform",
    "ColorJitter",
    "Compose",
    "CutMix",
    "GaussianBlur",
    "MixUp",
    "Normalize",
    "RandAugment",
    "RandomApply",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomTransform",
    "RandomVerticalFlip",
    "ToFloat",
    "TrivialAugmentWide",
    "functional",
    "mixing",
    "policies",
    "policies_v2",
]
