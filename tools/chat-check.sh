#!/usr/bin/env bash
# The chat templates against Python's jinja2, afresh: tests/data/chat/make_expected.py renders
# every committed template with every message list (and every unit template) in a cached
# virtualenv with jinja2 pinned, in Hugging Face's chat environment; its output must equal the
# committed tests/data/chat/expected/ (so those files cannot drift from jinja2), and estream's
# renderer (test_chat's golden cases, run against the fresh output) must match it byte for byte.
# Then tests/data/chat/differential.py renders ESTREAM_CHAT_RANDOM (default 1000) random
# templates of the supported subset with two conversations in jinja2 and in tools/chat_render:
# none may render differently (estream may refuse what it does not implement, never differ).
#
# usage: bash tools/chat-check.sh [BUILD_DIR]     (default build; BUILD_DIR/tests/test_chat is
#                                                  made if missing)
# environment:
#   ESTREAM_CHAT_VENV  the virtualenv (default $HOME/.cache/estream/venv-jinja2); made once from
#                      PyPI and reused while its stamp matches the pinned requirements
#   PYTHON             the interpreter that makes the virtualenv (default python3)
# Prints "chat check: N checks passed" (one per case, one for the committed files, one per
# random template and conversation) and exits 0, or says what differs and exits 1. About half a
# minute once the virtualenv exists.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=${ESTREAM_CHAT_VENV:-${HOME:-/root}/.cache/estream/venv-jinja2}
# pinned: the expectations are jinja2 3.1.6's; change the versions here (and regenerate the
# committed files with make_expected.py) to move on
reqs="jinja2==3.1.6 markupsafe==3.0.3"
say() { echo "chat-check: $*" >&2; }
die() { say "$*"; exit 1; }

. tools/venv.sh
cached_venv "$venv" "$reqs"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" -W ignore tests/data/chat/make_expected.py "$tmp/expected" >/dev/null ||
    die "make_expected.py failed"
if ! diff -r tests/data/chat/expected "$tmp/expected" >"$tmp/drift"; then
    head -n 40 "$tmp/drift" >&2
    die "tests/data/chat/expected differs from what jinja2 renders now: rerun" \
        "tests/data/chat/make_expected.py in a virtualenv with $reqs and commit the result"
fi

if [ ! -x "$build/tests/test_chat" ] || [ ! -x "$build/tools/chat_render" ]; then
    say "building $build/tests/test_chat and $build/tools/chat_render"
    make BUILD="$build" -j"$(nproc)" "$build/tests/test_chat" "$build/tools/chat_render" >/dev/null
fi
out=$(ESTREAM_CHAT_EXPECTED="$tmp/expected" ESTREAM_TEST_FILTER='*match_jinja2' \
    CMOCKA_MESSAGE_OUTPUT=stdout "$build/tests/test_chat" 2>&1) || { echo "$out" >&2; die "estream renders differently from jinja2"; }
cases=$("$venv/bin/python" -c '
import json, glob, sys
print(sum(len(json.load(open(f))["cases"]) for f in glob.glob(sys.argv[1] + "/*.json")))' "$tmp/expected")
echo "$out" | grep -E "match jinja2|unit templates" | sed 's/^ */chat-check: /' >&2

random=${ESTREAM_CHAT_RANDOM:-1000}
diff_out=$("$venv/bin/python" -W ignore tests/data/chat/differential.py "$build/tools/chat_render" \
    "$random" 1) || { echo "$diff_out" >&2; die "a random template renders differently from jinja2"; }
echo "$diff_out" | sed 's/^/chat-check: /' >&2
echo "chat check: $((cases + 1 + 2 * random)) checks passed"
