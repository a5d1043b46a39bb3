#!/usr/bin/env bash
# Expert streaming gives the resident run's logits bit for bit, on a full-size model.
#
# usage: bench/stream_identity.sh [MODEL] [N_TOKENS]
#   MODEL     GGUF (default: $TMPDIR/estream-olmoe-1b-7b-q4_0.gguf, synthesized if missing); its
#             pack (MODEL with .gguf -> .pack) is made with `estream pack` if missing
#   N_TOKENS  prompt length (default 512; ids are a fixed pseudo-random draw)
#
# Method: one resident prefill (every expert through the mapping) writes the logits of every
# position with --dump-logits; then each streaming configuration (source GGUF or pack, G, B, Q,
# policy, threads, budget) writes its own, and `cmp` compares the files byte for byte. Prints one
# row per configuration: identical or not, tokens/s, peak RSS, bubble rate. Exits 1 if any
# differs. (The tests check the same on small presets; this is the full-size run.)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.gguf}
n=${2:-512}
make -j"$(nproc)" build/estream >/dev/null
if [ ! -f "$model" ]; then
    echo "writing $model (estream synth --preset olmoe-1b-7b --type q4_0)" >&2
    build/estream synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$model"
fi
pack=${model%.gguf}.pack
[ -f "$pack" ] || build/estream pack "$model" -o "$pack" >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
vocab=$(build/estream info -m "$model" | sed -n 's/^tokenizer:.*, \([0-9]*\) tokens.*/\1/p')
awk -v n="$n" -v v="$vocab" 'BEGIN { s = 12345; for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%d ", s % v } print "" }' >"$out/ids"
field() { sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" "$2"; }
build/estream prefill -m "$model" --ids "$out/ids" -t 2 --json --dump-logits "$out/resident.f32" >"$out/resident.json"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs"
echo "model: $model; $n tokens; resident $(field tokens_per_second "$out/resident.json") tok/s," \
     "peak RSS $(( $(field peak_rss_bytes "$out/resident.json") >> 20 )) MiB"
printf '%-52s %-9s %8s %9s %7s\n' "configuration" "logits" "tok/s" "peak MiB" "bubble"
status=0
run() { # label file args...
    local label=$1 file=$2
    shift 2
    if ! build/estream prefill -m "$file" --ids "$out/ids" --json --dump-logits "$out/s.f32" "$@" >"$out/s.json" 2>"$out/err"; then
        printf '%-52s %-9s %s\n' "$label" "FAILED" "$(cat "$out/err")"
        status=1
        return
    fi
    local same=identical
    cmp -s "$out/resident.f32" "$out/s.f32" || { same=DIFFER; status=1; }
    printf '%-52s %-9s %8.1f %9d %6.1f%%\n' "$label" "$same" "$(field tokens_per_second "$out/s.json")" \
        "$(( $(field peak_rss_bytes "$out/s.json") >> 20 ))" \
        "$(awk -v b="$(field bubble_rate "$out/s.json")" 'BEGIN { print 100 * b }')"
}
run "pack --mem 2G (early)"                  "$pack"  -t 2 --mem 2G
run "pack --mem 1G --policy after-routing"   "$pack"  -t 2 --mem 1G --policy after-routing
run "pack --groups 3 --banks 2 --qd 1 on-demand" "$pack" -t 2 --groups 3 --banks 2 --qd 1 --policy on-demand
run "pack --groups 8 --banks 4 --qd 8, 1 thread" "$pack" -t 1 --groups 8 --banks 4 --qd 8
run "gguf --mem 1G (early)"                  "$model" -t 2 --mem 1G
run "gguf --groups 5 --banks 3 --qd 2 pread" "$model" -t 2 --groups 5 --banks 3 --qd 2 --io-backend pread
exit $status
