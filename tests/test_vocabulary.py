"""One vocabulary: a named value one entry point accepts, the others accept too, and an error
about a choice lists exactly the values accepted, read from the one source of truth (the
registry, ``fastload.options``, ``fastload.train.precision``).

The entry points are the datasets (``ImageFolder``, ``ImageList``, ``ImageShards``),
``fastload.DataLoader`` and the commands (parsed by the real parser; the refusals in a real
subprocess).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shardsets import class_folder

import fastload
from fastload import backends, options
from fastload import transforms as T
from fastload.cli import parser
from fastload.train.precision import PRECISIONS, Precision

# A value only some entry points take, with the reason (documented where it is taken).
DOCUMENTED = {
    ("backend", None): "only the loader: torch's default, the argument not given",
    ("backend", "all"): "only fastload bench: it measures every backend in one run",
}
VAL = T.Compose([T.Resize(40), T.CenterCrop(32)])


@pytest.fixture(autouse=True)
def short_autotune(monkeypatch: pytest.MonkeyPatch) -> None:
    """``num_workers="auto"`` runs the real search, on a short budget: what these tests look at
    is which values are taken, not what the search finds."""
    from fastload.loader import core

    monkeypatch.setattr(core, "autotune", functools.partial(core.autotune, budget=2.0))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vocabulary")
    folder = class_folder(root / "photos", classes=2, per_class=4)
    fastload.pack(folder, root / "packed", progress=False, workers=1)
    return folder, root / "packed"


def _command(name: str, flag: str) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        return parser(name).parse_args([name, flag, str(value)])

    return parse


def entry_points(data: tuple[Path, Path]) -> dict[str, dict[str, Callable[[Any], Any]]]:
    """option -> entry point -> a call that accepts the value or raises."""
    folder, packed = data
    image_list = fastload.ImageFolder(folder).samples
    paths, labels = [p for p, _ in image_list], [y for _, y in image_list]
    dataset = fastload.ImageFolder(folder, VAL)

    def loader(**given: Any) -> Any:
        return fastload.DataLoader(dataset, batch_size=4, **given).plan

    return {
        "backend": {
            "ImageFolder": lambda v: fastload.ImageFolder(folder, VAL, backend=v),
            "ImageList": lambda v: fastload.ImageList(paths, labels, VAL, backend=v),
            "ImageShards": lambda v: fastload.ImageShards(packed, VAL, backend=v),
            "loader": lambda v: loader(backend=v),
            "bench": _command("bench", "--backend"),
            "scan": _scan_backend,  # its folder is not optional
            "autotune": _command("autotune", "--backend"),
            "doctor": _command("doctor", "--backend"),
        },
        "on_error": {
            "ImageFolder": lambda v: fastload.ImageFolder(folder, on_error=v),
            "ImageList": lambda v: fastload.ImageList(paths, labels, on_error=v),
            "ImageShards": lambda v: fastload.ImageShards(packed, on_error=v),
        },
        "num_workers": {
            "loader": lambda v: loader(num_workers=v),
            "bench": _command("bench", "--num-workers"),
            "doctor": _command("doctor", "--num-workers"),
        },
        "seeding": {"loader": lambda v: loader(seeding=v)},
        "worker_type": {"loader": lambda v: loader(worker_type=v, num_workers=2)},
        "accelerate": {"loader": lambda v: loader(accelerate=v)},
        "precision": {"Trainer": lambda v: Precision.resolve(v, "cpu")},
    }


def _scan_backend(value: Any) -> Any:
    return parser("scan").parse_args(["scan", "DIR", "--backend", str(value)])


# The values each option accepts, from the source of truth.
TRUTH: dict[str, list[Any]] = {
    "backend": backends.choices(),
    "on_error": list(options.ON_ERROR),
    "seeding": list(options.SEEDING),
    "worker_type": list(options.WORKER_TYPE),
    "accelerate": list(options.ACCELERATE),
    "precision": [p for p in PRECISIONS if p != "fp16"],  # fp16 is the GPU's (refused on cpu)
    "num_workers": ["auto", 0, 2],
}


def _accepts(call: Callable[[Any], Any], value: Any) -> bool:
    try:
        call(value)
    except (ValueError, TypeError, SystemExit):
        return False
    return True


@pytest.mark.parametrize("option", sorted(TRUTH))
def test_every_entry_point_accepts_every_value_of_the_truth(
    data: tuple[Path, Path], option: str, require_backend, capsys: pytest.CaptureFixture
) -> None:
    for name in backends.names():
        require_backend(name)
    for where, call in entry_points(data)[option].items():
        refused = [v for v in TRUTH[option] if not _accepts(call, v)]
        assert refused == [], f"{option}: {where} refuses {refused}"
    capsys.readouterr()


@pytest.mark.parametrize("option", ["backend", "num_workers"])
def test_a_value_one_entry_point_takes_the_others_take_unless_documented(
    data: tuple[Path, Path], option: str, capsys: pytest.CaptureFixture
) -> None:
    points = entry_points(data)[option]
    extras = {"backend": [None, "all", "bogus"], "num_workers": [-1, "many"]}[option]
    candidates = [*TRUTH[option], *extras]
    accepted = {
        where: [v for v in candidates if _accepts(call, v)] for where, call in points.items()
    }
    everywhere = [v for v in candidates if any(v in values for values in accepted.values())]
    for where, values in accepted.items():
        missing = [v for v in everywhere if v not in values and (option, v) not in DOCUMENTED]
        assert missing == [], f"{option}: {where} refuses {missing}, which others accept"
    capsys.readouterr()


def _listed(message: str) -> list[str]:
    """The values an error lists: after 'valid: ' (fastload) or in 'choose from' (argparse)."""
    found = re.search(r"valid: (.*)$", message) or re.search(r"choose from (.*?)\)", message)
    assert found is not None, message
    return [v.strip() for v in found.group(1).split(",")]


@pytest.mark.parametrize(
    ("option", "where", "bad"),
    [
        ("backend", "ImageFolder", "webgpu"),
        ("backend", "ImageShards", "webgpu"),
        ("backend", "loader", "webgpu"),
        ("on_error", "ImageShards", "ignore"),
        ("on_error", "ImageList", "ignore"),
        ("seeding", "loader", "epoch"),
        ("worker_type", "loader", "fiber"),
        ("accelerate", "loader", "yes"),
        ("precision", "Trainer", "fp8"),
    ],
)
def test_a_refusal_lists_every_accepted_value_and_nothing_else(
    data: tuple[Path, Path], option: str, where: str, bad: str
) -> None:
    with pytest.raises(ValueError) as caught:
        entry_points(data)[option][where](bad)
    listed = _listed(str(caught.value))
    accepted = [*TRUTH[option], *(["fp16"] if option == "precision" else [])]
    if where == "loader" and (option, None) in DOCUMENTED:
        accepted = [None, *accepted]
    assert sorted(listed) == sorted(repr(v) for v in accepted), str(caught.value)
    assert repr(bad) not in listed


@pytest.mark.parametrize("command", ["bench", "scan", "autotune", "doctor"])
def test_a_commands_refusal_lists_the_registry(command: str, tmp_path: Path) -> None:
    args = [command, str(tmp_path), "--backend", "webgpu"]
    done = subprocess.run(
        [sys.executable, "-m", "fastload", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    listed = [v.strip("'") for v in _listed(done.stderr.strip())]
    expected = [*backends.choices(), *(["all"] if command == "bench" else [])]
    assert sorted(listed) == sorted(expected) and "webgpu" not in listed


def test_auto_on_the_loader_is_what_it_chooses_unasked(data: tuple[Path, Path]) -> None:
    folder, packed = data
    for dataset in (fastload.ImageFolder(folder, VAL), fastload.ImageShards(packed, VAL)):
        unasked = fastload.DataLoader(dataset, batch_size=4)
        auto = fastload.DataLoader(dataset, batch_size=4, backend="auto")
        assert auto.plan.backend == unasked.plan.backend == dataset.backend
        assert f"backend={dataset.backend}" in fastload.explain(auto)
    assert backends.resolve("auto") == fastload.ImageFolder(folder).backend
