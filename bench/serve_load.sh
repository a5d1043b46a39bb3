#!/usr/bin/env bash
# Load on `estream serve` against `estream score` offline on the same records.
#
# usage: bench/serve_load.sh [MODEL] [CLIENTS] [SECONDS] [BUDGET] [RECORDS]
#   MODEL    GGUF or pack (default $TMPDIR/estream-olmoe-1b-7b-q4_0.pack, made like
#            bench/score_vs_llama.sh makes it: estream synth --preset olmoe-1b-7b --type q4_0
#            --seed 1, then estream pack)
#   CLIENTS 64, SECONDS 120, BUDGET 1G, RECORDS 256 (scoring requests of 64-512 tokens: token
#   id slices of WikiText-2's test text, lengths from a fixed pseudo-random sequence)
# environment: ESTREAM (binary, default build/estream, made first), THREADS (default 2),
#   SMALL_QUEUE (the --max-queue of the 429 run, default 4), SMALL_SECONDS (default 30)
#
# Runs, in order:
#   offline  estream score --mem BUDGET over the records (its summary's tokens/s)
#   serve    estream serve --mem BUDGET; CLIENTS threads of bench/serve_load.py for SECONDS:
#            statuses, tokens/s, p50/p99 latency, every answer's log-probs against the offline
#            output, the server's peak RSS (VmHWM) against the budget
#   queue    the same load for SMALL_SECONDS with --max-queue SMALL_QUEUE: only 200 and 429
# and prints a table; the ratio is serve's tokens/s over offline's.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.pack}
clients=${2:-64}
seconds=${3:-120}
budget=${4:-1G}
n_records=${5:-256}
threads=${THREADS:-2}
small_queue=${SMALL_QUEUE:-4}
small_seconds=${SMALL_SECONDS:-30}
if [ -n "${ESTREAM:-}" ]; then estream=$ESTREAM; else make -j"$(nproc)" build/estream >/dev/null; estream=build/estream; fi
if [ ! -f "$model" ]; then
    gguf=${model%.pack}.gguf
    [ -f "$gguf" ] || "$estream" synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$gguf"
    [ "$gguf" = "$model" ] || "$estream" pack -m "$gguf" -o "$model"
fi
out=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$out"' EXIT

# the records: slices of 64..512 ids of the test text (a linear congruential sequence of lengths)
"$estream" tokenize -m "$model" -f ../shared/data/text/wikitext-2-test.txt >"$out/ids.txt"
python3 - "$out/ids.txt" "$n_records" >"$out/records.jsonl" <<'EOF'
import json, sys
ids = [int(t) for t in open(sys.argv[1]).read().split() if t.lstrip("-").isdigit()]
n, at, x = int(sys.argv[2]), 0, 12345
for _ in range(n):
    x = (x * 1103515245 + 12345) % 2**31
    k = 64 + x % 449
    if at + k > len(ids): at = 0
    print(json.dumps({"ids": ids[at:at + k]}))
    at += k
EOF
tokens=$(python3 -c 'import json,sys; print(sum(len(json.loads(l)["ids"]) for l in open(sys.argv[1])))' "$out/records.jsonl")
echo "records: $n_records, $tokens tokens; model $model; $threads threads; budget $budget" >&2
"$estream" info --system 2>/dev/null | head -n 3 >&2 || true

# offline
"$estream" score -m "$model" -f "$out/records.jsonl" -o "$out/ref.jsonl" -t "$threads" --mem "$budget" \
    --json 2>"$out/offline.err" >"$out/offline.json"
offline=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_second"])' "$out/offline.json" 2>/dev/null ||
    grep -o '[0-9.]* tok/s' "$out/offline.err" | head -n 1 | grep -o '^[0-9.]*')

start_server() { # extra flags...; sets server_pid and port
    "$estream" serve -m "$model" --mem "$budget" -t "$threads" --port 0 --quiet "$@" \
        >"$out/serve.out" 2>"$out/serve.err" &
    server_pid=$!
    port=''
    local i
    for i in $(seq 600); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$out/serve.err" | grep -o '[0-9]*$' || true)
        [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.2
    done
    [ -n "$port" ] || { echo "serve_load: the server did not start: $(cat "$out/serve.err")" >&2; exit 1; }
}
stop_server() {
    kill -TERM "$server_pid"
    wait "$server_pid" || { echo "serve_load: the server did not exit 0" >&2; exit 1; }
    server_pid=
}
hwm() { awk '/VmHWM/ {print $2 * 1024}' "/proc/$server_pid/status"; }

start_server
python3 bench/serve_load.py "http://127.0.0.1:$port" "$out/records.jsonl" "$out/ref.jsonl" "$clients" "$seconds" >"$out/load.json"
peak=$(hwm)
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics.txt"
stop_server
start_server --max-queue "$small_queue"
python3 bench/serve_load.py "http://127.0.0.1:$port" "$out/records.jsonl" "$out/ref.jsonl" "$clients" "$small_seconds" >"$out/queue.json"
stop_server

python3 - "$out/load.json" "$out/queue.json" "$offline" "$peak" "$budget" "$out/metrics.txt" <<'EOF'
import json, re, sys
load, queue = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
offline, peak, budget = float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
units = {"K": 2**10, "M": 2**20, "G": 2**30}
b = float(budget[:-1]) * units[budget[-1].upper()] if budget[-1].upper() in units else float(budget)
m = open(sys.argv[6]).read()
bt = re.search(r"^estream_batch_tokens_sum (\d+)", m, re.M); bc = re.search(r"^estream_batch_tokens_count (\d+)", m, re.M)
print("| run | clients | s | statuses | tokens | tok/s | vs offline | p50 s | p99 s | log-probs equal | peak RSS |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| offline score | - | - | - | - | {offline:.1f} | 1.00x | - | - | - | - |")
for name, r, pk in (("serve", load, f"{peak / 2**20:.0f} MiB of {budget}"), (f"serve --max-queue", queue, "-")):
    print(f"| {name} | {r['clients']} | {r['seconds']} | {r['codes']} | {r['tokens']} | {r['tok_per_s']} | "
          f"{r['tok_per_s'] / offline:.2f}x | {r['p50_s']} | {r['p99_s']} | {r['checked'] - r['mismatches']}/{r['checked']} | {pk} |")
if bt and bc and int(bc.group(1)):
    print(f"\nbatches: {bc.group(1)}, mean {int(bt.group(1)) / int(bc.group(1)):.0f} tokens")
bad = [k for k in load["codes"] if k != "200"] + [k for k in queue["codes"] if k not in ("200", "429")]
if bad or load["mismatches"] or queue["mismatches"] or peak > b:
    print(f"serve_load: FAILED (statuses {bad}, mismatches {load['mismatches']}/{queue['mismatches']}, peak {peak} > {b}?) {load['errors'] + queue['errors']}")
    sys.exit(1)
EOF
