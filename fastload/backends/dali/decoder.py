"""DALI's per-sample decoding, and the process-wide care every DALI pipeline needs."""

from __future__ import annotations

import os
import re
import weakref
from typing import Any

import numpy as np

from fastload._optional import Requirement, require
from fastload.backends.plans import reduce_by_area

__all__ = ["DALI", "SampleDecoder", "dali_error", "track"]

DALI = Requirement("nvidia-dali-cuda120", "nvidia.dali", 'pip install "fastload[dali]"')

# Every DALI pipeline fastload builds in this process. A process forked from here (a DataLoader
# worker) inherits them as plain memory, without the threads they wait on: if its garbage
# collector finalizes one (an object in a reference cycle), the destructor waits for those
# threads forever. The child keeps them alive instead; forked workers end with os._exit, so they
# are never destroyed there.
_PIPELINES: weakref.WeakSet[Any] = weakref.WeakSet()
_INHERITED: list[Any] = []


def _keep_inherited_pipelines() -> None:
    _INHERITED.extend(_PIPELINES)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keep_inherited_pipelines)


def track(pipe: Any) -> Any:
    """Record a built DALI pipeline so that a forked child never destroys its copy."""
    _PIPELINES.add(pipe)
    return pipe


def dali_error(exc: BaseException) -> str:
    """What a DALI exception says went wrong, without its traceback and C++ context."""
    text = str(exc)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip()
        and not line.strip().startswith(("Current pipeline", "C++ context", "Critical error"))
    ]
    return re.sub(r"\s+", " ", " ".join(lines[:2])) if lines else type(exc).__name__


class SampleDecoder:
    """Decodes one file at a time with DALI's CPU decoder (libjpeg-turbo inside DALI), in
    stored orientation, in whichever process uses it (rebuilt after a fork)."""

    def __init__(self) -> None:
        require(DALI, backend="dali")  # raises with the install command when missing
        self._pipe: Any = None
        self._pid: int | None = None

    def _pipeline(self) -> Any:
        if self._pipe is None or self._pid != os.getpid():
            from nvidia.dali import fn, types
            from nvidia.dali.pipeline import Pipeline

            pipe = Pipeline(
                batch_size=1,
                num_threads=1,
                device_id=None,
                exec_dynamic=True,
                prefetch_queue_depth=1,
            )
            with pipe:
                data = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
                # stored orientation: the shared path applies EXIF, as for every backend
                image = fn.decoders.image(
                    data, device="cpu", output_type=types.RGB, adjust_orientation=False
                )
                pipe.set_outputs(image)
            pipe.build()
            self._pipe, self._pid = track(pipe), os.getpid()
        return self._pipe

    def decode(self, data: bytes | np.ndarray, reduce: int = 1) -> np.ndarray:
        """H x W x 3 uint8 RGB of a whole file, at 1/``reduce`` of its size.

        Raises:
            ValueError: DALI cannot decode it; the message says why.
        """
        pipe = self._pipeline()
        encoded = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        try:
            pipe.feed_input("encoded", [encoded])
            pipe.schedule_run()
            (images,) = pipe.outputs()
            array = np.array(images.as_tensor())[0]
        except RuntimeError as exc:
            self._pipe = None  # start clean after a failure
            raise ValueError(f"DALI could not decode it: {dali_error(exc)}") from None
        return reduce_by_area(array, reduce)  # no DCT-domain scaling here
