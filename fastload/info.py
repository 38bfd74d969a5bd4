"""What this machine offers fastload: library versions, usable backends, CUDA devices."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

import torch

import fastload
from fastload._optional import REQUIREMENTS, check

__all__ = ["collect"]


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torchvision() -> dict[str, Any]:
    try:
        import torchvision
    except Exception as exc:  # a torchvision built for another torch fails in many ways
        return {"version": _version("torchvision"), "usable": False, "reason": str(exc)}
    return {"version": torchvision.__version__, "usable": True, "reason": None}


def _cuda() -> dict[str, Any]:
    devices = []
    available = torch.cuda.is_available()
    if available:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / 2**30, 1),
                }
            )
    cudnn = torch.backends.cudnn.version() if available else None
    return {
        "available": available,
        "torch_cuda_build": torch.version.cuda,
        "cudnn": cudnn,
        "devices": devices,
    }


def collect() -> dict[str, Any]:
    """Gather what ``fastload info`` reports.

    Returns:
        A JSON-serialisable dict with the versions of Python, torch, torchvision and numpy, one
        entry per decoding backend (usable or not, why not, and the install command), and the
        CUDA devices torch can see.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    from fastload.backends import names as registered

    backends = []
    for name in REQUIREMENTS:
        status = check(name)
        exists = name in registered()
        reason, fix = status.reason, status.fix
        if not exists:  # the library may be installed, but fastload has no backend for it yet
            reason = f"no {name!r} backend in fastload {fastload.__version__} yet" + (
                f" (its library is installed: {status.version})" if status.usable else ""
            )
            fix = "none yet: a later fastload version adds it"
        backends.append(
            {
                "name": name,
                "usable": status.usable and exists,
                "version": status.version,
                "reason": reason,
                "fix": fix,
            }
        )
    return {
        "fastload": fastload.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": cores,
        "torch": torch.__version__,
        "torchvision": _torchvision(),
        "numpy": _version("numpy"),
        "backends": backends,
        "cuda": _cuda(),
    }
