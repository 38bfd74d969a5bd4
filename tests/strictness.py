"""The suite's policy on missing libraries: in CI every backend must be installed."""

from __future__ import annotations

import os

STRICT_ENV = "FASTLOAD_REQUIRE_ALL_BACKENDS"


def backends_required() -> bool:
    """In CI (CI=true) every backend must be installed: a skipped backend is an untested one."""
    flag = os.environ.get(STRICT_ENV, os.environ.get("CI", ""))
    return flag.strip().lower() not in ("", "0", "false", "no")
