"""Where shards' bytes come from: positioned reads of local shards through a few open files per
thread (``local``); remote storage through fsspec, every request retried, counted and timed out
(``remote``), and plain GETs straight into a file where a URL allows them (``ranged``); the
machine's bounded cache of whole remote shards (``cache``), a rank's shards downloaded ahead of
its sampler (``readahead``), and a pack uploaded from its staging folder (``upload``)."""
