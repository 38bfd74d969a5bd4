"""The image of an ``(image, target)`` sample made float as v2's ``ToDtype(..., scale=True)``
makes it: in a worker process straight into shared memory, or on the CUDA device after the copy.

torch's loader hands a worker's tensors to the main process by copying each into shared memory;
a float32 detection image (800 x 1066 px: 10 MB) costs that copy more than its conversion.
:class:`FloatImage` writes the converted image where the hand-over would copy it to, so that
nothing is copied (a storage of the worker's ring, :mod:`fastload.memory.shared_buffers`, when
one is free: fresh shared memory is faulted in and zeroed page by page). Where the samples are
stacked into a batch instead (torch's default collate, as the segmentation references batch),
the collate copies each image into the batch's shared memory, and a sample's own shared memory
would be a second copy: there the image is made in plain memory, in torch's contiguous layout
(what the stacked batch has, so that stacking is one plain copy). The values are v2's, by v2's
own steps (a cast copy, then ``mul_(1 / 255)``); a sample handed on by itself keeps the image's
own memory layout where that is a dense one (v2's ``to`` keeps it), else (a crop's view) takes
torch's contiguous one.

With a CUDA device the image need not be float before it gets there: :class:`FloatOnDevice`
hands it on as uint8 and the batch stage converts it after the copy. A quarter of the bytes
cross the worker's shared memory, the main process's pinning and the copy, which on an H200 were
the device path's wall (9.4 ms an image delivered against 3.3 ms made by 16 workers).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from fastload import compat
from fastload.memory import shared_buffers

__all__ = ["FloatImage", "FloatOnDevice"]


class FloatImage:
    """v2's ``ToDtype`` whose image conversion is to float32 scaled to [0, 1]: the uint8 image
    converted here, then the ``ToDtype`` itself on the sample (it finds the image converted
    and converts the rest as it would).

    Args:
        to_dtype: The user's v2 ``ToDtype``.
        stacked: The collate stacks the samples (see the module's notes); ``False``: they are
            handed over one by one, from shared memory in a worker process.
    """

    draws = False  # a conversion: see fastload.detection.joint.Undrawn

    def __init__(self, to_dtype: Any, *, stacked: bool = False) -> None:
        self.to_dtype = to_dtype
        self.stacked = stacked
        self.owner = os.getpid()  # a worker process is any other

    def __call__(self, image: Any, target: Any) -> Any:
        return self.to_dtype(self.image(image), target)

    def image(self, image: Any) -> Any:
        """The image converted (anything but a uint8 tensor as it is)."""
        if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8:
            return image
        plain = image.as_subclass(torch.Tensor)
        dense = plain.is_contiguous() or plain.permute(1, 2, 0).is_contiguous()
        keep = dense and not self.stacked  # else straight into torch's contiguous layout
        stride = plain.stride() if keep else torch.empty(plain.shape, device="meta").stride()
        if not self.stacked and os.getpid() != self.owner:
            nbytes = plain.numel() * 4  # memory the main process let go of, else made anew
            storage = shared_buffers.take_storage(nbytes) or compat.new_shared_storage(nbytes)
            out = torch.empty(0, dtype=torch.float32)
            out.set_(storage, 0, plain.shape, stride)
        else:
            out = torch.empty_strided(plain.shape, stride, dtype=torch.float32)
        out.copy_(plain).mul_(1.0 / 255)
        if type(image) is not torch.Tensor:  # a tv_tensors.Image stays one
            from torchvision import tv_tensors

            out = tv_tensors.wrap(out, like=image)
        return out

    def __repr__(self) -> str:
        where = "once, for the collate to stack" if self.stacked else "in shared memory"
        return f"{self.to_dtype!r} (the image made float {where})"


class FloatOnDevice:
    """v2's ``ToDtype(torch.float32, scale=True)`` left to the device: the last per-sample op,
    after the ops that do not read the image's values. A plain uint8 image is handed on as it
    is, for the batch stage's :class:`fastload.gpu.ToFloat` to convert after the copy; any
    other image (a ``tv_tensors.Image`` no ``ToPureTensor`` unwrapped) is converted here, by
    the ``ToDtype`` itself.

    Args:
        to_dtype: The user's v2 ``ToDtype``, which converts only images.
    """

    draws = False  # a conversion: see fastload.detection.joint.Undrawn

    def __init__(self, to_dtype: Any) -> None:
        self.to_dtype = to_dtype

    def __call__(self, image: Any, target: Any) -> Any:
        if type(image) is torch.Tensor and image.dtype == torch.uint8:
            return image, target
        return self.to_dtype(image, target)

    def __repr__(self) -> str:
        return f"{self.to_dtype!r} (a uint8 image made float on the device, after the copy)"
