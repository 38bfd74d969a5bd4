"""Where a translated pipeline hands over to the user's own ops, and takes back from them.

When ``accelerate`` runs only the leading part of a torchvision pipeline, the user's ops that
follow get what torchvision would have given them at that point (:class:`HandOn`, made from
the fused uint8 tensor), and a trailing conversion that runs on whole batches gets their result
as the uint8 tensor it takes (:class:`HandBack`). Both are exact: a PIL image and
``PILToTensor`` / ``ToTensor`` / ``ToImage`` are lossless on uint8 RGB.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["HandBack", "HandOn"]


class HandOn:
    """What torchvision would hand the op after the cut, made from the fused C x H x W uint8
    tensor: a PIL RGB image (``"pil"``), or, in place of the user's own conversion of that PIL
    image, exactly what the conversion returns (``"uint8"``: ``PILToTensor``; ``"float"``:
    ``ToTensor``; ``"image"``: ``ToImage``), which spares a round trip through PIL.

    Args:
        form: One of ``"pil"``, ``"uint8"``, ``"float"``, ``"image"``.
        replaces: The repr of the user's conversion it stands for ("" for ``"pil"``).
    """

    FORMS = ("pil", "uint8", "float", "image")

    def __init__(self, form: str, replaces: str = "") -> None:
        if form not in self.FORMS:
            raise ValueError(f"form={form!r} is not valid; valid: {', '.join(self.FORMS)}")
        self.form, self.replaces = form, replaces

    def __call__(self, image: torch.Tensor) -> Any:
        # image is a channels-first view of an H x W x C buffer, the layout pil_to_tensor
        # returns; ToTensor makes it contiguous before converting, as here
        if self.form == "uint8":
            return image
        if self.form == "float":
            return image.contiguous().to(torch.get_default_dtype()).div(255)
        if self.form == "image":
            from torchvision import tv_tensors

            return tv_tensors.Image(image)
        from PIL import Image

        return Image.fromarray(image.permute(1, 2, 0).numpy())

    def __repr__(self) -> str:
        return f"HandOn({self.form!r})"


class HandBack:
    """What the user's ops run as written give back, made into the uint8 tensor the batch
    ops take: a PIL image as ``PILToTensor`` makes it (the batch ops then convert as the
    user's conversion would); a uint8 tensor passes where the conversion (``ToImage``) takes
    one too.

    Args:
        replaces: The repr of the user's conversion, which now runs on the batch.
        tensors: Whether that conversion takes a uint8 tensor as well.
    """

    def __init__(self, replaces: str, *, tensors: bool = False) -> None:
        self.replaces, self.tensors = replaces, tensors

    def __call__(self, image: Any) -> torch.Tensor:
        from PIL import Image

        if isinstance(image, Image.Image):
            from torchvision.transforms.functional import pil_to_tensor

            tensor = pil_to_tensor(image)
            if tensor.dtype == torch.uint8:
                return tensor
        elif self.tensors and isinstance(image, torch.Tensor) and image.dtype == torch.uint8:
            return image.as_subclass(torch.Tensor)
        raise TypeError(
            f"fastload runs {self.replaces} on whole batches and expected the op before it "
            f"to return a PIL image, as it does on torchvision's path; got "
            f"{_kind(image)}: pass accelerate=False for this pipeline"
        )

    def __repr__(self) -> str:
        return f"HandBack({self.replaces!r})"


def _kind(image: Any) -> str:
    from PIL import Image

    if isinstance(image, Image.Image):
        return f"a PIL image of mode {image.mode!r}"
    return type(image).__name__
