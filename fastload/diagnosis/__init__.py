"""``fastload.doctor``: the speed checklist, measured on the user's own step and loader.

It runs a short, bounded measurement of one training step as the user wrote it (their model,
optimizer and loss; forward, backward, step) fed by their loader, and splits each step's time
into waiting for data, the host-to-device copy and compute. It measures the loader alone
against what the step consumes, tries the cheap changes (channels_last, bf16 autocast, a fused
optimizer) on a copy of the model, and checks what can be read off the objects (a bias before a
BatchNorm, ``num_workers=0``, unpinned memory, float32 batches, ``cudnn.benchmark``). Each
finding carries its cost, measured where it was tried, and the fix in one line; they are
ranked by the gain expected.

The model, its buffers (BatchNorm statistics), the optimizer's state and torch's random
streams are put back as they were: as far as the user's objects are concerned, nothing trained.

The package (named ``diagnosis``, not ``doctor``: ``fastload.doctor`` is the function, and a
subpackage of that name would replace it on the package root when imported):

* :mod:`~fastload.diagnosis.run`: :func:`doctor` itself;
* :mod:`~fastload.diagnosis.measuring`: the measured step, the loader alone, the clock;
* :mod:`~fastload.diagnosis.checks`: what is read off the objects (:data:`CHECKS`);
* :mod:`~fastload.diagnosis.trials`: what is timed (:data:`TRIALS`);
* :mod:`~fastload.diagnosis.report`: the findings and the report.

Beside it, the data's own check before a long run: :mod:`~fastload.diagnosis.scan` (``fastload
scan``: what will not decode, or decode oddly, and which files are no image at all).
"""

from fastload.diagnosis.checks import CHECKS, Context, bias_before_norm, static_findings
from fastload.diagnosis.report import DoctorReport, Finding
from fastload.diagnosis.run import doctor
from fastload.diagnosis.trials import TRIALS, Trial

__all__ = [
    "CHECKS",
    "TRIALS",
    "Context",
    "DoctorReport",
    "Finding",
    "Trial",
    "bias_before_norm",
    "doctor",
    "static_findings",
]
