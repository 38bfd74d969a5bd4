"""Checkpoints that resume exactly: weights, optimizer, scaler, schedule, counters, RNG states."""

from __future__ import annotations

import glob
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastload import compat

__all__ = ["check_same_model", "check_writable", "rng_state", "set_rng_state", "unwrap"]

FORMAT = 1


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module inside DistributedDataParallel and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif (inner := compat.compiled_inner(model)) is not None:  # torch.compile's wrapper
            model = inner
        else:
            return model


def rng_state() -> dict[str, Any]:
    """Every random stream a training run draws from: torch (CPU and CUDA), numpy, random."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def check_same_model(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: Any) -> None:
    """Refuse a checkpoint whose weights do not fit ``model``, saying how they differ.

    Raises:
        ValueError: Names missing or unexpected, or shapes that differ (the first few shown).
    """
    own = unwrap(model).state_dict()
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    shapes = [
        f"{k}: {tuple(weights[k].shape)} in the checkpoint, {tuple(v.shape)} in the model"
        for k, v in own.items()
        if k in weights and tuple(weights[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}")
        if shapes:
            parts.append("; ".join(shapes[:3]))
        raise ValueError(
            f"the checkpoint {str(path)!r} is of a different model: " + "; ".join(parts)
        )


def check_writable(path: str | os.PathLike[str]) -> None:
    """Make sure a checkpoint can be written at ``path`` (its folder made if need be), before
    any training.

    Raises:
        NotADirectoryError: The path runs through an existing file (named).
        IsADirectoryError: The path is a folder.
        PermissionError: The folder cannot be written; the message names ``path`` as given.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"checkpoint={str(path)!r} is a folder: give a file name in it")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(
                    f"checkpoint={str(path)!r}: {str(parent)!r} is a file, not a folder"
                )
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except PermissionError as exc:
        raise PermissionError(
            f"checkpoint={str(path)!r}: cannot write in {str(path.parent)!r} ({exc.strerror})"
        ) from None


def save(state: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``state`` atomically: a crash mid-write leaves the previous checkpoint intact.

    The file gets the permissions of any new file (the umask's), not the temporary file's 0600.
    """
    path = Path(path)
    check_writable(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        torch.save({"format": FORMAT, **state}, tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # what a writer killed mid-write left (only rank 0 writes a checkpoint: none is in use)
    for stale in path.parent.glob(glob.escape(f".{path.name}.") + "*"):
        stale.unlink(missing_ok=True)
    return path


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`.

    Raises:
        FileNotFoundError: No file at ``path``.
        ValueError: The file is not a fastload training checkpoint.
    """
    # RNG states hold numpy arrays, which the weights-only unpickler refuses: load only
    # checkpoints you trust, as with any pickle
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise ValueError(
            f"{str(path)!r} is not a fastload training checkpoint ({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT or "model" not in state:
        raise ValueError(f"{str(path)!r} is not a fastload training checkpoint (format {FORMAT})")
    return state
