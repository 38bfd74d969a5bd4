"""The ``fastload`` command: ``main`` and which module holds each command.

Each command lives in ``fastload/commands/<name>.py`` (its help, arguments, run and output);
only the command asked for is imported, so ``fastload --version`` and ``--help`` stay instant.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from fastload.commands.arguments import CLIError, Parser

__all__ = ["COMMANDS", "main", "parser"]

DEBUG = "FASTLOAD_DEBUG"  # set to 1: failures show their traceback (as --debug does)

# name -> the module that holds the command
COMMANDS = {
    "info": "fastload.commands.info",
    "scan": "fastload.commands.scan",
    "bench": "fastload.commands.bench",
    "autotune": "fastload.commands.autotune",
    "doctor": "fastload.commands.doctor",
    "pack": "fastload.commands.pack",
}


def _command(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name])


def _top() -> tuple[Parser, Any]:
    """The parser of ``fastload [--version] COMMAND``, its commands not yet filled in."""
    from fastload.version import __version__

    parser = Parser(prog="fastload", description="Fast PyTorch image input pipelines.")
    parser.add_argument("--version", action="version", version=f"fastload {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    return parser, sub


def parser(command: str | None = None) -> Parser:
    """The whole parser, or with ``command`` only that command's (the others' options can
    cost an import of torch)."""
    top, sub = _top()
    for name in COMMANDS:
        if command is None or name == command:
            _command(name).add(sub)
    for each in sub.choices.values():
        each.add_argument(
            "--debug",
            action="store_true",
            help=f"show the traceback of a failure (or set {DEBUG}=1)",
        )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fastload`` command.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        The exit status: 0 on success; 1 when ``scan`` found problems, or the data made a
        command fail (no images, an unreadable file, a failed pipeline); 2 for a mistake in the
        arguments; 130 when interrupted. A failure prints one line; ``--debug`` (or
        ``FASTLOAD_DEBUG=1``) shows its traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        # --version, --help, no command or an unknown one: answered (and exited) here, before
        # any command's options, some of which import torch to list their choices
        top, sub = _top()
        for name in COMMANDS:
            sub.add_parser(name, help=_command(name).HELP)
        top.parse_args(argv)
    args = parser(command).parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG, "") not in ("", "0")
    try:
        return args.run(args)
    except CLIError as exc:
        print(f"fastload {args.command}: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("fastload: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        from fastload.errors import one_line

        print(
            f"fastload {args.command}: error: {one_line(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
