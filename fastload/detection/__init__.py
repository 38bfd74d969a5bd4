"""Detection and segmentation: images with their boxes, labels and masks, read fastload's way.

* :mod:`fastload.detection.targets`: a COCO image's target as torchvision's v2 wrapper of
  ``CocoDetection`` makes it, and the target moved with the image by the planned ops;
* :mod:`fastload.detection.joint`: what such datasets share (the decode that keeps the planned
  views, the target moved through them, the other ops called on ``(image, target)``);
* :mod:`fastload.detection.iou_crop` and :mod:`fastload.detection.ssd`: v2's ``RandomIoUCrop``,
  ``RandomZoomOut`` and a leading ``RandomPhotometricDistort`` as planned ops;
* :mod:`fastload.detection.convert`: v2's float conversion of the image, in a worker process
  straight into shared memory;
* :mod:`fastload.detection.coco`: :class:`CocoDetection`, a COCO-format folder as a fastload
  dataset;
* :mod:`fastload.detection.coco_shards`: :class:`CocoShards`, a COCO dataset packed as tar
  shards by ``fastload.pack``;
* :mod:`fastload.detection.segmentation`: :class:`SegmentationList`, images with their mask
  PNGs (VOC's layout);
* :mod:`fastload.detection.batching`: :class:`PaddedBatch`, a ``collate_fn`` giving one padded
  tensor per batch of images of different sizes, and the sizes beside it.

``fastload.DataLoader(..., accelerate=True)`` reads torchvision's
``wrap_dataset_for_transforms_v2`` of ``CocoDetection`` or ``VOCSegmentation`` with the
references' v2 pipelines this way (:mod:`fastload.accelerate.detection_ops`).
"""

from __future__ import annotations

from fastload.detection.batching import PaddedBatch, pad_images
from fastload.detection.coco import CocoDetection
from fastload.detection.coco_shards import CocoShards
from fastload.detection.segmentation import SegmentationList

__all__ = ["CocoDetection", "CocoShards", "PaddedBatch", "SegmentationList", "pad_images"]
