#!/usr/bin/env bash
# Batched scoring throughput: `estream score` over RECORDS records of 128 tokens cut from
# WikiText-2's test text, against llama.cpp's own batched scoring of the same 128-token chunks
# (`llama-perplexity -c 128 -b 2048`, which evaluates 16 sequences per batch and computes every
# position's logits, as score does), resident and under a memory budget.
#
# usage: bench/score_vs_llama.sh LLAMA_PERPLEXITY [MODEL] [RECORDS] [THREADS] [ROUNDS] [BUDGET]
#   LLAMA_PERPLEXITY  a locally built llama-perplexity (llama.cpp is never part of this tree)
#            with its timestamped log (log lines start M.SS.mmm.uuu, as in 3f545bec)
#   MODEL    GGUF (default $TMPDIR/estream-olmoe-1b-7b-q4_0.gguf, written by `estream synth
#            --preset olmoe-1b-7b --type q4_0 --seed 1` if missing); its pack (.gguf -> .pack)
#            is written by `estream pack` if missing and used for the budget runs
#   RECORDS  default 512;  THREADS default 2;  ROUNDS default 2;  BUDGET default 1G
# environment: ESTREAM (binary, default build/estream, made first), CGROUP_PARENT (see
#   bench/cgroup.sh), LLAMA_TIMEOUT (seconds per llama.cpp run, default 7200),
#   LLAMA_FLAGS (more flags for the resident llama-perplexity run, e.g. --no-repack where
#   llama.cpp's repacked path crashes: 3f545bec's Q4_0 repack does on an AMX Sapphire Rapids)
#
# Per round, in this order (interleaved, as bench/compare_llama.sh, because the two vCPUs of our
# machines sometimes share one core for minutes):
#   single    `estream bench -p 1024`: one 1,024-token prompt, resident (the reference speed)
#   score     `estream score` of the records, resident, default batching
#   llama     llama-perplexity -c 128 -b 2048 --chunks RECORDS on the same text, resident,
#             llama.cpp's defaults (weight repacking on: its fastest) plus LLAMA_FLAGS
#   score-mem `estream score --mem BUDGET` from the pack, the pack's page cache dropped first
#   llama-mem llama-perplexity with --no-repack in a fresh memory cgroup (v1) limited to BUDGET
#             (page cache included; the model file's pages dropped first)
# Throughput is tokens per second of the whole scoring: estream's summary (records' tokens over
# the wall time of the batches) and llama-perplexity's chunks' tokens over its scoring time. Peak RSS of
# estream from GNU time (%M), of llama.cpp in the cgroup from memory.max_usage_in_bytes. The
# table gives medians over rounds and the medians of the per-round ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/score_vs_llama.sh LLAMA_PERPLEXITY [MODEL] [RECORDS] [THREADS] [ROUNDS] [BUDGET]"
llama=${1:?$usage}
model=${2:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.gguf}
records=${3:-512}
threads=${4:-2}
rounds=${5:-2}
budget=${6:-1G}
llama_timeout=${LLAMA_TIMEOUT:-7200}
[ -x "$llama" ] || { echo "score_vs_llama: $llama is not executable" >&2; exit 1; }
out=$(mktemp -d)
bench_name=score_vs_llama
# shellcheck source=bench/cgroup.sh
. bench/cgroup.sh
budget_bytes=$(to_bytes "$budget") || { echo "score_vs_llama: bad budget '$budget'" >&2; exit 1; }
if [ -n "${ESTREAM:-}" ]; then
    estream=$ESTREAM
else
    make -j"$(nproc)" build/estream >/dev/null
    estream=build/estream
fi
if [ ! -f "$model" ]; then
    echo "writing $model (estream synth --preset olmoe-1b-7b --type q4_0)" >&2
    "$estream" synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$model"
fi
case $model in *.gguf) pack=${model%.gguf}.pack ;; *) pack=$model.pack ;; esac
if [ ! -f "$pack" ]; then
    echo "writing $pack (estream pack)" >&2
    "$estream" pack "$model" -o "$pack"
