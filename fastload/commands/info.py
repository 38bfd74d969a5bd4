"""``fastload info``: versions, usable backends and CUDA devices on this machine."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["HELP", "add", "run"]

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
    from fastload.info import collect

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
