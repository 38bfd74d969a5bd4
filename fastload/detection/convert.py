"""The image of an ``(image, target)`` sample made float as v2's ``ToDtype(..., scale=True)``
makes it, in a worker process straight into shared memory.

torch's loader hands a worker's tensors to the main process by copying each into shared
memory; a float32 detection image (800 x 1066 px: 10 MB) costs that copy more than its
conversion. :class:`FloatImage` writes the converted image where the hand-over would copy it
to, so that nothing is copied. The values are v2's, by v2's own steps (a cast copy, then
``mul_(1 / 255)``), in the image's own memory layout, as v2's ``to`` keeps it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["FloatImage"]


class FloatImage:
    """v2's ``ToDtype`` whose image conversion is to float32 scaled to [0, 1]: the uint8 image
    converted here, then the ``ToDtype`` itself on the sample (it finds the image converted
    and converts the rest as it would).

    Args:
        to_dtype: The user's v2 ``ToDtype``.
    """

    def __init__(self, to_dtype: Any) -> None:
        self.to_dtype = to_dtype
        self.owner = os.getpid()  # a worker process is any other

    def __call__(self, image: Any, target: Any) -> Any:
        return self.to_dtype(self.image(image), target)

    def image(self, image: Any) -> Any:
        """The image converted (anything but a uint8 tensor as it is)."""
        if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8:
            return image
        plain = image.as_subclass(torch.Tensor)
        if not (plain.is_contiguous() or plain.permute(1, 2, 0).is_contiguous()):
            plain = plain.contiguous()  # a layout that is not a decoder's: made plain
        if os.getpid() != self.owner:
            from fastload.compat import new_shared_storage

            storage = new_shared_storage(plain.numel() * 4)
            out = torch.empty(0, dtype=torch.float32)
            out.set_(storage, 0, plain.shape, plain.stride())
        else:
            out = torch.empty_strided(plain.shape, plain.stride(), dtype=torch.float32)
        out.copy_(plain).mul_(1.0 / 255)
        if type(image) is not torch.Tensor:  # a tv_tensors.Image stays one
            from torchvision import tv_tensors

            out = tv_tensors.wrap(out, like=image)
        return out

    def __repr__(self) -> str:
        return f"{self.to_dtype!r} (the image made float in shared memory)"