fi

# The records: the text's tokens cut into chunks of 128, each starting with BOS in place of its
# first token, as llama-perplexity makes its chunks.
text=../shared/data/text/wikitext-2-test.txt
[ -f "$text" ] || { echo "score_vs_llama: $text not found" >&2; exit 1; }
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

ll_flags=(-m "$model" -f "$text" -c 128 -b 2048 --chunks "$records" -t "$threads")
ll_rate() { # tokens/s of llama-perplexity's log $1 (or ""): its chunks' tokens over the time from
    # "calculating perplexity" to "Final estimate", from the log lines' M.SS.mmm.uuu stamps
    awk -v tokens="$((records * 128))" '
        function t(s,   f) { split(s, f, "."); return f[1] * 60 + f[2] + f[3] / 1e3 + f[4] / 1e6 }
        function stamp(pat,   s) { # the stamp before pat on this line (stdout and stderr may share it)
            if (!match($0, "[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+ I " pat)) return ""
            s = substr($0, RSTART, RLENGTH); sub(/ .*/, "", s); return t(s)
        }
        /calculating perplexity over/ { t0 = stamp("perplexity: calculating") }
        /Final estimate/ { t1 = stamp("Final estimate") }
        END { if (t0 != "" && t1 > t0) printf "%.2f\n", tokens / (t1 - t0) }' "$1"
}
es_rate() { # tokens/s of estream score's --json summary in $1
    sed -n 's/.*"tokens_per_second": *\([0-9.eE+-]*\).*/\1/p' "$1" | tail -n1
}
peak_kib() { sed -n 's/^maxrss_kib \([0-9]*\)$/\1/p' "$1" | tail -n1; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs;" \
     "estream kernels: $("$estream" bench -m "$model" -p 1 -r 1 --json 2>/dev/null | sed -n 's/.*"kernels": "\([a-z0-9]*\)".*/\1/p')"
echo "model: $model, pack $pack; $records records of 128 tokens; threads $threads; budget $budget; $rounds rounds"
echo "llama.cpp: $llama ${ll_flags[*]} (resident: ${LLAMA_FLAGS:-no more flags}; in the cgroup: --no-repack)"
[ "$cgroup_ok" = 1 ] || echo "cgroup: unavailable: $cgroup_why; llama-mem is not run"

for r in $(seq 1 "$rounds"); do
    "$estream" bench -m "$model" -p 1024 -t "$threads" -r 3 --json >"$out/single.$r" 2>"$out/single.$r.err" ||
        echo "  estream bench failed: $(tail -n1 "$out/single.$r.err")" >&2
    /usr/bin/time -f 'maxrss_kib %M' "$estream" score -m "$model" -f "$out/records.jsonl" -o "$out/score.$r.jsonl" \
        -t "$threads" --json >"$out/score.$r" 2>"$out/score.$r.err" ||
        echo "  estream score failed: $(tail -n1 "$out/score.$r.err")" >&2
    # shellcheck disable=SC2086  # (split on purpose)
    timeout --foreground --kill-after=10 "$llama_timeout" "$llama" "${ll_flags[@]}" ${LLAMA_FLAGS:-} >"$out/llama.$r" 2>&1 ||
        echo "  llama-perplexity failed: $(tail -n1 "$out/llama.$r")" >&2
    drop_file_cache "$pack"
    /usr/bin/time -f 'maxrss_kib %M' "$estream" score -m "$pack" --mem "$budget" -f "$out/records.jsonl" \
        -o "$out/scoremem.$r.jsonl" -t "$threads" --json >"$out/scoremem.$r" 2>"$out/scoremem.$r.err" ||
        echo "  estream score --mem failed: $(tail -n1 "$out/scoremem.$r.err")" >&2
    cmp -s "$out/score.$r.jsonl" "$out/scoremem.$r.jsonl" ||
        echo "  note: the --mem output differs from the resident one (round $r)" >&2
    rm -f "$out/score.$r.jsonl" "$out/scoremem.$r.jsonl"
    if [ "$cgroup_ok" = 1 ]; then
        drop_file_cache "$model"
        cg_run "$budget_bytes" "$out/llmem.$r" "$out/llmem.$r.err" \
            timeout --foreground --kill-after=10 "$llama_timeout" "$llama" "${ll_flags[@]}" --no-repack
        cat "$out/llmem.$r.err" >>"$out/llmem.$r"
        echo "$(llama_status) $cg_max" >"$out/llmem.$r.status"
    fi
    echo "round $r done" >&2
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { # col KIND: the per-round values of one column
    local k=$1 i
    for i in $(seq 1 "$rounds"); do
        case $k in
            single) sed -n 's/.*"tokens_per_second": *\([0-9.eE+-]*\).*/\1/p' "$out/single.$i" 2>/dev/null | tail -n1 ;;
            score) es_rate "$out/score.$i" 2>/dev/null ;;
            scoremem) es_rate "$out/scoremem.$i" 2>/dev/null ;;
            llama) ll_rate "$out/llama.$i" 2>/dev/null ;;
            llmem) [ -f "$out/llmem.$i.status" ] && [ "$(cut -d' ' -f1 "$out/llmem.$i.status")" = ok ] && ll_rate "$out/llmem.$i" ;;
        esac
    done
}
ratio() { # ratio A B: the median of the per-round A/B
    local i a b
    for i in $(seq 1 "$rounds"); do
        a=$(col "$1" | sed -n "${i}p"); b=$(col "$2" | sed -n "${i}p")
        [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }'
    done | median | awk '{ print $1 == "-" ? "-" : $1 "x" }'
}
fmt() { awk -v v="$1" 'BEGIN { if (v == "-" || v == "") print "-"; else printf "%.1f", v }'; }
peak_mem=$(for i in $(seq 1 "$rounds"); do peak_kib "$out/scoremem.$i.err"; done | sort -n | tail -n1)
ll_peak=$(for i in $(seq 1 "$rounds"); do [ -f "$out/llmem.$i.status" ] && cut -d' ' -f2 "$out/llmem.$i.status"; done | sort -n | tail -n1)
ll_runs=$(for i in $(seq 1 "$rounds"); do [ -f "$out/llmem.$i.status" ] && cut -d' ' -f1 "$out/llmem.$i.status"; done | sort | uniq -c | awk '{ printf "%s%d %s", (NR > 1 ? ", " : ""), $1, $2 }')

echo
echo "| run | tok/s (median) | ratio (median of rounds) | target |"
echo "|---|---|---|---|"
echo "| single 1,024-token prompt, resident | $(fmt "$(col single | median)") | | |"
echo "| estream score, resident | $(fmt "$(col score | median)") | $(ratio score single) single | >= 0.9x |"
echo "| llama-perplexity -c 128 -b 2048, resident | $(fmt "$(col llama | median)") | score / llama $(ratio score llama) | >= 3x |"
echo "| estream score --mem $budget (pack) | $(fmt "$(col scoremem | median)") | $(ratio scoremem score) resident score | >= 0.85x |"
echo "| llama-perplexity --no-repack in a $budget cgroup | $(fmt "$(col llmem | median)") | score-mem / llama-mem $(ratio scoremem llmem) | >= 5x |"
echo
echo "estream score --mem $budget peak RSS: $(awk -v k="${peak_mem:-0}" 'BEGIN { printf "%.0f MiB", k / 1024 }')" \
     "(budget $((budget_bytes >> 20)) MiB); llama.cpp in the cgroup: peak $(awk -v b="${ll_peak:-0}" 'BEGIN { printf "%.0f MiB", b / 1048576 }')" \
     "(page cache included), runs: ${ll_runs:-none}"
