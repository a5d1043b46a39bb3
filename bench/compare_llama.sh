#!/usr/bin/env bash
# Prompt processing, estream vs llama.cpp, side by side on the same GGUF file in one run.
#
# usage: bench/compare_llama.sh LLAMA_BENCH [MODEL] [THREADS] [ROUNDS] [LENGTHS]
#   LLAMA_BENCH  path of a locally built llama-bench (llama.cpp is never part of this tree)
#   MODEL        GGUF file (default: $TMPDIR/estream-olmoe-1b-7b-q4_0.gguf, written by
#                `estream synth --preset olmoe-1b-7b --type q4_0` if missing)
#   THREADS      default 2;  ROUNDS default 3;  LENGTHS default 128,512,1024,2048
# environment:
#   REPS          measurements per engine, length and round, of which the median counts
#                 (default 3)
#   ESTREAM_ARGS  more `estream bench` arguments, e.g. "--mem 12G" for a model larger than the
#                 machine's memory (estream then streams its experts; the RSS column shows it)
#   LLAMA_ARGS    more llama-bench arguments
#
# Method: the two engines alternate (estream, llama.cpp, estream, llama.cpp, ...) for ROUNDS
# rounds, each round one median-of-3 measurement per prompt length (both tools warm up first),
# because the two vCPUs of our machines sometimes share one core for minutes: interleaving
# makes such a phase hit both engines alike. The table reports, per length, the median over
# rounds of each engine's tokens/s and the median of the per-round ratios, plus estream's peak
# resident memory against the file size.
set -euo pipefail
cd "$(dirname "$0")/.."
llama_bench=${1:?usage: bench/compare_llama.sh LLAMA_BENCH [MODEL] [THREADS] [ROUNDS] [LENGTHS]}
model=${2:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.gguf}
threads=${3:-2}
rounds=${4:-3}
lengths=${5:-128,512,1024,2048}
reps=${REPS:-3}
read -r -a es_args <<<"${ESTREAM_ARGS:-}"
read -r -a ll_args <<<"${LLAMA_ARGS:-}"
[ -x "$llama_bench" ] || { echo "compare_llama: $llama_bench is not executable" >&2; exit 1; }
make -j"$(nproc)" build/estream >/dev/null
if [ ! -f "$model" ]; then
    echo "writing $model (estream synth --preset olmoe-1b-7b --type q4_0)" >&2
    build/estream synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$model"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs;" \
     "estream kernels: $(build/estream bench -m "$model" -p 1 -r 1 --no-bounds "${es_args[@]}" --json | sed -n 's/.*"kernels": "\([a-z0-9]*\)".*/\1/p')"
echo "model: $model ($(du -h "$model" | cut -f1)); threads $threads; $rounds interleaved rounds of" \
     "$reps; estream ${es_args[*]:-(resident)}${ll_args[*]:+; llama-bench ${ll_args[*]}}"
for r in $(seq 1 "$rounds"); do
    build/estream bench -m "$model" -p "$lengths" -t "$threads" -r "$reps" --no-bounds \
        "${es_args[@]}" --json >"$out/es.$r"
    "$llama_bench" -m "$model" -p "$lengths" -n 0 -t "$threads" -r "$reps" "${ll_args[@]}" \
        -o jsonl >"$out/ll.$r" 2>/dev/null
    echo "round $r done" >&2
done
print_table() { # awk only: no Python needed
    awk -v rounds="$rounds" -v fsize="$(stat -c %s "$model")" '
    function median(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    FILENAME ~ /\/es\./ {
        match($0, /"n_prompt": *[0-9]+/); n = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", n)
        match($0, /"tokens_per_second": *[0-9.]+/); v = substr($0, RSTART, RLENGTH); sub(/.*: */, "", v)
        match($0, /"peak_rss_bytes": *[0-9]+/); m = substr($0, RSTART, RLENGTH); sub(/.*: */, "", m)
        r = FILENAME; sub(/.*\./, "", r); es[n, r] = v; if (m > rss[n]) rss[n] = m; lens[n] = 1
    }
    FILENAME ~ /\/ll\./ {
        match($0, /"n_prompt": *[0-9]+/); n = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", n)
        match($0, /"avg_ts": *[0-9.e+]+/); v = substr($0, RSTART, RLENGTH); sub(/.*: */, "", v)
        r = FILENAME; sub(/.*\./, "", r); ll[n, r] = v
    }
    END {
        printf "%-8s %14s %14s %10s %16s\n", "n_prompt", "estream tok/s", "llama.cpp tok/s", "ratio", "estream RSS/file"
        for (n in lens) order[++k] = n + 0
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
        for (i = 1; i <= k; i++) {
            n = order[i]; ne = nl = nr = 0
            for (r = 1; r <= rounds; r++) {
                if ((n, r) in es) a[++ne] = es[n, r]
                if ((n, r) in ll) b[++nl] = ll[n, r]
                if (((n, r) in es) && ((n, r) in ll) && ll[n, r] > 0) c[++nr] = es[n, r] / ll[n, r]
            }
            printf "%-8d %14.1f %14.1f %9.2fx %15.2f\n", n, ne ? median(a, ne) : 0, nl ? median(b, nl) : 0,
                   nr ? median(c, nr) : 0, rss[n] / fsize
        }
    }' "$out"/es.* "$out"/ll.*
}
print_table
