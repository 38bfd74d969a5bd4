"""Benchmarks of the loader: worker threads against processes, batch memory, what float32 costs,
autotune, faults, and the batch executors' CPU side.

Run each script by its path, ``python benchmarks/loader/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
