#!/usr/bin/env bash
# estream serve under the official OpenAI Python client: tests/openai_client.py drives
# /v1/completions (echo, logprobs 5, max_tokens 1) and /v1/embeddings (base64, the client's
# default, and float) with `openai.OpenAI(base_url=..., api_key=...)` as published on PyPI, and
# asserts every number equals what `estream score --top 5` and `estream embed` give on the same
# inputs (exact float32 equality), plus the client's error classes for a wrong key (401) and
# max_tokens 5 (400, "prefill-only"); /v1/chat/completions (max_tokens 1, logprobs, top_logprobs
# 5) against the prompt Python's jinja2 renders from the model's chat template (Qwen3's), run by
# estream prefill, and against estream score's {"messages"} record.
#
# usage: bash tools/openai-check.sh [BUILD_DIR]     (default build; BUILD_DIR/estream is used,
#                                                    made first with make BUILD=BUILD_DIR)
# environment:
#   ESTREAM_VENV_DIR  the virtualenv with openai and numpy (default
#                     $HOME/.cache/estream/venv-openai); made once from PyPI and reused while
#                     its stamp (.estream-complete, the requirements) matches; delete it to redo
#   PYTHON            the interpreter that makes the virtualenv (default python3: Debian needs
#                     the python3-venv package for `python3 -m venv`)
#
# Steps: the virtualenv; a synthetic model with Qwen3's vocabulary (estream synth --preset
# tiny-qwen3moe-vocab --type f32) in a temporary folder; estream serve on it (--port 0, the
# port read from its "listening on http://127.0.0.1:PORT/" line; /health polled until 200) with
# a key from --api-key-file; the client script; SIGTERM to the server, which must exit 0.
# Prints "openai client: N checks passed" and exits 0, or says what failed and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=${ESTREAM_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-openai}
# pinned so that CI runs the same client every time; change the versions here to move on
reqs="openai==3.60.0 numpy==2.4.6 jinja2==3.1.6 markupsafe==3.0.3"
say() { echo "openai-check: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- the virtualenv (once) ----
. tools/venv.sh
cached_venv "$venv" "$reqs"
py=$venv/bin/python

# ---- the binary and the model ----
if [ ! -x "$build/estream" ]; then
    say "building $build/estream"
    make BUILD="$build" -j"$(nproc)" "$build/estream" >/dev/null
fi
estream=$build/estream
tmp=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
model=$tmp/tiny-qwen3moe-vocab.gguf
"$estream" synth --preset tiny-qwen3moe-vocab --type f32 --chat-template tests/data/chat/qwen3.jinja \
    -o "$model" >/dev/null 2>&1 ||
    die "estream synth failed"
key=sk-estream-$RANDOM$RANDOM
printf '%s\n' "$key" >"$tmp/key"

# ---- the server ----
: >"$tmp/serve.err" # before the server's redirection opens it: the sed below must find it
"$estream" serve -m "$model" --port 0 --api-key-file "$tmp/key" -t 2 2>"$tmp/serve.err" &
server_pid=$!
port=
for _ in $(seq 200); do
    port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$tmp/serve.err" | head -1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.err" >&2; die "estream serve exited"; }
    sleep 0.05
done
[ -n "$port" ] || { cat "$tmp/serve.err" >&2; die "no 'listening on' line from estream serve"; }
"$py" - "$port" <<'EOF' || { cat "$tmp/serve.err" >&2; die "GET /health never answered 200"; }
import sys, time, urllib.request, urllib.error
url = "http://127.0.0.1:%s/health" % sys.argv[1]
for _ in range(600):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except (urllib.error.URLError, OSError):
        pass
    time.sleep(0.05)
sys.exit(1)
EOF

# ---- the client ----
rc=0
"$py" tests/openai_client.py --base-url "http://127.0.0.1:$port/v1" --api-key "$key" \
    --model-name tiny-qwen3moe-vocab --estream "$estream" --model "$model" || rc=$?

# ---- SIGTERM: the server finishes and exits 0 ----
kill -TERM "$server_pid"
src=0
wait "$server_pid" || src=$?
server_pid=
if [ "$src" -ne 0 ]; then
    cat "$tmp/serve.err" >&2
    die "estream serve exited $src after SIGTERM (expected 0)"
fi
[ "$rc" -eq 0 ] || die "the client checks failed (exit $rc)"
