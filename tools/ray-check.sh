#!/usr/bin/env bash
# estream.ray.Scorer under Ray Data: tests/ray_check.py runs `ds.map_batches(estream.ray.Scorer,
# ...)` with two actors on a local Ray cluster (2 CPUs, no dashboard, usage stats off) over a
# dataset of mixed estream score records, good and bad, in the numpy and pandas batch formats,
# and asserts every row equals the line `estream score --on-error skip` writes for its record
# (float32 values bit for bit, doubles at the CLI's 9 digits, the CLI's error messages); then
# the Scorer without Ray on batches Arrow could not hold, and its refusals.
#
# usage: bash tools/ray-check.sh [BUILD_DIR]     (default build; BUILD_DIR/estream is the CLI
#                                                 the rows are compared with, made first with
#                                                 make BUILD=BUILD_DIR; the package bundles
#                                                 BUILD_DIR/libestream.so.2)
# environment:
#   ESTREAM_RAY_VENV_DIR  the virtualenv with the pinned ray[data], numpy, pandas and setuptools
#                         (default $HOME/.cache/estream/venv-ray); made once from PyPI and
#                         reused while its stamp (.estream-complete, the requirements) matches;
#                         delete it to redo
#   PYTHON                the interpreter that makes the virtualenvs (default python3: Debian
#                         needs the python3-venv package for `python3 -m venv`)
#
# Steps: the cached virtualenv; a throwaway virtualenv that sees the cached one's packages (a
# .pth file), into which `pip install --no-build-isolation ./python` installs the package, as
# tools/python-check.sh does (Ray's workers run that virtualenv's python, so they import the
# installed package); a synthetic model with Llama's SentencePiece vocabulary and Mixtral's chat
# template (chats, labels and reranks need both); the check, from a folder outside the tree.
# Prints "ray: N checks passed" last and exits 0, or exits 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
venv=${ESTREAM_RAY_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-ray}
# pinned so that CI runs the same versions every time; change them here to move on
reqs="ray[data]==2.60.0 numpy==2.4.6 pandas==3.1.1 pyarrow==26.0.1 setuptools==80.9.0"
say() { echo "ray-check: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- the cached virtualenv (once) ----
. tools/venv.sh
cached_venv "$venv" "$reqs"

# ---- the CLI and the model ----
if [ ! -x "$build/estream" ]; then
    say "building $build/estream"
    make BUILD="$build" -j"$(nproc)" "$build/estream" >/dev/null
fi
case $build in /*) bin=$build/estream ;; *) bin=$root/$build/estream ;; esac
vocab=${ESTREAM_DATA:-$root/../shared/data}/vocab/ggml-vocab-llama-spm.gguf
[ -f "$vocab" ] || die "no $vocab (set ESTREAM_DATA to the shared data folder)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$tmp/chat-spm.gguf
"$bin" synth --preset tiny --type q4_0 --seed 11 --vocab "$vocab" \
    --chat-template tests/data/chat/mixtral-8x7b-instruct.jinja -o "$model" >/dev/null 2>&1 ||
    die "estream synth failed"

# ---- a fresh virtualenv with the package installed into it ----
package_venv "$venv" "$tmp/venv" "$build" # ray, numpy, pandas without a download

# ---- the check, from outside the tree: the installed package is imported ----
mkdir -p "$tmp/run"
# RAY_USAGE_STATS_ENABLED=0: Ray would otherwise try to report usage over the network
(cd "$tmp/run" && env -u ESTREAM_LIBRARY RAY_USAGE_STATS_ENABLED=0 \
    "$tmp/venv/bin/python" "$root/tests/ray_check.py" --estream "$bin" --model "$model" \
    --workdir "$tmp/run")
