#!/usr/bin/env bash
# The Python package's overhead: `estream score` against estream.Session.score (python/) on the
# same RECORDS records of 128 tokens, the same model, threads and batches (the package forms
# the CLI's batches: 2,048 tokens, 16 records each), interleaved CLI, Python, CLI, Python...
#
# usage: bench/python_vs_cli.sh [MODEL] [RECORDS] [THREADS] [ROUNDS]
#   MODEL    GGUF (default: the small preset, written by `estream synth --preset small --type
#            q8_0` into a temporary folder; the figures in bench/README.md use the olmoe-1b-7b
#            preset in Q4_0)
#   RECORDS  default 512;  THREADS default 2;  ROUNDS default 3
# environment: ESTREAM (the CLI, default build/estream, made first with build/libestream.so),
#   ESTREAM_PY_VENV_DIR (a virtualenv with numpy: default tools/python-check.sh's, made by it if
#   missing), PYTHON (its interpreter instead, e.g. python3 with numpy installed)
#
# The records: WikiText-2's test text tokenized by the model, cut into chunks of 128 ids, each
# starting with BOS in place of its first id ({"ids": [...]}, as bench/score_vs_llama.sh).
# The CLI's rate is its --json summary's tokens_per_second (the records' tokens over the wall
# time of the batches: parsing, running, writing); the package's is the records' tokens over
# the wall time of one Session.score() call on the id lists (making the sequences, running the
# batches, making the results), the session made before the clock starts, as the CLI's. Before
# its rate counts, each Python round checks that its log-probs equal the CLI's of the same
# round bit for bit. Prints the machine, one line per run and a markdown table: medians of
# tokens/s and the median of the per-round ratios Python / CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
records=${2:-512}
threads=${3:-2}
rounds=${4:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -n "${ESTREAM:-}" ]; then
    estream=$ESTREAM
    lib=$(dirname "$estream")/libestream.so.2
else
    make -j"$(nproc)" build/estream build/libestream.so >/dev/null
    estream=build/estream
    lib=$root/build/libestream.so.2
fi
[ -f "$lib" ] || { echo "python_vs_cli: no $lib (make build/libestream.so)" >&2; exit 1; }
if [ -n "${PYTHON:-}" ]; then
    py=$PYTHON
else
    venv=${ESTREAM_PY_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-python}
    if [ ! -x "$venv/bin/python" ]; then
        echo "python_vs_cli: making $venv with tools/python-check.sh" >&2
        bash tools/python-check.sh >/dev/null
    fi
    py=$venv/bin/python
fi
model=${1:-}
if [ -z "$model" ]; then
    model=$out/small.gguf
    "$estream" synth --preset small --type q8_0 --seed 1 -o "$model" >/dev/null 2>&1
fi
text=../shared/data/text/wikitext-2-test.txt
[ -f "$text" ] || { echo "python_vs_cli: $text not found" >&2; exit 1; }

bos=$("$estream" tokenize -m "$model" -p "" --bos | awk '{ print $1 }')
"$estream" tokenize -m "$model" -f "$text" | tr ' ' '\n' | awk -v n="$records" -v bos="$bos" '
    NF { ids[k++] = $1 }
    END {
        if (k < n * 128) { printf "only %d tokens for %d records\n", k, n > "/dev/stderr"; exit 1 }
        for (r = 0; r < n; r++) {
            s = "{\"ids\":[" bos
            for (j = 1; j < 128; j++) s = s "," ids[r * 128 + j]
            print s "]}"
        }
    }' >"$out/records.jsonl"

# The Python side: one Session.score() over the records, timed; then its log-probs against the
# CLI's output of the same round.
cat >"$out/run.py" <<'EOF'
import json, sys, time
import numpy as np
import estream
model, records, threads, cli_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ids = [json.loads(line)["ids"] for line in open(records)]
with estream.Session(model, threads=threads) as s:
    # the time inside es_session_run, so that the rest is the package's own
    lib, inside = s._lib, [0.0]
    run = lib.es_session_run
    def timed(*args):
        t0 = time.perf_counter()
        try:
            return run(*args)
        finally:
            inside[0] += time.perf_counter() - t0
    lib.es_session_run = timed
    t = time.perf_counter()
    res = s.score(ids)
    secs = time.perf_counter() - t
    lib.es_session_run = run
    batch_tokens = s.batch_tokens
