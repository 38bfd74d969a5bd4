"""Benchmarks of the batch ops and of delivery to the device.

Run each script by its path, ``python benchmarks/gpu/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
