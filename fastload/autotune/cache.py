"""autotune's on-disk cache: one JSON file of answers, keyed by everything that changes one."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from fastload.autotune.search import AutotuneResult, Measurement
from fastload.system import cache_dir

__all__ = ["CACHE_VERSION", "cache_dir", "fingerprint", "key_of", "read", "write"]

CACHE_VERSION = 3


def fingerprint(dataset: Any) -> dict[str, Any]:
    """What identifies a dataset for the cache: its kind, size, files and transforms."""
    info: dict[str, Any] = {"type": type(dataset).__qualname__}
    try:
        info["len"] = len(dataset)
    except TypeError:
        info["len"] = None
    for name in ("root", "backend", "transform", "max_pixels"):
        if hasattr(dataset, name):
            info[name] = repr(getattr(dataset, name))
    path = getattr(dataset, "path", None)
    if callable(path) and info["len"]:
        info["paths"] = [path(0), path(info["len"] - 1)]
    return info


def key_of(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()[:24]


def _read_cache(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warnings.warn(
            f"ignoring the autotune cache {file}: unreadable ({exc}); measuring again", stacklevel=3
        )
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or not isinstance(data.get("entries"), dict)
    ):
        warnings.warn(
            f"ignoring the autotune cache {file}: written by another version; measuring again",
            stacklevel=3,
        )
        return {}
    return data["entries"]


def _write_cache(file: Path, entries: dict[str, Any]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))
    tmp.replace(file)  # atomic: a reader never sees half a file


def read(file: Path, key: str) -> AutotuneResult | None:
    """The cached answer for ``key``, or ``None`` (a malformed entry is measured again)."""
    entries = _read_cache(file)
    if key not in entries:
        return None
    try:
        stored = entries[key]
        table = [Measurement(**m) for m in stored["table"]]
        return AutotuneResult(
            stored["num_workers"],
            stored["images_per_sec"],
            table,
            stored["reason"],
            True,
            key,
            stored.get("load"),
            stored.get("noise"),
            stored.get("prefetch_factor"),
            stored.get("worker_type"),
        )
    except (KeyError, TypeError):
        warnings.warn(
            f"ignoring a malformed autotune cache entry in {file}; measuring again",
            stacklevel=3,
        )
        return None


def write(file: Path, result: AutotuneResult) -> None:
    entries = _read_cache(file) if file.exists() else {}
    entries[result.key] = {k: v for k, v in result.to_dict().items() if k not in ("cached", "key")}
    try:
        _write_cache(file, entries)
    except OSError as exc:
        warnings.warn(f"could not write the autotune cache {file}: {exc}", stacklevel=3)
