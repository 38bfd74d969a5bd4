"""What the commands share: the one-line error, argument types, and the image folder argument."""

from __future__ import annotations

import argparse
import os
from typing import Any, NoReturn

__all__ = [
    "CLIError",
    "Parser",
    "add_data",
    "data_argument",
    "data_folder",
    "image_dataset",
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
    """The image folder or shards, positional (like scan's) or as --data."""
    from fastload.synthetic import DEFAULT_IMAGES, default_root

    where = (
        f"default: {DEFAULT_IMAGES} ImageNet-like JPEGs made once in {default_root()} "
        "(FASTLOAD_CACHE_DIR moves it)"
    )
    command.add_argument(
        "dir",
        metavar="DIR",
        nargs="?",
        help="a class-folder image set, or shards (a folder of .tar files, a pack's folder, "
        f"a brace pattern such as 'shards-{{0000..0099}}.tar') ({where})",
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
        from fastload.shards.sources import is_shards

        if not os.path.isdir(path) and not is_shards(path):
            raise CLIError(f"{path!r} is not a folder or shards")
        return path
    progress = Progress(progress_label)
    try:
        return str(default_data(progress=progress))
    finally:
        progress.close()


def image_dataset(
    data: str, transform: Any, *, backend: str, command: str, on_error: str = "raise"
) -> Any:
    """A fastload dataset of ``data``: ``ImageShards`` for shards, else ``ImageFolder``.

    Raises:
        CLIError: A bad backend, a missing library, or no images (the message says which).
    """
    from fastload.shards.sources import is_shards
    from fastload.shards.storage.remote import RemoteError

    try:
        if is_shards(data):
            from fastload.shards.dataset import ImageShards

            # only doctor runs the user's step on labels; the others measure the images
            target = "cls" if command == "doctor" else None
            return ImageShards(data, transform, backend=backend, on_error=on_error, target=target)  # type: ignore[arg-type]
        from fastload.datasets import ImageFolder

        return ImageFolder(data, transform, backend=backend, on_error=on_error)  # type: ignore[arg-type]
    except (ValueError, ImportError) as exc:
        raise CLIError(str(exc)) from None
    except RemoteError as exc:  # remote shards, read with the environment's credentials
        raise CLIError(str(exc), status=1) from None
    except FileNotFoundError as exc:
        if is_shards(data):  # a shard the source lists is missing: named in the message
            raise CLIError(str(exc), status=1) from None
        raise CLIError(
            f"no image files found in {data!r}: {command} reads DIR/<class>/<image> files "
            f"(torchvision's ImageFolder layout) or shards; run 'fastload scan {data}'",
            status=1,
        ) from None
