"""The environment every test process runs in, set before torch or Ray is imported (the root
conftest imports this first; the processes the tests start inherit it)."""

import os
import tempfile

# One OpenMP thread a process, in the test workers and every process they start: the suite runs
# in parallel workers (pyproject.toml) whose torch ops, each on every core, would oversubscribe
# the cores (OpenMP's waiting threads spin). Set before torch is imported; a test that needs
# more sets them itself.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A Ray of its own for each test worker: ray.init() with no address joins the Ray whose address
# its temporary folder holds ("When connecting to an existing cluster, num_cpus ... must not be
# provided" where a test worker's Ray met another's), so each worker has its own folder (set
# here in each worker: the workers inherit the controller's environment)
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER is not None or "RAY_TMPDIR" not in os.environ:
    os.environ["RAY_TMPDIR"] = os.path.join(tempfile.gettempdir(), f"ray-{WORKER or 'main'}")
# Nothing is downloaded in tests: Hugging Face's libraries (datasets, transformers) stay offline
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
