"""The ``fastload`` command, run as a real subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from strictness import backends_required

import fastload


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastload", *args], capture_output=True, text=True, timeout=120
    )


def test_version() -> None:
    proc = run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"fastload {fastload.__version__}"


def test_console_script_is_installed() -> None:
    beside = Path(sys.executable).with_name("fastload")  # the environment's own bin/
    exe = str(beside) if beside.exists() else shutil.which("fastload")
    if exe is None:
        pytest.fail("no 'fastload' console script beside python or on PATH: is it installed?")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("fastload ")


def test_a_folder_named_fastload_where_python_runs_does_not_shadow_the_package(
    tmp_path: Path,
) -> None:
    # a clone at ~/fastload, a script run from ~: the clone's root is a namespace package
    # candidate; the strict editable install (scripts/install.sh) puts the real package first
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "fastload").symlink_to(root, target_is_directory=True)
    proc = subprocess.run(
        [sys.executable, "-c", "import fastload; print(fastload.ImageFolder.__name__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ImageFolder", proc.stderr


_IMPORTS = """
import contextlib, io, json, sys
from fastload.cli import main

out = {}
for args in (["--version"], ["--help"], [], ["bogus"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(args)
        except SystemExit:
            pass
    out[" ".join(args) or "(none)"] = "torch" in sys.modules
import fastload
out["import fastload"] = "torch" in sys.modules
seen = []

class Spy(io.StringIO):
    def write(self, text):
        if text.strip():
            seen.append([text.split()[0], "torch" in sys.modules])
        return super().write(text)

with contextlib.redirect_stdout(Spy()):
    main(["info"])
out["info"] = seen[:3]
print(json.dumps(out))
"""


def test_version_help_and_the_first_lines_of_info_do_not_wait_for_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    info = found.pop("info")
    assert found == {
        "--version": False,
        "--help": False,
        "(none)": False,
        "bogus": False,
        "import fastload": False,
    }
    assert info == [["fastload", False], ["python", False], ["torch", True]]


def test_the_package_resolves_its_names_on_first_use() -> None:
    script = (
        "import sys, fastload; names = set(dir(fastload)); "
        "assert fastload.DataLoader.__module__ == 'fastload.loader.core'; "
        "assert fastload.transforms.__name__ == 'fastload.transforms'; "
        "assert {'DataLoader', 'ImageFolder', 'gpu', 'doctor'} <= names; "
        "print(type(fastload.ImageFolder).__name__, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.split() == ["type", "True"], proc.stderr
    with pytest.raises(AttributeError, match="module 'fastload' has no attribute 'Nope'"):
        fastload.Nope  # noqa: B018


def test_info_text() -> None:
    proc = run("info")
    assert proc.returncode == 0, proc.stderr
    for word in ("python", "torch", "torchvision", "pillow", "opencv", "turbojpeg", "dali", "cuda"):
        assert word in proc.stdout


def test_info_json() -> None:
    proc = run("info", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["fastload"] == fastload.__version__
    from fastload.backends import kind, names

    assert [b["name"] for b in info["backends"]] == names()  # every registered backend
    for b in info["backends"]:
        assert set(b) == {"name", "kind", "usable", "version", "reason", "fix", "details"}
        assert b["kind"] == kind(b["name"])
        if not b["usable"]:
            assert b["reason"] and b["fix"]
    assert isinstance(info["cuda"]["available"], bool)
    assert info["torchvision"]["usable"], info["torchvision"]["reason"]
    for kernel in ("normalize_kernel", "resize_kernel", "files_kernel"):
        assert set(info[kernel]) == {"built", "reason", "fix"}
        if backends_required():  # in CI every kernel must be built
            assert info[kernel]["built"], info[kernel]["reason"]
    if backends_required():  # ... and every backend usable
        broken = {b["name"]: b["reason"] for b in info["backends"] if not b["usable"]}
        assert broken == {}, broken


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "the following arguments are required: COMMAND"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("info", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_on_a_folder(tmp_path: Path) -> None:
    from fastload.synthetic import make_image_folder

    make_image_folder(tmp_path / "data", images=24, classes=3)
    args = ["--model", "resnet18", "--batch-size", "4", "--steps", "2", "--image-size", "32"]
    proc = run("doctor", str(tmp_path / "data"), *args, "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["model"] == "resnet18" and report["batch_size"] == 4 and report["steps"] == 2
    assert report["device"] == "cpu" and report["bound"] in ("loader", "model")
    # the worker trials run only when the measured step waits for the loader, which on a loaded
    # machine it may or may not: the model trials are always tried
    model_trials = {"channels_last", "bf16_autocast", "larger_batch"}
    worker_trials = {"more_workers", "thread_workers"} if report["bound"] == "loader" else set()
    assert model_trials <= set(report["tried"]) <= model_trials | worker_trials, report["tried"]
    text = run("doctor", str(tmp_path / "data"), *args, "--device", "cpu")
    assert text.returncode == 0, text.stderr
    assert "resnet18 on" in text.stdout and "waiting for data" in text.stdout
    bad = run("doctor", str(tmp_path / "data"), "--model", "resnet7")
    assert bad.returncode == 2 and "--model 'resnet7' is not a torchvision model" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("name", ["autotune", "train"])
def test_the_readmes_submodules_resolve_without_importing_them_first(name: str) -> None:
    # `fastload.autotune.autotune(...)` in the README, in a fresh process
    script = f"import fastload; print(fastload.{name}.__name__)"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.split() == [f"fastload.{name}"], proc.stderr


def test_info_says_when_the_normalize_kernel_is_not_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastload.commands import info
    from fastload.gpu.functional import NORMALIZE_KERNEL

    monkeypatch.setitem(sys.modules, NORMALIZE_KERNEL, None)  # its import fails, as unbuilt
    found = info.collect()
    assert found["normalize_kernel"]["built"] is False
    info.print_info(found)
    out = capsys.readouterr().out
    assert f"float32 batches by OpenCV, at twice the cost: {NORMALIZE_KERNEL} is not built" in out
    assert "fix: install a C compiler and Python's headers" in out


@pytest.mark.parametrize(
    ("key", "module", "words"),
    [
        ("resize_kernel", "fastload.pixels._resizing", "by torch, the GIL handed over three times"),
        ("files_kernel", "fastload.backends._files", "files by os, the GIL handed over four times"),
    ],
)
def test_info_says_when_a_kernel_is_not_built(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    key: str,
    module: str,
    words: str,
) -> None:
    from fastload.commands import info

    monkeypatch.setitem(sys.modules, module, None)  # its import fails, as unbuilt
    found = info.collect()
    assert found[key]["built"] is False
    info.print_info(found)
    out = capsys.readouterr().out
    assert f"{words} a " in out and f"{module} is not built" in out
