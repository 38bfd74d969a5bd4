"""Seeing through code that only hands its argument on, proved from the code itself.

torchvision's reference presets (``ClassificationPresetTrain``) and many training scripts wrap
their ``Compose`` in an object whose ``__call__`` hands the image to one attribute. Such an
object means exactly its inner transform, and :func:`delegate_of` proves it from the code of
``__call__`` itself (never from a class name): its only instructions load ``self``, one of its
attributes, the argument, call, and return.

The reference train script's collate function with mixup / cutmix is
``return mixup_cutmix(*default_collate(batch))``: torch's default collate, then one callable on
the batch. :func:`collated_then` proves that shape the same way and names the callable.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any

__all__ = ["collated_then", "delegate_of"]

_LOADS = {
    "LOAD_METHOD": "LOAD_ATTR",
    "LOAD_FAST_BORROW": "LOAD_FAST",
    "LOAD_FAST_CHECK": "LOAD_FAST",
}

_PAIRED_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
# instructions that do not change what a function computes (prologue, inline caches, the
# calling convention's bookkeeping)
_BOOKKEEPING = frozenset(
    {"RESUME", "CACHE", "NOP", "PRECALL", "PUSH_NULL", "COPY_FREE_VARS", "EXTENDED_ARG"}
)


def delegate_of(obj: Any) -> Any:
    """The callable ``obj`` hands its arguments to, when its ``__call__`` is provably
    ``return self.<attribute>(<arguments>)`` (the same arguments, in order: a detection
    preset hands on ``(image, target)``); else ``None``.

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
    count = code.co_argcount - 1  # the arguments besides self
    plain = count >= 1 and not code.co_kwonlyargcount
    if not plain or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    self_name, *arg_names = code.co_varnames[: count + 1]
    steps = [i for i in dis.get_instructions(call) if i.opname not in _BOOKKEEPING]
    # LOAD_METHOD (3.11) and LOAD_ATTR (3.12 on) load the attribute; LOAD_FAST_BORROW (3.14)
    # is LOAD_FAST without a reference count
    shape = []
    for step in steps:
        if step.opname in _PAIRED_LOADS:  # 3.13 on: two locals loaded by one instruction
            shape += [("LOAD_FAST", name) for name in step.argval]
        else:
            shape.append((_LOADS.get(step.opname, step.opname), step.argval))
    if len(shape) != count + 4 or shape[1][0] != "LOAD_ATTR":
        return None
    attribute = shape[1][1]
    if shape != [
        ("LOAD_FAST", self_name),
        ("LOAD_ATTR", attribute),
        *(("LOAD_FAST", name) for name in arg_names),
        ("CALL", count),
        ("RETURN_VALUE", None),
    ]:
        return None
    inner = getattr(obj, "__dict__", {}).get(attribute)
    return inner if callable(inner) else None


def collated_then(collate_fn: Any) -> Any:
    """The callable ``collate_fn`` hands torch's collated batch to, when ``collate_fn`` is
    provably ``return f(*default_collate(batch))`` (a function, a lambda, or an object whose
    ``__call__`` calls one of its own attributes that way); else ``None``.

    ``default_collate`` must be torch's own, by identity; ``f`` is read from the function's
    globals or closure, or the object's own attributes, as it is now.
    """
    from torch.utils.data import default_collate

    code_of = _function_and_owner(collate_fn)
    if code_of is None:
        return None
    function, owner = code_of
    steps = _shape(function)
    names = function.__code__.co_varnames
    head = [("LOAD_FAST", names[0])] if owner is not None else []  # self, then self.<f>
    if len(steps) != len(head) + 6 or steps[: len(head)] != head:
        return None
    called, collate, *tail = steps[len(head) :]
    arg = names[len(head)]
    if tail != [
        ("LOAD_FAST", arg),
        ("CALL", 1),
        ("CALL_FUNCTION_EX", None),
        ("RETURN_VALUE", None),
    ]:
        return None
    if _resolve(function, *collate) is not default_collate:
        return None
    if owner is not None:
        if called[0] != "LOAD_ATTR" or "__getattr__" in vars(type(owner)):
            return None
        inner = getattr(owner, "__dict__", {}).get(called[1])
    else:
        inner = _resolve(function, *called)
    return inner if callable(inner) else None


def _function_and_owner(obj: Any) -> tuple[types.FunctionType, Any] | None:
    """A plain one-argument function (owner ``None``), or an object's ``__call__`` taking one
    argument besides ``self`` (owner: the object)."""
    if isinstance(obj, types.FunctionType):
        function, owner, arguments = obj, None, 1
    else:
        call = inspect.getattr_static(type(obj), "__call__", None)
        if not isinstance(call, types.FunctionType) or "__getattribute__" in vars(type(obj)):
            return None
        function, owner, arguments = call, obj, 2
    code = function.__code__
    if code.co_argcount != arguments or code.co_kwonlyargcount or function.__defaults__:
        return None
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    return function, owner


def _shape(function: types.FunctionType) -> list[tuple[str, Any]]:
    """The function's instructions that compute something, as (name, argument); the
    argument of an instruction whose value does not matter here is ``None``."""
    shape = []
    for step in dis.get_instructions(function):
        if step.opname in _BOOKKEEPING:
            continue
        name = _LOADS.get(step.opname, step.opname)
        keep = name in ("LOAD_FAST", "LOAD_ATTR", "LOAD_GLOBAL", "LOAD_DEREF", "CALL")
        shape.append((name, step.argval if keep else None))
    return shape


def _resolve(function: types.FunctionType, opname: str, name: Any) -> Any:
    """What a ``LOAD_GLOBAL`` or ``LOAD_DEREF`` of ``name`` in ``function`` loads now."""
    import builtins

    if opname == "LOAD_GLOBAL":
        return function.__globals__.get(name, getattr(builtins, name, None))
    if opname == "LOAD_DEREF" and name in function.__code__.co_freevars:
        cell = (function.__closure__ or ())[function.__code__.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell
            return None
    return None
