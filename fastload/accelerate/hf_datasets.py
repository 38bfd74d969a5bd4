"""A Hugging Face ``datasets.Dataset`` whose ``with_transform`` / ``set_transform`` has the shape
transformers' image-classification example gives it, read fastload's way.

The shape, proved from the function's source (never from its name)::

    def transforms(batch):
        batch["pixel_values"] = [pipeline(image.convert("RGB")) for image in batch["image"]]
        return batch

(a docstring allowed; ``.convert("RGB")`` or the image alone; the keys as strings or as names
the function reads from its closure or its module). ``pipeline`` is then the transform of a
:class:`fastload.datasets.tables.TableRows` over the same rows, which :func:`accelerate_rows`
returns with the key and the image column; anything else is :class:`NotAccelerated`, saying why.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from fastload.accelerate.walk import NotAccelerated

__all__ = ["RowsTransform", "rows_transform"]


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


def _shape(function: types.FunctionType) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    """The key, the column and the transform of the example's shape, as expressions of the
    function's source; ``None`` when the function is not exactly that shape."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or len(node.args.args) != 1 or node.decorator_list:
        return None
    batch, body = node.args.args[0].arg, list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
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
    """Whether ``node`` is ``batch[<a string or a name>]``."""
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == batch
        and isinstance(node.slice, (ast.Constant, ast.Name))
    )


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
    """What a string or a name of the function's source is when it runs: a closure cell's
    value, or its module's global (a builtin or an unbound name: ``None``)."""
    if isinstance(node, ast.Constant):
        return node.value
    if not isinstance(node, ast.Name):
        return None
    free = function.__code__.co_freevars
    if node.id in free and function.__closure__ is not None:
        return function.__closure__[free.index(node.id)].cell_contents
    return function.__globals__.get(node.id)
