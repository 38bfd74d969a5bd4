"""``fastload.DataLoader`` and how it is built.

* :mod:`~fastload.loader.core`: the class, its options as attributes, ``state_dict``;
* :mod:`~fastload.loader.plan`: what a loader does, settled in named steps into a
  :class:`~fastload.loader.plan.WorkerPlan` or an :class:`~fastload.loader.plan.ExecutorPlan`;
* :mod:`~fastload.loader.workers` and :mod:`~fastload.loader.executing`: the two delivery
  paths, each with ``batches()`` and ``state()``;
* :mod:`~fastload.loader.collate`: the collate chain, in its one order;
* :mod:`~fastload.loader.delivery`: counting what a pass hands out.
"""

from fastload.loader.core import STATE_FORMAT, DataLoader
from fastload.loader.plan import ExecutorPlan, WorkerPlan, plan_loader

__all__ = ["STATE_FORMAT", "DataLoader", "ExecutorPlan", "WorkerPlan", "plan_loader"]
