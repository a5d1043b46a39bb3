#!/usr/bin/env bash
# lm-evaluation-harness, unedited, against estream serve on a model that adds BOS: its
# accuracies must be those of llama.cpp's log-probs (with BOS) in both tokenized_requests modes.
#
# usage: bash tools/lmeval-check.sh [BUILD_DIR]     (default build; BUILD_DIR/estream is used,
#                                                    made first with make BUILD=BUILD_DIR)
# environment:
#   ESTREAM_VENV_DIR  the virtualenv of lm_eval[api] (default $HOME/.cache/estream/venv-lmeval,
#                     shared with bench/lmeval_vs_score.sh); made once from PyPI (1-3 minutes)
#                     and reused while its stamp (.estream-complete, the requirements) matches
#   PYTHON            the interpreter that makes the virtualenv (default python3)
#   LMEVAL_KEEP=1     keep the temporary folder (tasks, lm-eval's logs, results and samples,
#                     estream score's output, the servers' logs)
#   LMEVAL_SERVE_ARGS more arguments for estream serve; --no-implicit-bos shows what the check
#                     is for: lm-eval's requests are then scored without BOS and it fails
#
# Steps.
# - The model: tests/data/tiny-f32.gguf (olmoe, F32; its tokenizer adds BOS 319: the script
#   checks /tokenizer_info says add_bos_token true, else the check would prove nothing).
# - The tasks (tests/lmeval_check.py prepare): the 40 questions of tests/data/mc-tasks.txt
#   (llama-perplexity's hellaswag format) as lm-eval YAML tasks, unedited: plain contexts (no
#   BOS text), the endings as choices, target_delimiter " ", so lm-eval's _encode_pair scores
#   tok(context + " " + ending) past tok(context), the token sequence llama.cpp scored.
#   estream_mc holds the 32 tasks whose endings' common token prefix ends at the context;
#   estream_mc_shared the 8 whose endings all start with " the" (llama.cpp's sums leave that
#   token out: acc is checked against them, acc_norm only against estream score; the helper's
#   docstring says why).
# - estream serve (--port 0, --api-key-file, 2 threads), and lm_eval --model local-completions
#   with tokenizer_backend=auto (lm-eval must log that it found the server's tokenizer: no
#   Hugging Face download, HF_HUB_OFFLINE=1), --log_samples, these runs in turn:
#     tokenized seq    tokenized_requests=True,  num_concurrent=1, batch_size=1 (id lists)
#     string seq       tokenized_requests=False, num_concurrent=1, batch_size=1 (one string)
#     tokenized conc   tokenized_requests=True,  num_concurrent=2, batch_size=8
#     string conc      tokenized_requests=False, num_concurrent=2, batch_size=8 (string lists)
# - estream score on the same 40 questions as JSONL.
# - tests/lmeval_check.py check: for every run, lm-eval's acc and acc_norm (results JSON)
#   equal those of llama.cpp's per-ending sums (tests/data/tiny-f32.llama-hellaswag-scores.txt)
#   under lm-eval's rules (argmax of the sum; of the sum / len(ending)), every logged
#   log-likelihood equals llama.cpp's sum within 1e-4 a token (the helper says why),
#   every run's log-likelihoods equal the first run's exactly, and estream score gives the same
#   accuracies; then the table (requests, HTTP requests, seconds, requests/s, acc, acc_norm)
#   and the requests/s ratio of the sequential runs to the concurrent ones. Timing is
#   reported, never checked (shared CI machines are noisy). Request phase: from the first
#   /v1/completions request the server's /metrics shows to the last answered (sampled every
#   10 ms), without lm_eval's start-up and tokenization.
# - SIGTERM to the servers, which must exit 0.
# Prints "lmeval: N checks passed" and exits 0, or says what failed and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=${ESTREAM_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-lmeval}
# pinned: 0.4.13 is the newest on PyPI (2026-12) and the version bench/lmeval_vs_score.sh uses
reqs="lm_eval[api]==0.4.13"
model=tests/data/tiny-f32.gguf
scores=tests/data/tiny-f32.llama-hellaswag-scores.txt
say() { echo "lmeval-check: $*" >&2; }
die() { say "$*"; exit 1; }
for f in "$model" "$scores" tests/data/mc-tasks.txt; do [ -f "$f" ] || die "no $f"; done

# ---- the virtualenv (once) ----
. tools/venv.sh
cached_venv "$venv" "$reqs"
py=$venv/bin/python
[ -x "$venv/bin/lm_eval" ] || die "no lm_eval in $venv (delete it and run this again)"

# ---- the binary ----
if [ ! -x "$build/estream" ]; then
    say "building $build/estream"
    make BUILD="$build" -j"$(nproc)" "$build/estream" >/dev/null
