"""The house without circles: fastload's modules import only downwards, and never each other's
private names. Read from the source with ``ast``, function-level imports included (a lazy import
is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fastload"

# Lowest first, one entry a folder (the package root's foundations are the first): a module may
# import its own layer or a lower one, never a higher one; the package root (``fastload``) is
# the top, so nothing inside the package imports it. ARCHITECTURE.md's layer table is this list.
LAYERS: list[tuple[str, ...]] = [
    (  # foundations, at the package root: no fastload imports, or only each other
        "fastload.version",
        "fastload.compat",
        "fastload.checks",
        "fastload.options",
        "fastload.errors",
        "fastload.system",
        "fastload.devices",
        "fastload._optional",
        "fastload._progress",
    ),
    (  # the building blocks: batch memory, pixels and image files, the random streams and
        # seeds, what fastload reads of the user's callables, made-up data, test servers
        "fastload.memory.*",
        "fastload.pixels.*",
        "fastload.sampling.*",
        "fastload.callables.*",
        "fastload.synthetic.*",
        "fastload.testing.*",
    ),
    ("fastload.transforms.*",),  # per-sample ops, planned before decoding
    ("fastload.gpu.*",),  # batch ops, the batch stage, the prefetcher
    ("fastload.backends.*",),  # decoders and batch executors, and their registry
    ("fastload.datasets.*",),  # the decode path every dataset shares; files as datasets
    # shards, one floor a step: the format, the storage, what a user names and an epoch's order,
    # each shard's index, then the dataset and the writer
    ("fastload.shards", "fastload.shards.format.*"),
    ("fastload.shards.storage.*",),
    ("fastload.shards.sources", "fastload.shards.sampler"),
    ("fastload.shards.indexing",),
    (
        "fastload.shards.dataset",
        "fastload.shards.raw_choice",
        "fastload.shards.pack_sources",
        "fastload.shards.pack_members",
        "fastload.shards.pack",
    ),
    ("fastload.detection.*",),  # boxes, masks and their datasets
    ("fastload.accelerate.*", "fastload.autotune.*"),  # the swap; num_workers measured
    ("fastload.loader.*",),
    (  # what uses the loader
        "fastload.bench.*",
        "fastload.diagnosis.*",
        "fastload.train.*",
        "fastload.integrations.*",
        "fastload.ray.*",
    ),
    ("fastload.cli", "fastload.commands.*", "fastload.__main__", "fastload"),
]


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed again after CPython 3.11's spurious "AST constructor
    recursion depth mismatch" (python/cpython#106905: the constructor's recursion counter is
    the interpreter's, and a parse in another thread at the same moment, such as a traceback
    that a background thread formats, upsets it; seen once in CI)."""
    try:
        return ast.parse(path.read_text())
    except SystemError as exc:
        if "recursion depth mismatch" not in str(exc):
            raise
        return ast.parse(path.read_text())


def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(name: str, path: Path, package: bool, known: dict) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every fastload import in one file."""
    here = name if package else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "fastload"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            if base.split(".")[0] != "fastload":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub, []) if sub in known else (base, [alias.name]))
    return found


def layer_of(name: str) -> int:
    for index, layer in enumerate(LAYERS):
        for pattern in layer:
            if pattern.endswith(".*"):  # a package and everything in it
                if name == pattern[:-2] or name.startswith(pattern[:-1]):
                    return index
            elif name == pattern:
                return index
    raise AssertionError(f"{name} is in no layer: add it to LAYERS in {__file__}")


KNOWN = modules()
GRAPH = {name: imports(name, path, package, KNOWN) for name, (path, package) in KNOWN.items()}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_every_module_imports_only_its_layer_or_lower(name: str) -> None:
    mine = layer_of(name)
    upward = [m for m, _ in GRAPH[name] if m != name and layer_of(m) > mine]
    assert upward == [], f"{name} (layer {mine}) imports higher layers: {upward}"


def test_no_import_cycles() -> None:
    edges = {n: {m for m, _ in GRAPH[n] if m != n} for n in GRAPH}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_no_module_takes_another_modules_private_names() -> None:
    taken = [
        f"{name} imports {source}.{n}"
        for name, found in GRAPH.items()
        for source, names in found
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert taken == []


def test_the_checks_see_a_planted_violation(tmp_path: Path) -> None:
    """The walker finds a lazy upward import and a private name (so the tests above can fail)."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f():\n    from fastload.loader import _TORCH_INIT\n    import fastload\n"
    )
    found = imports("fastload.transforms", planted, False, KNOWN)
    assert ("fastload.loader", ["_TORCH_INIT"]) in found and ("fastload", []) in found
    assert layer_of("fastload.loader") > layer_of("fastload.transforms")


def test_the_library_never_imports_its_testing_package() -> None:
    """``fastload.testing`` (servers for tests, as ``torch.testing``) is for tests and benchmarks:
    no module of the library imports it, so it is never part of ``import fastload``."""
    users = sorted(
        name
        for name, found in GRAPH.items()
        if not name.startswith("fastload.testing")
        for module, _ in found
        if module.startswith("fastload.testing")
    )
    assert users == []


# Per-sample ops (fastload.transforms) and batch ops (fastload.gpu) share torchvision's names on
# purpose: the same op with the same draws, on a sample or on a batch (ARCHITECTURE.md says so).
SAME_MEANING = {"Compose", "RandomHorizontalFlip", "RandomResizedCrop"}