tokens = sum(len(r.ids) for r in res)
want = [json.loads(line) for line in open(cli_out)]
same = len(want) == len(res) and all(
    w["ids"] == r.ids.tolist()
    and (np.array([np.nan if v is None else v for v in w["logprobs"]], np.float32).view(np.uint32)
         == r.logprobs.view(np.uint32)).all()
    for w, r in zip(want, res))
print(json.dumps({"tokens": tokens, "seconds": secs, "tokens_per_second": tokens / secs,
                  "outside_seconds": secs - inside[0], "batch_tokens": batch_tokens,
                  "same": bool(same)}))
EOF

others=$(pgrep -f 'estream (score|serve|bench|ppl|prefill|tune|embed)' || true)
[ -z "$others" ] || echo "python_vs_cli: warning: other estream processes are running ($others)" >&2
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs;" \
     "kernels: $(PYTHONPATH=$root/python ESTREAM_LIBRARY=$lib "$py" -c 'import estream; print(estream.kernels())')"
echo "model: $model; $records records of 128 tokens; threads $threads; $rounds rounds"

rate() { sed -n 's/.*"tokens_per_second": *\([0-9.eE+-]*\).*/\1/p' "$1" | tail -n1; }
outside() { sed -n 's/.*"outside_seconds": *\([0-9.eE+-]*\).*/\1/p' "$1" | tail -n1; }
secs() { sed -n 's/.*"seconds": *\([0-9.eE+-]*\).*/\1/p' "$1" | tail -n1; }
for r in $(seq 1 "$rounds"); do
    rm -f "$out/cli.$r.jsonl" "$out/cli.$r.jsonl.meta"
    "$estream" score -m "$model" -f "$out/records.jsonl" -o "$out/cli.$r.jsonl" -t "$threads" \
        --json >"$out/cli.$r" 2>"$out/cli.$r.err" ||
        { echo "estream score failed: $(tail -n1 "$out/cli.$r.err")" >&2; exit 1; }
    echo "round $r: cli    $(rate "$out/cli.$r") tokens/s" >&2
    PYTHONPATH=$root/python ESTREAM_LIBRARY=$lib "$py" "$out/run.py" "$model" "$out/records.jsonl" \
        "$threads" "$out/cli.$r.jsonl" >"$out/py.$r" 2>"$out/py.$r.err" ||
        { echo "python failed: $(tail -n3 "$out/py.$r.err")" >&2; exit 1; }
    grep -q '"same": true' "$out/py.$r" ||
        { echo "python_vs_cli: round $r: the package's log-probs differ from the CLI's" >&2; exit 1; }
    echo "round $r: python $(rate "$out/py.$r") tokens/s (log-probs equal to the CLI's;" \
         "$(outside "$out/py.$r") s outside es_session_run)" >&2
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { local i; for i in $(seq 1 "$rounds"); do rate "$out/$1.$i"; done; }
ratios() {
    local i
    for i in $(seq 1 "$rounds"); do
        awk -v a="$(rate "$out/py.$i")" -v b="$(rate "$out/cli.$i")" 'BEGIN { printf "%.4f\n", a / b }'
    done
}
fmt() { awk -v v="$1" 'BEGIN { printf "%.1f", v }'; }
list() { tr '\n' ' ' | awk '{ for (i = 1; i <= NF; i++) printf "%s%.1f", (i > 1 ? ", " : ""), $i }'; }
ratio=$(ratios | median)
echo
echo "| run | tok/s per round | tok/s (median) | Python / CLI (median of rounds) |"
echo "|---|---|---|---|"
echo "| \`estream score\` | $(col cli | list) | $(fmt "$(col cli | median)") | |"
echo "| \`estream.Session.score\` | $(col py | list) | $(fmt "$(col py | median)") | $(awk -v r="$ratio" 'BEGIN { printf "%.3fx (%+.1f %%)", r, (r - 1) * 100 }') |"
share=$(for i in $(seq 1 "$rounds"); do
    awk -v o="$(outside "$out/py.$i")" -v s="$(secs "$out/py.$i")" 'BEGIN { printf "%.4f\n", 100 * o / s }'
done | median)
echo
echo "The package's own time (its calls minus the time inside es_session_run: making the"
echo "sequences and the results), median of rounds: $share % of its wall time."
