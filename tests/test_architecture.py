"""The house without circles: fastload's modules import only downwards, and never each other's
private names. Read from the source with ``ast``, function-level imports included (a lazy import
is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fastload"

# Lowest first. A module may import its own layer or a lower one, never a higher one; the
# package root (``fastload``) is the top, so nothing inside the package imports it.
LAYERS: list[tuple[str, ...]] = [
    (  # foundations: no fastload imports at all, or only each other
        "fastload.version",
        "fastload.checks",
        "fastload.wrappers",
        "fastload.options",
        "fastload.errors",
        "fastload.system",
        "fastload.devices",
        "fastload.tensors",
        "fastload.iteration",
        "fastload.image",
        "fastload._optional",
        "fastload._progress",
        "fastload.synthetic",
        "fastload.resampling",
        "fastload.transforms",
        "fastload.drawing",
        "fastload.buffers",
        "fastload.sampling",
        "fastload.gpu.functional",
        "fastload.gpu.policy_ops",
        "fastload.gpu.separable",
        "fastload.gpu.deferred",
        "fastload.handover",
        "fastload.compact",
        "fastload.testing.servers",
        "fastload.testing",
    ),
    (  # the shard format: tar members, samples and their index, manifests, members, tables
        "fastload.shards",
        "fastload.shards.format.*",
    ),
    ("fastload.shards.storage.*",),  # where shards' bytes come from: files, remote, the cache
    (  # what a user names as shards, resolved; an epoch's order
        "fastload.shards.sources",
        "fastload.shards.sampler",
    ),
    ("fastload.shards.indexing",),  # each shard's index, after resolving
    (  # per-sample decoding, batch ops, the prefetcher
        "fastload.gpu.transforms",
        "fastload.gpu.policies",
        "fastload.gpu.mixing",
        "fastload.gpu.policies_v2",
        "fastload.gpu.stage",
        "fastload.gpu",
        "fastload.backends.base",
        "fastload.backends.registry",
        "fastload.prefetch",
        "fastload.skipping",
    ),
    (  # the backends, both kinds
        "fastload.backends.pillow",
        "fastload.backends.opencv",
        "fastload.backends.turbojpeg",
        "fastload.backends.region",
        "fastload.backends.executor.*",
        "fastload.backends.dali.*",
        "fastload.backends.nvimgcodec.*",
        "fastload.backends",
    ),
    (
        "fastload.datasets",
        "fastload.shards.dataset",
        "fastload.shards.storage.upload",
        "fastload.shards.pack",
        "fastload.accelerate.*",
        "fastload.autotune.*",
    ),
    ("fastload.loader.*",),
    ("fastload.bench.*", "fastload.diagnosis.*", "fastload.train.*", "fastload.integrations.*"),
    ("fastload.cli", "fastload.commands.*", "fastload.__main__", "fastload"),
]


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
    for node in ast.walk(ast.parse(path.read_text())):
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
