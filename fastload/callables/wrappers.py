"""Seeing through code that only hands its argument on, proved from the code itself.

torchvision's reference presets (``ClassificationPresetTrain``) and many training scripts wrap
their ``Compose`` in an object whose ``__call__`` hands the image to one attribute. Such an
object means exactly its inner transform, and :func:`delegate_of` proves it from the code of
``__call__`` itself (never from a class name): its only instructions load ``self``, one of its
attributes, the argument, call, and return.

The reference train script's collate function with mixup / cutmix is
``return mixup_cutmix(*default_collate(batch))``: torch's default collate, then one callable on
the batch. :func:`collated_then` proves that shape the same way and names the callable.

The segmentation references chain ``(image, target)`` ops with a ``Compose`` of their own
(``for t in self.transforms: image, target = t(image, target)``); :func:`sequence_of` proves
that shape from the method's source, checked against its compiled code.
"""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from typing import Any

__all__ = ["collated_then", "delegate_of", "sequence_of", "zips_samples"]

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


def _plain_call(obj: Any) -> types.FunctionType | None:
    """``obj``'s class's own ``__call__`` when it is a plain Python function without default
    arguments and the class does not reroute attribute access; else ``None``."""
    kind = type(obj)
    call = inspect.getattr_static(kind, "__call__", None)
    if not isinstance(call, types.FunctionType) or call.__defaults__ or call.__kwdefaults__:
        return None
    if "__getattr__" in vars(kind) or "__getattribute__" in vars(kind):
        return None
    return call


def delegate_of(obj: Any) -> Any:
    """The callable ``obj`` hands its arguments to, when its ``__call__`` is provably
    ``return self.<attribute>(<arguments>)`` (the same arguments, in order: a detection
    preset hands on ``(image, target)``); else ``None``.

    The attribute must be one of the object's own (not a property, which could compute), and
    the class must not reroute attribute access.
    """
    call = _plain_call(obj)
    if call is None:
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


def sequence_of(obj: Any) -> list[Any] | None:
    """The callables ``obj`` calls one after another, when its ``__call__`` is provably
    ``for t in self.<attribute>: <arguments> = t(<arguments>)`` then ``return <arguments>``
    (each op's result is the next one's arguments: a ``Compose`` of ``(image, target)`` ops);
    else ``None``.

    The attribute must be one of the object's own, a list or tuple of callables, and the
    class must not reroute attribute access. The source read must be the code that runs: its
    names are checked against the compiled method's.
    """
    call = _plain_call(obj)
    if call is None:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(call)))
    except (OSError, TypeError, SyntaxError):
        return None
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return None
    shape = _loop_shape(function)
    if shape is None:
        return None
    attribute, names = shape
    code = call.__code__
    if code.co_names != (attribute,) or code.co_varnames[: len(names)] != names:
        return None
    inner = getattr(obj, "__dict__", {}).get(attribute)
    if not isinstance(inner, (list, tuple)) or not all(callable(t) for t in inner):
        return None
    return list(inner)


def _loop_shape(function: ast.FunctionDef) -> tuple[str, tuple[str, ...]] | None:
    """(the attribute looped over, the method's local names) when ``function`` is exactly the
    loop :func:`sequence_of` looks for; else ``None``."""
    arguments = function.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
        return None
    self_name, *params = [a.arg for a in arguments.args]
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    if not params or len(body) != 2 or not isinstance(body[0], ast.For):
        return None
    loop = body[0]
    if not (isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Attribute)):
        return None
    attribute, step = loop.iter.attr, loop.target.id
    values = ", ".join(params)
    expected = (
        f"def f({self_name}, {values}):\n"
        f"    for {step} in {self_name}.{attribute}:\n"
        f"        {values} = {step}({values})\n"
        f"    return {values}\n"
    )
    canonical = ast.parse(expected).body[0]
    assert isinstance(canonical, ast.FunctionDef)
    if [ast.dump(b) for b in body] != [ast.dump(b) for b in canonical.body]:
        return None
    return attribute, (self_name, *params, step)


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


def zips_samples(collate_fn: Any) -> bool:
    """Whether ``collate_fn`` is provably ``return tuple(zip(*batch))`` (the detection
    references' collate: each field of the samples in a tuple, the samples untouched), with or
    without ``strict=``, a function or a lambda, ``tuple`` and ``zip`` the builtins as they
    are now."""
    import builtins

    if not isinstance(collate_fn, types.FunctionType):
        return False
    code_of = _function_and_owner(collate_fn)
    if code_of is None:
        return False
    function = code_of[0]
    head = [
        ("LOAD_GLOBAL", "tuple"),
        ("LOAD_GLOBAL", "zip"),
        ("LOAD_FAST", function.__code__.co_varnames[0]),
    ]
    tail = [("CALL_FUNCTION_EX", None), ("CALL", 1), ("RETURN_VALUE", None)]
    # zip's strict= only checks that the samples have as many fields, which the images' dtype
    # does not change (linters ask for it: ruff's B905)
    strict = [
        [("LOAD_CONST", "strict"), ("LOAD_CONST", flag), ("BUILD_MAP", None)]
        for flag in (True, False)
    ]
    if _shape(function) not in [head + keywords + tail for keywords in ([], *strict)]:
        return False
    resolved = (_resolve(function, "LOAD_GLOBAL", name) for name in ("tuple", "zip"))
    return list(resolved) == [builtins.tuple, builtins.zip]


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
        keep = name in ("LOAD_FAST", "LOAD_ATTR", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CONST", "CALL")
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
