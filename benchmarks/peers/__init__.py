"""Benchmarks against the pipelines people already run: torchvision's (unchanged, and its
reference scripts), DALI's, FFCV's, OpenCLIP's, Ray Data's.

Run each script by its path, ``python benchmarks/peers/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
