"""Detection: images with their boxes, labels and masks, read fastload's way.

* :mod:`fastload.detection.targets`: a COCO image's target as torchvision's v2 wrapper of
  ``CocoDetection`` makes it, and the target moved with the image by the planned ops;
* :mod:`fastload.detection.coco`: :class:`CocoDetection`, a COCO-format folder as a fastload
  dataset (the planned ops fused with decoding, the rest of a v2 pipeline run as written).

``fastload.DataLoader(..., accelerate=True)`` reads torchvision's
``wrap_dataset_for_transforms_v2(CocoDetection(...))`` with the detection references' v2
pipeline this way (:mod:`fastload.accelerate.detection_ops`).
"""

from __future__ import annotations

from fastload.detection.coco import CocoDetection

__all__ = ["CocoDetection"]
