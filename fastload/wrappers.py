"""Seeing through objects that only delegate: ``return self.inner(x)`` and nothing else.

torchvision's reference presets (``ClassificationPresetTrain``) and many training scripts wrap
their ``Compose`` in an object whose ``__call__`` hands the image to one attribute. Such an
object means exactly its inner transform, and :func:`delegate_of` proves it from the code of
``__call__`` itself (never from a class name): its only instructions load ``self``, one of its
attributes, the argument, call, and return.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any

__all__ = ["delegate_of"]

_LOADS = {"LOAD_METHOD": "LOAD_ATTR", "LOAD_FAST_BORROW": "LOAD_FAST"}

# instructions that do not change what a function computes (prologue, inline caches, the
# calling convention's bookkeeping)
_BOOKKEEPING = frozenset(
    {"RESUME", "CACHE", "NOP", "PRECALL", "PUSH_NULL", "COPY_FREE_VARS", "EXTENDED_ARG"}
)


def delegate_of(obj: Any) -> Any:
    """The callable ``obj`` hands its argument to, when its ``__call__`` is provably
    ``return self.<attribute>(<argument>)``; else ``None``.

    The attribute must be one of the object's own (not a property, which could compute), and
    the class must not reroute attribute access.
    """
    kind = type(obj)
    call = inspect.getattr_static(kind, "__call__", None)
    if not isinstance(call, types.FunctionType) or call.__defaults__ or call.__kwdefaults__:
        return None
    if "__getattr__" in vars(kind) or "__getattribute__" in vars(kind):
        return None
    code = call.__code__
    plain = code.co_argcount == 2 and not code.co_kwonlyargcount
    if not plain or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    self_name, arg_name = code.co_varnames[:2]
    steps = [i for i in dis.get_instructions(call) if i.opname not in _BOOKKEEPING]
    # LOAD_METHOD (3.11) and LOAD_ATTR (3.12 on) load the attribute; LOAD_FAST_BORROW (3.14)
    # is LOAD_FAST without a reference count
    shape = [(_LOADS.get(i.opname, i.opname), i.argval) for i in steps]
    if len(shape) != 5 or shape[1][0] != "LOAD_ATTR":
        return None
    attribute = shape[1][1]
    if shape != [
        ("LOAD_FAST", self_name),
        ("LOAD_ATTR", attribute),
        ("LOAD_FAST", arg_name),
        ("CALL", 1),
        ("RETURN_VALUE", None),
    ]:
        return None
    inner = getattr(obj, "__dict__", {}).get(attribute)
    return inner if callable(inner) else None
