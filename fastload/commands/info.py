"""``fastload info``: versions, usable backends and CUDA devices on this machine (what it
reports is :func:`collect`; torch is imported only there, so ``--help`` stays fast)."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["HELP", "add", "collect", "run"]

HELP = "versions, usable backends and CUDA devices on this machine"


def add(sub: Any) -> None:
    info = sub.add_parser(
        "info",
        help=HELP,
        description="Show library versions, which decoding backends are usable here (and how "
        "to install the others), and the CUDA devices torch can see.",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.json:  # the first lines at once; the rest waits for torch and the backends
        import platform

        from fastload.system import cpu_cores
        from fastload.version import __version__

        print(f"fastload     {__version__}")
        cores = f"{platform.platform()}, {cpu_cores()} cores"
        print(f"python       {platform.python_version()} ({cores})", flush=True)
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print_info(info)
    return 0


def print_info(info: dict[str, Any]) -> None:
    """What ``fastload info`` prints after its first two lines (fastload, python)."""
    tv = info["torchvision"]
    print(f"torch        {info['torch']}")
    tv_note = "" if tv["usable"] else f"  (does not import: {tv['reason']})"
    print(f"torchvision  {tv['version'] or 'not installed'}{tv_note}")
    print(f"numpy        {info['numpy']}")
    print()
    print("backends")
    for b in info["backends"]:
        if b["usable"]:
            kind = "  (batch executor)" if b["kind"] == "executor" else ""
            print(f"  {b['name']:<10} usable      {b['version']}{kind}")
            for key, value in b["details"].items():
                print(f"  {'':<10}             {key.replace('_', ' ')}: {value}")
        else:
            print(f"  {b['name']:<10} unusable    {b['reason']}")
            print(f"  {'':<10}             fix: {b['fix']}")
    kernel = info["normalize_kernel"]
    print()
    if kernel["built"]:
        print("normalize    float32 batches by fastload's compiled kernel")
    else:
        print(f"normalize    float32 batches by OpenCV, at twice the cost: {kernel['reason']}")
        print(f"             fix: {kernel['fix']}")
    for key, built, unbuilt in (
        (
            "resize_kernel",
            "resize       by fastload's compiled kernel, the GIL let go once a sample",
            "resize       by torch, the GIL handed over three times a sample",
        ),
        (
            "files_kernel",
            "read         files by fastload's compiled reader, the GIL let go twice a file",
            "read         files by os, the GIL handed over four times a file",
        ),
    ):
        kernel = info[key]
        if kernel["built"]:
            print(built)
        else:
            print(f"{unbuilt}: {kernel['reason']}")
            print(f"             fix: {kernel['fix']}")
    cuda = info["cuda"]
    print()
    build = cuda["torch_cuda_build"] or "none (CPU-only build of torch)"
    print(f"cuda         torch built for CUDA {build}")
    if not cuda["devices"]:
        print("             no CUDA device visible: device='cuda' is unavailable here")
    for d in cuda["devices"]:
        print(
            f"  cuda:{d['index']}  {d['name']}  (compute {d['capability']}, {d['memory_gib']} GiB)"
        )


def _torchvision() -> dict[str, Any]:
    from fastload._optional import version_of

    try:
        import torchvision
    except Exception as exc:  # a torchvision built for another torch fails in many ways
        return {"version": version_of("torchvision"), "usable": False, "reason": str(exc)}
    return {"version": torchvision.__version__, "usable": True, "reason": None}


def _cuda() -> dict[str, Any]:
    import torch

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


def _kernel(module: str) -> dict[str, Any]:
    """Whether one of fastload's compiled kernels (``setup.py``) was built."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        fix = (
            "install a C compiler and Python's headers (Debian: apt-get install gcc "
            "python3-dev), then reinstall fastload"
        )
        return {"built": False, "reason": f"{module} is not built ({exc})", "fix": fix}
    return {"built": True, "reason": None, "fix": None}


def collect() -> dict[str, Any]:
    """Gather what ``fastload info`` reports.

    Returns:
        A JSON-serialisable dict with the versions of Python, torch, torchvision and numpy, one
        entry per decoding backend (usable or not, why not, and the install command), whether
        the compiled kernels are built (the normalize kernel of float32 batches, the resize
        kernel, the file reader), and the CUDA devices torch can see.
    """
    import platform

    import torch

    from fastload import backends
    from fastload.backends.files import FILES_KERNEL
    from fastload.gpu.functional import NORMALIZE_KERNEL
    from fastload.pixels.resampling import RESIZE_KERNEL
    from fastload.system import cpu_cores
    from fastload.version import __version__

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
        "numpy": _version_of("numpy"),
        "backends": found,
        "normalize_kernel": _kernel(NORMALIZE_KERNEL),
        "resize_kernel": _kernel(RESIZE_KERNEL),
        "files_kernel": _kernel(FILES_KERNEL),
        "cuda": _cuda(),
    }


def _version_of(distribution: str) -> str | None:
    from fastload._optional import version_of

    return version_of(distribution)
