"""A Hugging Face ``datasets.Dataset`` whose ``with_transform`` / ``set_transform`` has the shape
transformers' image-classification example gives it, read fastload's way.

The shape, proved from the function's source (never from its name)::

    def transforms(batch):
        batch["pixel_values"] = [pipeline(image.convert("RGB")) for image in batch["image"]]
        return batch

(a docstring allowed; ``.convert("RGB")`` or the image alone; the keys as strings, as names
the function reads from its closure or its module, or as a field of such a name's object, as
the example's ``data_args.image_column_name``). ``pipeline`` is then the transform of a
:class:`fastload.datasets.tables.TableRows` over the same rows; anything else is
:class:`NotAccelerated`, saying why.

The example's collate function is proved too (:func:`stacked_column`)::

    def collate_fn(examples):
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example["label"] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

It stacks the transformed images and reads them nowhere else, so the pipeline's conversion
(``ToDtype``, ``Normalize``) may run on the stacked batch instead of on each image: the same
values, converted once a batch, and uint8 crossing from the workers.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from fastload.accelerate.walk import NotAccelerated

__all__ = ["RowsTransform", "StackedColumn", "rows_transform", "stacked_column"]


@dataclass(frozen=True)
class RowsTransform:
    """What a ``with_transform`` function of the example's shape does to each row.

    Attributes:
        image: The column its images are read from.
        key: The column it writes each transformed image to.
        pipeline: The transform it runs on each image.
    """

    image: str
    key: str
    pipeline: Any


def rows_transform(dataset: Any) -> RowsTransform:
    """The per-row work of ``dataset``'s ``with_transform`` function.

    Raises:
        NotAccelerated: The dataset has no such transform, or its function is not of the
            shape (what is in the way, named).
    """
    form = dataset.format
    function = form.get("format_kwargs", {}).get("transform") if form.get("type") else None
    name = type(dataset).__name__
    if function is None:
        raise NotAccelerated(name, "a Hugging Face dataset with no with_transform to translate")
    where = getattr(function, "__qualname__", repr(function))
    if not isinstance(function, types.FunctionType):
        raise NotAccelerated(where, "its with_transform is not a Python function")
    shape = _shape(function)
    if shape is None:
        raise NotAccelerated(
            where,
            "not of the shape batch[key] = [transform(image.convert('RGB')) for image in "
            "batch[column]]; return batch",
        )
    key, column, pipeline = (_value(function, part) for part in shape)
    if not isinstance(key, str) or not isinstance(column, str) or not callable(pipeline):
        raise NotAccelerated(where, "its keys are not strings, or its transform not a callable")
    if column not in dataset.column_names:
        raise NotAccelerated(where, f"it reads {column!r}, which the dataset does not have")
    return RowsTransform(column, key, pipeline)


@dataclass(frozen=True)
class StackedColumn:
    """A collate function of transformers' example's shape (see the module's notes).

    Attributes:
        key: The samples' key whose images it stacks.
        into: The key of its batch that holds them.
    """

    key: str
    into: str


def stacked_column(collate_fn: Any) -> StackedColumn | None:
    """Where ``collate_fn`` stacks the samples' images, when it is provably of transformers'
    example's shape: a Python function whose last statement returns a dict literal, one of
    whose values is ``torch.stack([e[key] for e in examples])`` (or a name assigned it once
    before and read nowhere else), ``torch`` the torch module as it is now; nothing else in it
    names ``key`` (a string, a name or a name's field, as the dataset's transform). ``None``:
    not of the shape, so the samples it gets must be what the pipeline makes, whole."""
    if not isinstance(collate_fn, types.FunctionType):
        return None
    node = _parsed(collate_fn)
    if node is None or len(node.args.args) != 1 or node.args.vararg or node.args.kwarg:
        return None
    body = _without_docstring(node.body)
    if not body or not isinstance(body[-1], ast.Return):
        return None
    out = body[-1].value
    if not isinstance(out, ast.Dict) or None in out.keys:
        return None
    assigned = {
        stmt.targets[0].id: stmt.value
        for stmt in body[:-1]
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    }
    samples = node.args.args[0].arg
    found: list[tuple[str, ast.expr, ast.expr, str]] = []  # into, value, the stack, its key
    for entry, value in zip(out.keys, out.values, strict=True):
        stack = assigned.get(value.id) if isinstance(value, ast.Name) else value
        key = _stacked(collate_fn, stack, samples) if stack is not None else None
        if key is not None and stack is not None:
            name = entry.value if isinstance(entry, ast.Constant) else None
            if not isinstance(name, str):
                return None
            found.append((name, value, stack, key))
    if len(found) != 1:
        return None
    into, value, stack, key = found[0]
    if not _only_there(collate_fn, node, out, stack, value, key):
        return None
    if not _samples_read_by_key(node, samples):
        return None
    return StackedColumn(key, into)


def _samples_read_by_key(node: ast.FunctionDef, samples: str) -> bool:
    """Whether the function reads its samples only as comprehensions over them whose loop
    name is only subscripted by a key (``[e["label"] for e in examples]``): a sample handed
    whole to anything else could be read there, where no key shows."""
    parents = {
        id(child): parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)
    }
    looped: set[int] = set()
    for comp in ast.walk(node):
        if not isinstance(comp, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            continue
        for loop in comp.generators:
            if not (isinstance(loop.iter, ast.Name) and loop.iter.id == samples):
                continue
            if not isinstance(loop.target, ast.Name):
                return False
            looped.add(id(loop.iter))
            for n in ast.walk(comp):
                if isinstance(n, ast.Name) and n.id == loop.target.id and n is not loop.target:
                    parent = parents.get(id(n))
                    if not (isinstance(parent, ast.Subscript) and parent.value is n):
                        return False
                    if not _is_key(parent.slice):
                        return False
    return all(
        id(n) in looped
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and n.id == samples and isinstance(n.ctx, ast.Load)
    )


def _stacked(function: types.FunctionType, node: ast.expr, samples: str) -> str | None:
    """The key of ``torch.stack([e[key] for e in samples])``, when ``node`` is that."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
        return None
    call = node.func
    if not (isinstance(call, ast.Attribute) and call.attr == "stack"):
        return None
    import torch

    if not isinstance(call.value, ast.Name) or _value(function, call.value) is not torch:
        return None
    listed = node.args[0]
    if not isinstance(listed, ast.ListComp) or len(listed.generators) != 1:
        return None
    loop = listed.generators[0]
    if loop.ifs or loop.is_async or not isinstance(loop.target, ast.Name):
        return None
    if not (isinstance(loop.iter, ast.Name) and loop.iter.id == samples):
        return None
    if not _item_of(listed.elt, loop.target.id):
        return None
    assert isinstance(listed.elt, ast.Subscript)
    key = _value(function, listed.elt.slice)
    return key if isinstance(key, str) else None


def _only_there(
    function: types.FunctionType,
    node: ast.FunctionDef,
    out: ast.Dict,
    stack: ast.expr,
    value: ast.expr,
    key: str,
) -> bool:
    """Whether the stacked images are read only by the stack, and the stack only by the dict:
    no other string, name or field in the function is ``key``, and a name given the stack is
    read once."""
    inside = {id(n) for n in ast.walk(stack)}
    keys = {id(k) for k in out.keys if k is not None}
    for n in ast.walk(node):
        if id(n) in inside or id(n) in keys:
            continue
        if isinstance(n, (ast.Constant, ast.Attribute)) and _value(function, n) == key:
            return False
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            if isinstance(value, ast.Name) and n.id == value.id and n is not value:
                return False
            if n.id not in function.__code__.co_varnames and _value(function, n) == key:
                return False
    if isinstance(value, ast.Name):  # assigned once, before the return
        stores = [
            n
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and n.id == value.id and not isinstance(n.ctx, ast.Load)
        ]
        if len(stores) != 1:
            return False
    return True


def _parsed(function: types.FunctionType) -> ast.FunctionDef | None:
    """The function's definition, parsed from its source; ``None`` when there is none to read
    or it is decorated."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.decorator_list:
        return None
    return node


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return list(body)


def _shape(function: types.FunctionType) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    """The key, the column and the transform of the example's shape, as expressions of the
    function's source; ``None`` when the function is not exactly that shape."""
    node = _parsed(function)
    if node is None or len(node.args.args) != 1:
        return None
    batch, body = node.args.args[0].arg, _without_docstring(node.body)
    if len(body) != 2:
        return None
    assign, ret = body
    if not isinstance(assign, ast.Assign) or not isinstance(ret, ast.Return):
        return None
    if not (isinstance(ret.value, ast.Name) and ret.value.id == batch):
        return None
    if len(assign.targets) != 1 or not _item_of(assign.targets[0], batch):
        return None
    listed = assign.value
    if not isinstance(listed, ast.ListComp) or len(listed.generators) != 1:
        return None
    loop = listed.generators[0]
    if loop.ifs or loop.is_async or not isinstance(loop.target, ast.Name):
        return None
    if not _item_of(loop.iter, batch):
        return None
    call = listed.elt
    if not isinstance(call, ast.Call) or len(call.args) != 1 or call.keywords:
        return None
    if not _image_of(call.args[0], loop.target.id):
        return None
    target, source = assign.targets[0], loop.iter
    assert isinstance(target, ast.Subscript) and isinstance(source, ast.Subscript)
    return target.slice, source.slice, call.func


def _item_of(node: ast.expr, batch: str) -> bool:
    """Whether ``node`` is ``batch[<a string, a name or a name's field>]``."""
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == batch
        and _is_key(node.slice)
    )


def _is_key(node: ast.expr) -> bool:
    """Whether ``node`` is a constant, a name, or a field of a name (``args.column``)."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name)
    return isinstance(node, (ast.Constant, ast.Name))


def _image_of(node: ast.expr, image: str) -> bool:
    """Whether ``node`` is the loop's image, or its ``.convert("RGB")`` (fastload decodes RGB)."""
    if isinstance(node, ast.Name):
        return node.id == image
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "convert"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == image
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "RGB"
    )


def _value(function: types.FunctionType, node: ast.expr) -> Any:
    """What a string, a name or a name's field of the function's source is when it runs: a
    closure cell's value, or its module's global (a builtin or an unbound name: ``None``); a
    field only from the object's own ``__dict__`` (a dataclass's field; never a property, whose
    code would run)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = _value(function, node.value)
        return getattr(owner, "__dict__", {}).get(node.attr) if owner is not None else None
    if not isinstance(node, ast.Name):
        return None
    free = function.__code__.co_freevars
    if node.id in free and function.__closure__ is not None:
        return function.__closure__[free.index(node.id)].cell_contents
    return function.__globals__.get(node.id)
