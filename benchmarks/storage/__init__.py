"""Benchmarks of where samples come from: shards against a folder and webdataset, remote shards.

Run each script by its path, ``python benchmarks/storage/NAME.py``: it puts ``benchmarks/`` on the
import path, where ``results`` (the shared reporting) and the other folders are."""