fi
estream=$build/estream
tmp=$(mktemp -d)
server_pids=()
cleanup() {
    local p
    for p in "${server_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    if [ -n "${poll_pid:-}" ]; then kill -KILL "$poll_pid" 2>/dev/null || true; fi
    if [ -n "${LMEVAL_KEEP:-}" ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
checks=0 # counted here; the helper adds its own
key=sk-lmeval-$RANDOM$RANDOM
printf '%s\n' "$key" >"$tmp/key"

# start_server NAME ARGS...: sets $base (http://127.0.0.1:PORT), waits for /health 200
start_server() {
    local name=$1 port='' pid
    shift
    : >"$tmp/$name.err" # before the server's redirection opens it: the sed below must find it
    # shellcheck disable=SC2086 # LMEVAL_SERVE_ARGS is a list of arguments
    "$estream" serve -m "$model" --port 0 --api-key-file "$tmp/key" -t 2 "$@" ${LMEVAL_SERVE_ARGS:-} \
        2>"$tmp/$name.err" &
    pid=$!
    server_pids+=("$pid")
    for _ in $(seq 200); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$tmp/$name.err" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.err" >&2; die "estream serve ($name) exited"; }
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$tmp/$name.err" >&2; die "no 'listening on' line from estream serve ($name)"; }
    base=http://127.0.0.1:$port
    "$py" - "$base" <<'EOF' || { cat "$tmp/$name.err" >&2; die "GET /health never answered 200 ($name)"; }
import sys, time, urllib.request
for _ in range(600):
    try:
        with urllib.request.urlopen(sys.argv[1] + "/health", timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(1)
EOF
}
# stop_server: SIGTERM to the last server started; it must exit 0
stop_server() {
    local pid=${server_pids[-1]} name=$1 rc=0
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    unset 'server_pids[-1]'
    [ "$rc" -eq 0 ] || { tail -20 "$tmp/$name.err" >&2; die "estream serve ($name) exited $rc after SIGTERM (expected 0)"; }
    checks=$((checks + 1))
}

# ---- tasks ----
"$py" tests/lmeval_check.py prepare tests/data/mc-tasks.txt "$scores" "$tmp/data" >&2

# ---- the server; the model must add BOS ----
start_server serve
"$py" - "$base" "$key" <<'EOF' || die "$model: /tokenizer_info does not say add_bos_token true: this check needs a model that adds BOS"
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/tokenizer_info", headers={"Authorization": "Bearer " + sys.argv[2]})
sys.exit(0 if json.load(urllib.request.urlopen(req, timeout=10)).get("add_bos_token") is True else 1)
EOF
checks=$((checks + 1))

# ---- lm-eval runs ----
runs=()
# lmeval_run LABEL TOKENIZED CONCURRENT BATCH
lmeval_run() {
    local label=$1 tok=$2 conc=$3 batch=$4 dir margs t0 t1 rc=0
    dir=$tmp/run-${#runs[@]}
    margs="base_url=$base/v1/completions,model=tiny-f32,tokenizer_backend=auto,auth_token=$key"
    margs+=",num_concurrent=$conc,max_retries=1,tokenized_requests=$tok"
    say "$label: lm_eval --model local-completions --model_args ${margs//$key/KEY} --batch_size $batch"
    "$py" tests/lmeval_check.py poll "$base" "$key" "$dir.poll.json" &
    poll_pid=$!
    t0=$(date +%s%N)
    HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_CACHE=$tmp/hf TOKENIZERS_PARALLELISM=false \
        OPENAI_API_KEY=$key "$venv/bin/lm_eval" --model local-completions --model_args "$margs" \
        --tasks estream_mc,estream_mc_shared --include_path "$tmp/data/task" --batch_size "$batch" \
        --output_path "$dir" --log_samples >"$dir.log" 2>&1 || rc=$?
    t1=$(date +%s%N)
    kill -TERM "$poll_pid"
    wait "$poll_pid" || true
    poll_pid=
    if [ "$rc" -ne 0 ]; then
        tail -40 "$dir.log" >&2
        die "$label: lm_eval failed (exit $rc)"
    fi
    # auto must have found the server's tokenizer (it falls back to Hugging Face's otherwise)
    grep -q "Using remote tokenizer from $base" "$dir.log" ||
        die "$label: lm-eval's tokenizer_backend=auto did not use the server's tokenizer (see $dir.log)"
    checks=$((checks + 1))
    runs+=("$label:$dir:$(((t1 - t0) / 1000000)):$dir.poll.json")
}
lmeval_run "tokenized seq" True 1 1
lmeval_run "string seq" False 1 1
lmeval_run "tokenized conc" True 2 8
lmeval_run "string conc" False 2 8
stop_server serve

# ---- estream score on the same questions ----
"$estream" score -m "$model" -f "$tmp/data/score.jsonl" -o "$tmp/data/score.out.jsonl" --json -t 2 \
    >"$tmp/data/score.summary.json" 2>"$tmp/score.err" || { cat "$tmp/score.err" >&2; die "estream score failed"; }

# ---- compare ----
"$py" tests/lmeval_check.py check "$tmp/data" "$checks" "${runs[@]}"
