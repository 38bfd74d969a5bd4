"""Decoding backends: one module each, a plain registry, ``"auto"`` for the fastest here.

Each backend module imports its library only when an instance is made, so importing this
package needs none of them.
"""

from fastload.backends import dali, opencv, pillow, turbojpeg  # noqa: F401  (they register)
from fastload.backends.base import (
    AUTO_ORDER,
    DEFAULT_MAX_PIXELS,
    Backend,
    ImageDecodeError,
    create,
    decode_with_pillow,
    names,
    register,
    resolve,
)

__all__ = [
    "AUTO_ORDER",
    "DEFAULT_MAX_PIXELS",
    "Backend",
    "ImageDecodeError",
    "create",
    "decode_with_pillow",
    "names",
    "register",
    "resolve",
]
