"""The ``device=`` option: what fastload accepts, checked once."""

from __future__ import annotations

import torch

__all__ = ["DeviceLike", "resolve_device"]

DeviceLike = str | int | torch.device


def resolve_device(device: DeviceLike | None) -> torch.device | None:
    """Check a ``device=`` option and turn it into a ``torch.device``.

    Args:
        device: ``None``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a CUDA index, or a
            ``torch.device`` of type cpu or cuda.

    Returns:
        The device, or ``None`` when ``device`` is ``None``.

    Raises:
        ValueError: The value is not a device fastload can deliver batches to, or names a CUDA
            index that does not exist.
        RuntimeError: A CUDA device was asked for but torch sees no usable CUDA device.
    """
    if device is None:
        return None
    valid = "None, 'cpu', 'cuda', 'cuda:N', an int N, or a torch.device of type cpu or cuda"
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise ValueError(f"device={device!r} is not a device; expected {valid}")
    try:
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"device={device!r} is not a device; expected {valid}") from exc
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device={device!r} is not supported; expected {valid}")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device={device!r} needs CUDA, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}). "
            "Use device='cpu' or device=None, or install a CUDA build of torch on a machine "
            "with an NVIDIA driver."
        )
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise ValueError(
            f"device={device!r} names CUDA device {index}, but this machine has {count} "
            f"(valid: {', '.join(f'cuda:{i}' for i in range(count))})"
        )
    return torch.device("cuda", index)
