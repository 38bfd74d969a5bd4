"""The DALI graph fastload builds, and the per-sample inputs that steer it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fastload.backends.dali.decoder import track
from fastload.backends.executor import ExecutorOptions, Folded, Translation
from fastload.pixels.resampling import View, visible_part

__all__ = ["INPUTS", "batch_inputs", "build_pipeline", "sample_inputs"]

# DALI's interpolation types for fastload's (torchvision's) names
_INTERP = {"nearest": "INTERP_NN", "bilinear": "INTERP_LINEAR", "bicubic": "INTERP_CUBIC"}

# The per-sample inputs the graph reads, besides the encoded file ("pad_*" only when it pads),
# with the dtype each is fed as.
INPUTS = {
    "anchor": np.int32,
    "shape": np.int32,
    "size": np.float32,
    "roi_start": np.float32,
    "roi_end": np.float32,
    "pad_anchor": np.int32,
    "pad_shape": np.int32,
    "mirror": np.int32,
}


def build_pipeline(
    options: ExecutorOptions,
    translation: Translation,
    max_batch: int,
    folded: Folded | None = None,
) -> Any:
    """The DALI graph: region decode, resize, (pad,) mirror, (normalize,) channels-first."""
    folded = folded or Folded()
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    cuda = options.device.type == "cuda"
    pipe = Pipeline(
        batch_size=max_batch,
        num_threads=options.num_threads,
        device_id=_device_index(options.device) if cuda else None,
        prefetch_queue_depth=1,  # fastload schedules `prefetch` iterations ahead itself
        exec_dynamic=True,
    )

    def feed(name: str, dtype: Any, ndim: int) -> Any:
        # no_copy: DALI reads the fed arrays where they are (a copy of a batch's files cost
        # ~45 us an image); the engine keeps them alive until their iteration is collected
        return fn.external_source(name=name, dtype=dtype, ndim=ndim, no_copy=True)

    with pipe:
        data = feed("encoded", types.UINT8, 1)
        anchor, shape = feed("anchor", types.INT32, 1), feed("shape", types.INT32, 1)
        images = fn.decoders.image_slice(
            data,
            anchor,
            shape,
            axis_names="WH",
            device="mixed" if cuda else "cpu",
            output_type=types.RGB,
        )
        images = fn.resize(
            images,
            size=feed("size", types.FLOAT, 1),
            roi_start=feed("roi_start", types.FLOAT, 1),
            roi_end=feed("roi_end", types.FLOAT, 1),
            roi_relative=False,
            antialias=translation.antialias,
            interp_type=getattr(types, _INTERP[translation.interpolation]),
        )
        if translation.may_pad:  # a crop larger than the image: zeros around it
            images = fn.slice(
                images,
                feed("pad_anchor", types.INT32, 1),
                feed("pad_shape", types.INT32, 1),
                axis_names="WH",
                out_of_bounds_policy="pad",
                fill_values=0,
            )
        images = _mirror_normalize(images, feed("mirror", types.INT32, 0), folded.normalize)
        pipe.set_outputs(images)
    pipe.build()
    return track(pipe)


def _mirror_normalize(images: Any, mirror: Any, normalize: Any) -> Any:
    """The graph's last op: the flip, the folded ``Normalize`` if any, channels-first."""
    from nvidia.dali import fn, types

    if normalize is None:
        return fn.crop_mirror_normalize(
            images, mirror=mirror, dtype=types.UINT8, output_layout="CHW"
        )
    # fastload.gpu.Normalize's units are [0, 1]: DALI's are the pixels' 0-255
    return fn.crop_mirror_normalize(
        images,
        mirror=mirror,
        mean=[255.0 * m for m in normalize.mean],
        std=[255.0 * s for s in normalize.std],
        dtype=types.FLOAT16 if normalize.dtype == torch.float16 else types.FLOAT,
        output_layout="CHW",
    )


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def sample_inputs(view: View, width: int, height: int) -> dict[str, Any]:
    """The per-sample DALI inputs that render ``view`` of a ``width`` x ``height`` image (plain
    numbers; :func:`batch_inputs` makes a batch's arrays).

    The region is decoded on whole pixels around the view's box, clipped to the image; the
    resize then samples the box within it, and a box reaching outside the image gets the part
    inside resized into its place on a zero canvas (torchvision's padding).
    """
    x0, y0, x1, y1 = view.box
    out_w, out_h = view.width, view.height
    part = visible_part(view.box, out_w, out_h, width, height)
    if part is None:  # nothing of the image is visible: one pixel, padded away
        sx, sy = (x1 - x0) / out_w, (y1 - y0) / out_h
        c0, c1, r0, r1 = 0, 1, 0, 1
        bx0, by0 = max(x0, 0.0), max(y0, 0.0)
        bx1, by1 = min(x0 + sx, float(width)), min(y0 + sy, float(height))
    else:
        (c0, c1), (r0, r1) = part.columns, part.rows
        bx0, by0, bx1, by1 = part.box
    ax, ay = min(math.floor(bx0), width - 1), min(math.floor(by0), height - 1)
    ex, ey = max(math.ceil(bx1), ax + 1), max(math.ceil(by1), ay + 1)
    return {
        "anchor": (ax, ay),
        "shape": (ex - ax, ey - ay),
        "size": (r1 - r0, c1 - c0),
        "roi_start": (by0 - ay, bx0 - ax),
        "roi_end": (by1 - ay, bx1 - ax),
        "pad_anchor": (-c0, -r0),
        "pad_shape": (out_w, out_h),
        "mirror": int(view.mirror),
    }


def batch_inputs(per_sample: list[dict[str, Any]], names: Any) -> dict[str, np.ndarray]:
    """A batch's per-sample inputs as one array per name (the batch the outer dimension):
    DALI takes an array in one call, where a list costs a conversion per sample."""
    return {name: np.array([s[name] for s in per_sample], dtype=INPUTS[name]) for name in names}
