"""Decoding backends: one module (or package) each, one registry of both kinds.

Each backend imports its library only when an instance is made, so importing this package needs
none of them. ``"auto"`` takes the fastest usable here (see :func:`auto_order`).
"""

from typing import Any

from fastload.backends import (  # noqa: F401  (they register)
    dali,
    nvimgcodec,
    opencv,
    pillow,
    region,
    turbojpeg,
)
from fastload.backends.base import KINDS, Backend, ImageDecodeError
from fastload.backends.headers import DEFAULT_MAX_PIXELS, check_header, decode_with_pillow
from fastload.backends.registry import (
    auto_order,
    check,
    choices,
    create,
    get,
    kind,
    names,
    register,
    resolve,
    unregister,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "KINDS",
    "Backend",
    "ImageDecodeError",
    "auto_order",
    "check",
    "check_header",
    "choices",
    "create",
    "decode_with_pillow",
    "get",
    "kind",
    "names",
    "register",
    "resolve",
    "unregister",
]


def __getattr__(attribute: str) -> Any:
    if attribute == "AUTO_ORDER":  # deprecated; derived from the registry on each access
        from fastload.backends import registry

        return registry.AUTO_ORDER  # which warns
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
