"""What the commands share: the one-line error, argument types, and the image folder argument."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

__all__ = [
    "CLIError",
    "Parser",
    "add_data",
    "data_argument",
    "data_folder",
    "positive_float",
    "positive_int",
    "workers",
]


class CLIError(Exception):
    """A user mistake: printed as one line, no traceback; exit status 2 (an argument), or 1
    (``status=1``: the data)."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, with the way to more help, instead of argparse's usage block.
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or 'auto'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be positive")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def add_data(command: argparse.ArgumentParser) -> None:
    """The image folder, positional (like scan's) or as --data."""
    from fastload.synthetic import DEFAULT_IMAGES, default_root

    where = (
        f"default: {DEFAULT_IMAGES} ImageNet-like JPEGs made once in {default_root()} "
        "(FASTLOAD_CACHE_DIR moves it)"
    )
    command.add_argument(
        "dir", metavar="DIR", nargs="?", help=f"a class-folder image set ({where})"
    )
    command.add_argument("--data", metavar="DIR", help="the same as DIR")


def data_argument(args: argparse.Namespace) -> str | None:
    if args.dir is not None and args.data is not None and args.dir != args.data:
        raise CLIError(f"two folders given: DIR {args.dir!r} and --data {args.data!r}; give one")
    return args.dir if args.dir is not None else args.data


def data_folder(path: str | None, progress_label: str) -> str:
    from fastload._progress import Progress
    from fastload.synthetic import default_data

    if path is not None:
        if not os.path.isdir(path):
            raise CLIError(f"{path!r} is not a folder")
        return path
    progress = Progress(progress_label)
    try:
        return str(default_data(progress=progress))
    finally:
        progress.close()
