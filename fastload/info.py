"""What this machine offers fastload: library versions, usable backends, CUDA devices."""

from __future__ import annotations

import platform
from typing import Any

import torch

from fastload import backends
from fastload._optional import version_of
from fastload.system import cpu_cores
from fastload.version import __version__

__all__ = ["collect"]


def _torchvision() -> dict[str, Any]:
    try:
        import torchvision
    except Exception as exc:  # a torchvision built for another torch fails in many ways
        return {"version": version_of("torchvision"), "usable": False, "reason": str(exc)}
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
    found = []
    for name in backends.names():
        status = backends.check(name)
        found.append(
            {
                "name": name,
                "kind": backends.kind(name),
                "usable": status.usable,
                "version": status.version,
                "reason": status.reason,
                "fix": status.fix,
                "details": backends.get(name).details() if status.usable else {},
            }
        )
    return {
        "fastload": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": cpu_cores(),
        "torch": torch.__version__,
        "torchvision": _torchvision(),
        "numpy": version_of("numpy"),
        "backends": found,
        "cuda": _cuda(),
    }
