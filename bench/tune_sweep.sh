#!/usr/bin/env bash
# The configurator against the oracle (issue: `estream tune --sweep`), on a full-size model.
#
# usage: bench/tune_sweep.sh [PACK] [BUDGETS] [IO_LIMITS] [REPS]
#   PACK       default: $TMPDIR/estream-olmoe-1b-7b-q4_0.pack (synthesized and packed if missing)
#   BUDGETS    default 15%,25%,50% (of the file)
#   IO_LIMITS  default 0,800: the device as it is, and 800 MB/s, where reading the experts
#              (3.6 GB) takes about as long as computing a 1,024-token prompt on 2 threads
#   REPS       repetitions of the final interleaved comparison (default 5)
#
# Method: `estream tune --sweep` profiles once (storage, one request per G in 1,2,4,8,16 on the
# built-in 1,024-token calibration text), chooses (G, B, Q) per budget x regime, then runs every
# feasible configuration of the grid once (the oracle's search), and finally times the oracle's
# best, the configurator's choice and the default `--mem` path (a session given the tuning)
# REPS times each, interleaved, reporting medians, the regret and each method's time. Each run
# is a fresh session with the peak RSS reset. Output: the table (stdout, and
# bench/results/tune-sweep-<name>.txt) then the --explain rows of the chosen configurations.
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${1:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.pack}
budgets=${2:-15%,25%,50%}
limits=${3:-0,800}
reps=${4:-5}
make -j"$(nproc)" build/estream >/dev/null
if [ ! -f "$pack" ]; then
    src=${pack%.pack}.gguf
    [ -f "$src" ] || build/estream synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$src"
    build/estream pack "$src" -o "$pack" >&2
fi
name=$(basename "${pack%.pack}")
out=bench/results/tune-sweep-$name.txt
{
    echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
    echo "# build/estream tune -m $pack --mem $budgets --io-limit $limits --sweep --reps $reps --explain"
    build/estream tune -m "$pack" --mem "$budgets" --io-limit "$limits" --sweep --reps "$reps" \
        --explain -t 2
} | tee "$out"
