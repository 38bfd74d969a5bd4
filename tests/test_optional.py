"""Optional libraries: imported where used, and a missing one names its install command."""

from __future__ import annotations

import sys

import pytest

from fastload import _optional
from fastload._optional import (
    REQUIREMENTS,
    MissingDependencyError,
    Requirement,
    check,
    load_turbojpeg,
    require,
)


def test_importing_fastload_imports_no_backend_library() -> None:
    import subprocess

    code = (
        "import sys, fastload; print([m for m in ('turbojpeg', 'nvidia.dali') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", sorted(REQUIREMENTS))
def test_every_backend_library_is_installed(backend: str, require_backend) -> None:
    require_backend(backend)  # fails in CI, skips locally when missing
    assert check(backend).usable
    assert require(backend).__name__ == REQUIREMENTS[backend].module


def test_unknown_backend_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="'nope' is not known; valid: dali, opencv, pillow"):
        require("nope")


def test_missing_module_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Requirement(
        "ghost",
        "ghost-dist",
        "fastload_no_such_module",
        'pip install "ghost"',
        system="apt-get install libghost",
    )
    monkeypatch.setitem(REQUIREMENTS, "ghost", fake)
    with pytest.raises(
        MissingDependencyError, match=r'Install it with: pip install "ghost".*libghost'
    ):
        require("ghost")
    status = check("ghost")
    assert not status.usable and status.version is None
    assert "fastload_no_such_module" in status.reason
    assert status.fix == 'pip install "ghost", and apt-get install libghost'


def test_missing_dependency_is_an_import_error() -> None:
    assert issubclass(MissingDependencyError, ImportError)


def test_turbojpeg_library_path_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, require_backend
) -> None:
    require_backend("turbojpeg")
    monkeypatch.setenv(_optional.TURBOJPEG_LIB_ENV, "/nowhere/libturbojpeg.so")
    with pytest.raises(MissingDependencyError) as info:
        load_turbojpeg()
    message = str(info.value)
    assert "FASTLOAD_TURBOJPEG_LIB='/nowhere/libturbojpeg.so'" in message
    assert "apt-get install libturbojpeg0" in message
    status = check("turbojpeg")
    assert not status.usable and status.fix == REQUIREMENTS["turbojpeg"].system
