"""fastload's epochs as Ray Datasets: decoding on any node's CPUs, the same draws as the loader.

A ``fastload.DataLoader`` describes the epoch (its dataset, sampler, ``generator``, batch
size and batch ops). :func:`epoch_dataset` draws its next epoch as the loader would and
returns a Ray Dataset whose tasks read and decode each of the loader's batches wherever Ray
has CPUs, one output block a batch, images and labels as numpy arrays (no pickled Python
objects). :func:`batches` reads such a dataset, or a training worker's share of it
(``ray.train.get_dataset_shard``), back into the loader's batches: its batch ops applied with
each batch's seed where the loader applies them (in the tasks for a loader on the CPU, on the
device for a CUDA one, Ray then carrying uint8), through the prefetcher onto a CUDA device.
The same seed gives the same batches, pixel for pixel, as iterating the loader itself
(tested).

Ray is imported only here: ``pip install "fastload[ray]"``.
"""

from __future__ import annotations

from fastload.ray.delivery import batches
from fastload.ray.reading import epoch_dataset

__all__ = ["batches", "epoch_dataset"]
