#!/usr/bin/env bash
# Make .venv/ in this checkout and install fastload into it, with the extras given
# (default "all"; the test suite, which also builds the docs, uses "all,dev,docs").
#
#   bash scripts/install.sh [EXTRAS]
#
# On Debian/Ubuntu it also installs, when it runs as root (or with passwordless sudo), the
# system packages a bare machine lacks: python3.X-venv, libturbojpeg0, and what the region
# backend is compiled with (a C compiler, Python's and libjpeg-turbo's headers). Without root it
# says what to install and goes on: the backend concerned is then reported as unusable by
# `fastload info` instead of breaking anything else.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

extras="${1:-all}"
python="${PYTHON:-python3}"

say() { printf 'install.sh: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        return 1
    fi
}

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    if [ "$apt_updated" = 0 ]; then
        as_root apt-get update -qq || return 1
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

if ! command -v "$python" >/dev/null 2>&1; then
    say "no '$python' found: install Python >= 3.10, or set PYTHON=/path/to/python3"
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    say "fastload needs Python >= 3.10, and $python is $("$python" -V 2>&1); set PYTHON=..."
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) as a separate package.
    if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        pkg="python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
        say "$python cannot create virtual environments; installing $pkg"
        if ! apt_install "$pkg"; then
            say "could not install $pkg: run 'sudo apt-get install $pkg' and try again"
            exit 1
        fi
    fi
    "$python" -m venv .venv
fi

case ",$extras," in
*,all,* | *,turbojpeg,*)
    if ! "$python" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("turbojpeg") is None)'; then
        if apt_install libturbojpeg0; then
            say "installed libturbojpeg0 for the turbojpeg backend"
        else
            say "libturbojpeg is missing and cannot be installed without root:" \
                "the turbojpeg backend will be unusable. Fix: 'sudo apt-get install" \
                "libturbojpeg0', or see README.md (Installing without root)."
        fi
    fi
    ;;
esac

# The region backend is compiled when fastload is installed: it needs a C compiler, Python's
# headers and libjpeg-turbo's. Without them fastload installs anyway and `fastload info` says
# what is missing.
py_include="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
can_build_region() {
    command -v "${CC:-cc}" >/dev/null 2>&1 &&
        printf '#include <stdio.h>\n#include <jpeglib.h>\n#include <Python.h>\n' |
        "${CC:-cc}" -E -I"$py_include" - >/dev/null 2>&1
}
have_jpeg_headers() {
    local header
    for header in /usr/include/jpeglib.h /usr/include/*/jpeglib.h /usr/local/include/jpeglib.h; do
        [ -f "$header" ] && return 0
    done
    return 1
}
if ! can_build_region; then
    packages=()
    command -v "${CC:-cc}" >/dev/null 2>&1 || packages+=(gcc libc6-dev)
    [ -f "$py_include/Python.h" ] ||
        packages+=("python$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev")
    # Debian names libjpeg-turbo's headers libjpeg62-turbo-dev, Ubuntu libjpeg-turbo8-dev
    if ! have_jpeg_headers; then
        if apt-cache show libjpeg62-turbo-dev >/dev/null 2>&1; then
            packages+=(libjpeg62-turbo-dev)
        else
            packages+=(libjpeg-turbo8-dev)
        fi
    fi
    if [ "${#packages[@]}" = 0 ]; then
        say "cannot build the region backend: ${CC:-cc} fails on jpeglib.h and Python.h" \
            "although both are present; fastload installs without it"
    elif apt_install "${packages[@]}" && can_build_region; then
        say "installed ${packages[*]} to build the region backend"
    else
        say "cannot build the region backend (it needs ${packages[*]}): fastload installs" \
            "without it; 'fastload info' says why. Fix: sudo apt-get install ${packages[*]}," \
            "then run this script again."
    fi
fi

.venv/bin/python -m pip install --upgrade --quiet pip
# strict: the environment links the package's files instead of a finder for the checkout, so a
# folder named fastload in the current directory (this clone, run from its parent) cannot
# shadow the package; a module added later needs this command again
.venv/bin/python -m pip install --config-settings editable_mode=strict --editable ".[$extras]"
case ",$extras," in
*,dev,*)
    # OpenCLIP's own webdataset loader, the baseline of benchmarks/peers/open_clip_swap.py, breaks on
    # webdataset >= 0.2.96; its pin lives in a folder of its own, kept off the path, so the
    # current webdataset stays the tests' oracle
    baseline=.venv/baselines/webdataset-0.2.86
    [ -d "$baseline/webdataset" ] ||
        .venv/bin/python -m pip install --quiet --no-deps --target "$baseline" "webdataset==0.2.86"
    ;;
esac
say "done: .venv/bin/fastload and .venv/bin/python are ready"
