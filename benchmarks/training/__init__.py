"""Benchmarks of the training loop: its own cost, the recipe side by side, the train ceiling.

Run each script by its path, ``python benchmarks/training/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
