"""Run a user's unchanged torchvision pipeline fastload's way.

``fastload.DataLoader(..., accelerate=True)`` (or ``device="cuda"``) hands the dataset to
:func:`accelerate_dataset`. When the dataset is a ``torchvision.datasets.ImageFolder`` /
``DatasetFolder`` with torchvision's own image loader, or a fastload dataset, and every op of
its ``transform`` is one fastload can run with the same meaning, the pipeline is split:

* the per-sample geometry (``RandomResizedCrop``, ``Resize``, ``CenterCrop``, ``RandomCrop``
  without padding, ``RandomHorizontalFlip``; v1 and v2) becomes ``fastload.transforms`` ops,
  planned before decoding with torchvision's own draws and run fused with it;
* the conversion to a tensor and what follows it (``ToTensor``, ``PILToTensor``, ``ToImage``,
  ``ToDtype(..., scale=True)``, ``ConvertImageDtype``, ``Normalize``) becomes one batch op,
  so uint8 crosses the process boundary and the PCIe bus.

* torchvision's policies and ``ColorJitter`` (with a CUDA device) and ``RandomErasing`` are
  drawn per sample where torchvision draws them, and applied on whole batches
  (:mod:`fastload.gpu.policies`).

An op fastload does not run (a lambda, an unknown class, on the CPU a policy) ends the fused
part: the longest leading run of geometry is still fused with decoding, and the rest runs as
the user wrote it, per sample, on what torchvision would have there; a trailing conversion
still runs on batches. Nothing to fuse (an unknown op first, a custom loader) raises
:class:`NotAccelerated`, naming every op in the way, and the loader runs the pipeline
unchanged. Differences that remain are those of resampling and of Pillow's rounding
(documented in the README), never a different op.

The package, one room a concern: ``walk`` (what a translation is, the walk over the ops and
where it cuts), ``torchvision_ops``, ``timm_ops`` and ``open_clip_ops`` (one module per library
whose ops it translates: its translators and its conversions of a PIL image), ``table`` (every
library's translators and conversions together), ``translate`` (a pipeline and a dataset
translated) and ``explaining`` (:func:`explain`).
"""

from __future__ import annotations

from fastload.accelerate.explaining import Acceleration, explain
from fastload.accelerate.translate import accelerate_dataset, translate_transform
from fastload.accelerate.walk import NotAccelerated, Translated, name_of

__all__ = [
    "Acceleration",
    "NotAccelerated",
    "Translated",
    "accelerate_dataset",
    "explain",
    "name_of",
    "translate_transform",
]
