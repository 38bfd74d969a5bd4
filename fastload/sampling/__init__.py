"""The random streams and seeds: where an epoch stands, the seed of each sample and batch, and
how a sample's draws are made from its own stream.

- :mod:`~fastload.sampling.epoch`: :class:`EpochSampler`, torch's index sampler read so that an
  epoch can be resumed, handing out each index with its sample's seed;
- :mod:`~fastload.sampling.seeds`: the seeds themselves, and the keys that carry them;
- :mod:`~fastload.sampling.streams`: the global streams seeded per sample (:func:`seeded`);
- :mod:`~fastload.sampling.drawing`: in thread workers, each sample's own generator, and the
  lock other draws run under;
- :mod:`~fastload.sampling.torch_draws`: torch's draws reproduced in numpy, with no torch call.
"""

from fastload.sampling.epoch import EpochSampler
from fastload.sampling.seeds import (
    KeyedBatch,
    SampleKey,
    SeededSamples,
    Seeding,
    batch_seed,
    epoch_seed,
    sample_seed,
    sample_seeds,
)
from fastload.sampling.streams import seed_both, seeded, streams_kept

__all__ = [
    "EpochSampler",
    "KeyedBatch",
    "SampleKey",
    "SeededSamples",
    "Seeding",
    "batch_seed",
    "epoch_seed",
    "sample_seed",
    "sample_seeds",
    "seed_both",
    "seeded",
    "streams_kept",
]
