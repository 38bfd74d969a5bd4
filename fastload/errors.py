"""What fastload raises and warns about an unreadable image, and how it words the reason.

The lowest layer of the package: it imports nothing from fastload, so every module (datasets,
backends, executors, the loader) can raise and warn in the same words.
"""

from __future__ import annotations

import warnings

__all__ = [
    "STAGES",
    "ImageDecodeError",
    "UnreadableImageWarning",
    "cannot_read",
    "one_line",
    "reason",
    "stage_of",
    "unusable",
    "warn_skipped",
]

# where a sample failed: fetching its bytes, taking its members apart, or decoding its image
STAGES = ("storage", "sample", "decode")


class ImageDecodeError(RuntimeError):
    """A sample is unusable: its bytes could not be fetched, its members make no sample, or its
    image could not be decoded. The message says which (see :func:`unusable`), and the cause is
    chained where there is one.

    Takes one message argument, so that torch can re-raise it from a worker process.
    """


class UnreadableImageWarning(UserWarning):
    """Some images were skipped because they could not be read (``on_error="skip"``)."""


def reason(exc: BaseException) -> str:
    """Why a file could not be read, in one line: an OS error keeps its type's name."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)


def one_line(exc: BaseException) -> str:
    """An exception in one line. One re-raised from a DataLoader worker carries the worker's
    whole traceback in its message: its last line is the original error."""
    text = str(exc).strip()
    if "Original Traceback" in text:
        last = [line.strip() for line in text.splitlines() if line.strip()][-1]
        name, colon, message = last.partition(": ")
        if colon and " " not in name:  # "package.module.SomeError: ..." -> "SomeError: ..."
            return f"{name.rpartition('.')[2]}: {message}"
        return last
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def cannot_read(path: str, backend: str, why: str) -> ImageDecodeError:
    """The error for one file that could not be decoded, naming the file, the backend and why."""
    return ImageDecodeError(f"cannot read {path!r} with the {backend} backend: {why}")


def stage_of(exc: BaseException, *, reading: bool) -> str:
    """Where a sample failed (one of :data:`STAGES`): ``reading`` its bytes, an ``OSError`` is
    its storage's (a missing object, an unreachable server) and anything else its members'
    (a missing label member, a shard cut inside it, a stale index); after that, decoding."""
    if not reading:
        return "decode"
    return "storage" if isinstance(exc, OSError) else "sample"


def unusable(path: str, why: str, *, stage: str, backend: str) -> ImageDecodeError:
    """The error for one unusable sample, worded by where it failed: a storage error names the
    sample and its storage's reason (which names the URL or shard), a decode error the file and
    the backend; neither blames the other."""
    if stage == "storage":
        return ImageDecodeError(f"cannot read {path!r} from its storage: {why}")
    if stage == "sample":
        return ImageDecodeError(f"cannot read {path!r}: {why}")
    return cannot_read(path, backend, why)


def warn_skipped(count: int, *, stacklevel: int = 2) -> None:
    """The once-per-epoch warning of ``on_error="skip"``, when ``count`` files were skipped."""
    if count:
        warnings.warn(
            f"skipped {count} unreadable image(s) this epoch; "
            "see the dataset's bad_files for the paths and reasons",
            UnreadableImageWarning,
            stacklevel=stacklevel + 1,
        )
