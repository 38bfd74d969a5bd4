"""Choose ``num_workers`` by measuring throughput, not by formula, and remember the answer.

* :mod:`~fastload.autotune.search`: the pure search over a measuring function (worker counts,
  then ``prefetch_factor`` where the workers wait), and what it produces;
* :mod:`~fastload.autotune.measuring`: measuring a real loader's images/s and its workers'
  CPU share;
* :mod:`~fastload.autotune.cache`: the on-disk cache;
* :mod:`~fastload.autotune.tune`: :func:`autotune` itself, as named steps, and
  :func:`choose_worker_type` (threads or processes at a given count).
"""

from fastload.autotune.cache import CACHE_VERSION, cache_dir
from fastload.autotune.measuring import PRECISION, measure_loader, measure_usage
from fastload.autotune.search import (
    PREFETCH_LIMIT,
    TOLERANCE,
    WAITING,
    AutotuneResult,
    Measurement,
    compare_worker_types,
    prefer_larger,
    search,
    search_prefetch,
)
from fastload.autotune.tune import autotune, choose_worker_type

__all__ = [
    "CACHE_VERSION",
    "PRECISION",
    "PREFETCH_LIMIT",
    "TOLERANCE",
    "WAITING",
    "AutotuneResult",
    "Measurement",
    "autotune",
    "cache_dir",
    "choose_worker_type",
    "compare_worker_types",
    "measure_loader",
    "measure_usage",
    "prefer_larger",
    "search",
    "search_prefetch",
]
