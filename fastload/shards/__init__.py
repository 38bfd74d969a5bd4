"""Datasets in tar shards (the WebDataset layout): reading, indexing, sampling and packing.

Grouped by concern, lowest first:

- ``format/``: the shard format, no I/O beyond the files it is given: ``tar`` (members found,
  headers written), ``index`` (members grouped into samples; DALI's v1.2 index of them),
  ``manifest`` (what ``pack`` writes beside its shards), ``members`` (a sample's image and
  target members, and what a target member means), ``tables`` (image-text tables for ``pack``).
- ``storage/``: where the bytes come from: ``local`` (positioned reads through a few open files
  per thread), ``remote`` (every request to remote storage: retries, timeouts, counters),
  ``ranged`` (plain GETs straight into a file), ``cache`` (the machine's bounded cache of whole
  remote shards), ``readahead`` (a rank's shards downloaded ahead of its sampler), ``upload``
  (a pack's staging folder uploaded, the manifest last).
- ``sources`` (what a user names, resolved into shards and their sizes) and ``sampler``
  (``ShardSampler``: an epoch's order, shard by shard).
- ``indexing``: each shard's index, after resolving.
- ``dataset`` (:class:`fastload.ImageShards`) and ``pack`` (:func:`fastload.pack`).

A source given to ``ImageShards`` goes one way: resolved (``sources``), then indexed
(``indexing``), then read into the dataset's table (``dataset``); only ``storage`` talks to the
store.
"""
