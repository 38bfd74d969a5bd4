"""The DALI backend: NVIDIA DALI executes the dataset's pipeline, a whole batch at a time.

Under ``fastload.DataLoader`` (``backend="dali"``, or a dataset made with ``backend="dali"``),
DALI replaces the worker processes. What decides the result (order, checks, geometry, faults)
is fastload's, shared with every batch executor (:mod:`fastload.backends.executor`). DALI then
decodes only each planned region (``decoders.image_slice``: libjpeg-turbo on the CPU, nvJPEG on
a GPU with ``device="mixed"``), resizes it (``resize``, antialiased when shrinking), and mirrors,
normalizes and lays it out channels-first (``crop_mirror_normalize``), on its own threads
(``num_threads``), while the previous batch is in use.

The package's rooms: :mod:`.decoder` (one file at a time, and the care every DALI pipeline
needs), :mod:`.graph` (the DALI graph and its per-sample inputs), :mod:`.engine` (feeding DALI
and collecting its output as torch tensors) and :mod:`.backend` (the registry entry).
"""

from fastload.backends.dali.backend import DaliBackend
from fastload.backends.dali.decoder import DALI, SampleDecoder, dali_error
from fastload.backends.dali.engine import DaliBatches, DaliEngine, fold_batch_ops, translate
from fastload.backends.dali.graph import build_pipeline, sample_inputs
from fastload.backends.executor import ExecutorOptions as DaliOptions
from fastload.backends.executor import Folded, Translation

__all__ = [
    "DALI",
    "DaliBackend",
    "DaliBatches",
    "DaliEngine",
    "DaliOptions",
    "Folded",
    "SampleDecoder",
    "Translation",
    "build_pipeline",
    "dali_error",
    "fold_batch_ops",
    "sample_inputs",
    "translate",
]