def test_one_public_class_name_one_meaning() -> None:
    import importlib
    import inspect

    homes: dict[str, set[str]] = {}
    for name in KNOWN:
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if attribute.startswith("_") or not inspect.isclass(value):
                continue
            if value.__module__.startswith("fastload"):
                homes.setdefault(value.__name__, set()).add(f"{value.__module__}.{value.__name__}")
    twice = {n: sorted(h) for n, h in homes.items() if len(h) > 1 and n not in SAME_MEANING}
    assert twice == {}


def test_the_package_root_lists_its_api_not_its_helpers() -> None:
    import subprocess
    import sys

    code = "import fastload; print(' '.join(dir(fastload)))"
    listed = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    import fastload

    assert set(fastload.__all__) <= listed
    assert not listed & {"Any", "TYPE_CHECKING", "annotations", "importlib", "_WHERE"}
    assert all(not n.startswith("_") or n == "__version__" for n in listed)


def test_backends_resolves_only_its_own_names() -> None:
    from fastload import backends

    with pytest.raises(AttributeError, match="has no attribute '_REGISTRY'"):
        backends._REGISTRY  # noqa: B018
    with pytest.warns(DeprecationWarning, match="auto_order"):
        assert list(backends.AUTO_ORDER) == backends.auto_order()


# the one module that may use another package's private names (see its docstring)
COMPAT = "fastload.compat"
# private names of the standard library that are its documented API
DOCUMENTED_PRIVATE = {"os._exit", "sys._getframe"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[str]:
    """Private names of other packages a file takes: ``from x._y import z``, ``from x import
    _z``, ``import x._y``, and attribute access ``module._name`` on an imported module."""
    tree = parsed(path)
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(_private(part) for part in alias.name.split(".")):
                    found.append(f"import {alias.name}")
                top = alias.asname or alias.name.split(".")[0]
                aliases[top] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            if base.split(".")[0] == "fastload":
                for alias in node.names:
                    if f"{base}.{alias.name}" in KNOWN:  # a fastload module, by another name
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
                continue
            if any(_private(part) for part in base.split(".")):
                found.append(f"from {base} import ...")
            found += [f"from {base} import {a.name}" for a in node.names if _private(a.name)]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            name = f"{aliases[node.value.id]}.{node.attr}"
            if name not in DOCUMENTED_PRIVATE:
                found.append(name)
    return found


def test_only_compat_uses_other_packages_private_names() -> None:
    taken = {
        name: uses
        for name, (path, _) in sorted(KNOWN.items())
        if name != COMPAT and (uses := private_uses(path))
    }
    assert taken == {}, f"move these into {COMPAT} (with a test in tests/test_compat.py): {taken}"


def test_the_private_name_walker_sees_attribute_access(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import torch\nfrom torch.utils.data import _utils\nfrom fastload.gpu import "
        "functional as F\n\ndef f():\n    return torch._C, F._hidden, _utils\n"
    )
    assert private_uses(planted) == [
        "from torch.utils.data import _utils",
        "torch._C",
        "fastload.gpu.functional._hidden",
    ]


ROOT_MODULES = 12  # the entry points and the foundations; everything else has a folder
MODULE_LINES = 600  # a longer module holds several concerns: split it by concern


def test_the_package_root_holds_its_entry_points_and_foundations_only() -> None:
    """The root is not a bag of modules: a new one goes into the folder of its concern."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, f"{len(root)} modules at the package root: {root}"
    assert all(
        layer_of(f"fastload.{name[:-3]}") in (0, len(LAYERS) - 1)
        for name in root
        if name != "__init__.py"
    )


def test_no_module_runs_over_six_hundred_lines() -> None:
    long = {
        name: lines
        for name, (path, _) in sorted(KNOWN.items())
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_a_module_in_no_layer_is_refused() -> None:
    """A module of a new folder fails the layer test until LAYERS (and ARCHITECTURE.md) place it."""
    with pytest.raises(AssertionError, match="is in no layer"):
        layer_of("fastload.newfolder.module")


def test_no_function_runs_over_sixty_lines() -> None:
    """STYLE.md's limit, docstring not counted: a longer function is several concerns."""
    long = []
    for name, (path, _) in sorted(KNOWN.items()):
        for node in ast.walk(parsed(path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first = node.body[0]
            documented = isinstance(first, ast.Expr) and isinstance(
                getattr(first, "value", None), ast.Constant
            )
            start = first.end_lineno + 1 if documented else node.lineno
            if node.end_lineno - start + 1 > 60:
                long.append(f"{name}.{node.name}: {node.end_lineno - start + 1} lines")
    assert long == []


def _table_rows() -> list[str]:
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    return [line for line in text.splitlines() if line.startswith("| ") and line[2:3].isdigit()]


def test_the_layer_table_is_the_map_and_names_every_module() -> None:
    """ARCHITECTURE.md's layer table is the one map of the package: every module is named in
    it, by its path (`shards/sampler`) or by its name in the row of its package (`loader/`:
    `core`, `plan`, ...)."""
    rows = _table_rows()
    missing = []
    for name in sorted(KNOWN):
        parts = name.split(".")[1:]
        if not parts or parts[-1] == "__main__":
            continue
        path, leaf = "/".join(parts), parts[-1]
        package = "/".join(parts[:-1]) + "/"
        named = any(f"`{path}`" in row or f"`{path}/`" in row for row in rows)
        named = named or any(f"`{package}" in row and f"`{leaf}`" in row for row in rows)
        if not named:
            missing.append(path)
    assert missing == [], f"modules ARCHITECTURE.md's layer table does not name: {missing}"
