"""Optional libraries: imported where used, and a missing one names its install command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastload import backends
from fastload._optional import MissingDependencyError, Requirement, availability, require
from fastload.backends import turbojpeg


def test_importing_fastload_imports_no_backend_library() -> None:
    code = (
        "import sys, fastload; print([m for m in ('turbojpeg', 'nvidia.dali') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", backends.names())
def test_every_backend_library_is_installed(name: str, require_backend) -> None:
    require_backend(name)  # fails in CI, skips locally when missing
    assert backends.check(name).usable
    for requirement in backends.get(name).requires:
        assert require(requirement, backend=name).__name__ == requirement.module


def test_missing_module_names_the_install_command() -> None:
    ghost = Requirement(
        "ghost-dist",
        "fastload_no_such_module",
        'pip install "ghost"',
        system="apt-get install libghost",
    )
    with pytest.raises(
        MissingDependencyError,
        match=r"the 'ghost' backend .* Install it with: pip install \"ghost\".*libghost",
    ):
        require(ghost, backend="ghost")
    status = availability("ghost", [ghost])
    assert not status.usable and status.version is None
    assert "fastload_no_such_module" in status.reason
    assert status.fix == 'pip install "ghost", and apt-get install libghost'


def test_missing_dependency_is_an_import_error() -> None:
    assert issubclass(MissingDependencyError, ImportError)


def test_turbojpeg_library_path_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, require_backend
) -> None:
    require_backend("turbojpeg")
    monkeypatch.setenv(turbojpeg.TURBOJPEG_LIB_ENV, "/nowhere/libturbojpeg.so")
    with pytest.raises(MissingDependencyError) as info:
        turbojpeg.load_turbojpeg()
    message = str(info.value)
    assert "FASTLOAD_TURBOJPEG_LIB='/nowhere/libturbojpeg.so'" in message
    assert "apt-get install libturbojpeg0" in message
    status = backends.check("turbojpeg")
    assert not status.usable and status.fix == turbojpeg.PYTURBOJPEG.system
