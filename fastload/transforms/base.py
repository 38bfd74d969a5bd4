"""What every per-sample op is: :class:`Transform` (``make_params``, then ``apply_params`` on a
:class:`~fastload.pixels.resampling.View`), and the draws the ops make from torch's stream as
torchvision makes them (or from a thread worker's sample stream, reproduced without torch)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from fastload.pixels.resampling import View, apply_planned
from fastload.sampling import drawing

__all__ = ["Transform", "randint", "size_pair", "uniform"]


def size_pair(size: int | Sequence[int], what: str = "size") -> tuple[int, int]:
    """(height, width) from an int or a 1- or 2-element sequence, as torchvision reads it."""
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) in (1, 2):
        pair = (size[0], size[0]) if len(size) == 1 else (size[0], size[1])
    else:
        raise ValueError(f"{what}={size!r} must be an int or a sequence of 1 or 2 ints")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"{what}={size!r} must hold positive ints")
    return pair


# One-element tensors the draws below fill again, one set per thread: the same kernels, and so
# the same numbers from torch's stream, as torchvision's fresh tensors, at half the cost
# (planning is on the executors' critical path).
_scratch = threading.local()


def uniform(low: float, high: float) -> float:
    """``torch.empty(1).uniform_(low, high).item()``, as torchvision draws it."""
    words = drawing.words()
    if words is not None:
        return words.uniform(low, high)
    dtype = torch.get_default_dtype()  # torch.empty(1) follows it
    buffer = getattr(_scratch, "floats", None)
    if buffer is None or buffer.dtype != dtype:
        buffer = _scratch.floats = torch.empty(1, dtype=dtype)
    return buffer.uniform_(low, high, generator=drawing.generator()).item()


def randint(low: int, high: int) -> int:
    """``torch.randint(low, high, size=(1,)).item()``: randint fills an int64 tensor with
    ``random_(low, high)``."""
    words = drawing.words()
    drawn = None if words is None else words.integer(low, high)
    if drawn is not None:
        return drawn
    buffer = getattr(_scratch, "ints", None)
    if buffer is None:
        buffer = _scratch.ints = torch.empty(1, dtype=torch.int64)
    return int(buffer.random_(low, high, generator=drawing.generator()).item())


class Transform:
    """A per-sample op that plans on a :class:`View` and can run fused with decoding.

    Subclasses implement :meth:`apply_params`, and :meth:`make_params` when they draw.
    Calling an op on a C x H x W uint8 tensor plans on the whole image and renders the result,
    so ops also work outside ``fastload.ImageFolder``.
    """

    interpolation: str = "bilinear"
    antialias: bool = True
    # an op that draws its resampling per image (timm's random interpolation) sets it on the
    # view it plans, and says so here: what renders one interpolation a batch cannot run it
    draws_interpolation: bool = False

    def make_params(self, view: View) -> Any:
        """Draw this op's random parameters for ``view`` (from torch's CPU stream, as
        torchvision draws them); ``None`` for an op that draws nothing."""
        return None

    def apply_params(self, view: View, params: Any) -> View:
        """The view after this op, with ``params`` from :meth:`make_params`; draws nothing."""
        raise NotImplementedError

    def plan(self, view: View) -> View:
        """The view after this op: its draws, then their application."""
        return self.apply_params(view, self.make_params(view))

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return apply_planned(image, self.plan, type(self).__name__, self.render_options)

    @property
    def render_options(self) -> dict[str, Any]:
        """How this op resamples when it is the one that decides (see ``Compose``)."""
        return {"interpolation": self.interpolation, "antialias": self.antialias}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"
