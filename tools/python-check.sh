#!/usr/bin/env bash
# The Python package (python/): `pip install ./python` into a fresh virtualenv, then its pytest
# suite (python/tests), which compares every number with the estream CLI's on the same inputs
# (bit for bit), the library's errors, Ctrl-C and the GIL.
#
# usage: bash tools/python-check.sh [BUILD_DIR]     (default build; BUILD_DIR/estream is the CLI
#                                                    the tests compare with, made first with
#                                                    make BUILD=BUILD_DIR; the package bundles
#                                                    BUILD_DIR/libestream.so.2)
# environment:
#   ESTREAM_PY_VENV_DIR  the virtualenv with the pinned numpy and pytest (default
#                        $HOME/.cache/estream/venv-python); made once from PyPI and reused
#                        while its stamp (.estream-complete, the requirements) matches; delete
#                        it to redo
#   PYTHON               the interpreter that makes the virtualenvs (default python3: Debian
#                        needs the python3-venv package for `python3 -m venv`)
#   PYTEST_ARGS          more arguments for pytest (e.g. "-k embed -x")
#
# Steps: the cached virtualenv (numpy, pytest and setuptools, the package's build backend,
# from PyPI); a throwaway virtualenv made for this run that sees the cached one's packages
# (a .pth file), into which `pip install --no-build-isolation ./python` installs the package
# (its setup.py runs make for BUILD_DIR/libestream.so and bundles it); pytest from a folder
# outside the tree, so the installed package is the one imported.
# Prints "python package: N passed, 0 failed" last and exits 0, or exits 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
venv=${ESTREAM_PY_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-python}
# pinned so that CI runs the same versions every time; change them here to move on
reqs="numpy==2.4.6 pytest==9.2.0 setuptools==80.9.0"
say() { echo "python-check: $*" >&2; }
die() { say "$*"; echo "python package: 0 passed, 1 failed"; exit 1; }

# ---- the cached virtualenv (once) ----
. tools/venv.sh
cached_venv "$venv" "$reqs"

# ---- the CLI the tests compare with ----
if [ ! -x "$build/estream" ]; then
    say "building $build/estream"
    make BUILD="$build" -j"$(nproc)" "$build/estream" >/dev/null
fi
case $build in /*) bin=$build/estream ;; *) bin=$root/$build/estream ;; esac

# ---- a fresh virtualenv for this run, with the package installed into it ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (without pip or setuptools of its own: the cached virtualenv's pip installs into it, and the
# build uses the cached setuptools)
package_venv "$venv" "$tmp/venv" "$build" # numpy, pytest, setuptools without a download

# ---- the tests, from outside the tree: the installed package is imported ----
mkdir -p "$tmp/run"
rc=0
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of arguments
(cd "$tmp/run" && env -u ESTREAM_LIBRARY ESTREAM_BIN="$bin" "$tmp/venv/bin/python" -m pytest \
    -p no:cacheprovider -q -rs "$root/python/tests" ${PYTEST_ARGS:-}) | tee "$tmp/pytest.out" ||
    rc=$?
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|no tests ran' "$tmp/pytest.out" | tail -n1 || true)
passed=$(echo "$summary" | sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p')
failed=$(echo "$summary" | sed -n 's/.*\b\([0-9][0-9]*\) failed.*/\1/p')
errors=$(echo "$summary" | sed -n 's/.*\b\([0-9][0-9]*\) errors\{0,1\}.*/\1/p')
passed=${passed:-0}
failed=$((${failed:-0} + ${errors:-0}))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi # pytest failed without a count
[ "$passed" -gt 0 ] || { [ "$failed" -gt 0 ] || failed=1; }
echo "python package: $passed passed, $failed failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
