"""Benchmarks of decoding a sample: fastload's backends against stock torchvision, the floors a
decoder cannot pass, the GIL's hand-overs, JPEGs with restart markers, raw pixels.

Run each script by its path, ``python benchmarks/decoding/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
