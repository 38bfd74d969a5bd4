"""Run a user's training script unchanged, as ``__main__``, after an integration has put
fastload's loader where the script's framework builds its own (``python -m
fastload.integrations.timm train.py ...``, ``python -m fastload.integrations.transformers
script.py ...``)."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable, Sequence

__all__ = ["run_script"]


def run_script(
    argv: Sequence[str] | None,
    *,
    module: str,
    install: Callable[[], None],
    about: str = "",
) -> None:
    """Call ``install``, then run the script ``argv`` names, with the rest of ``argv`` as its
    command line.

    Args:
        argv: The script's path, then its arguments (``sys.argv[1:]`` when ``None``).
        module: The integration's module, for the usage line.
        install: Puts fastload's loader in the framework's place.
        about: Printed with the usage line for ``-h`` / ``--help``.

    Raises:
        SystemExit: No script given, or help asked for: the usage line.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        if argv and about:
            print(about, file=sys.stderr)
        raise SystemExit(f"usage: python -m {module} path/to/script.py [its arguments]")
    install()
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
