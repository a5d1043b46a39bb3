#!/usr/bin/env bash
# The benchmarks build (make bench: they are never run by the tests, so nothing else would see
# one stop compiling), and bench_amx_bound runs its quick cases once: its count of the amx
# table's tdpbssd must equal what the tiling gives (it exits 1 otherwise). On a CPU without
# AVX-512, or with a usable AMX, it says so and measures nothing; that passes.
# Prints "bench: N passed, N failed".
# usage: tools/bench-check.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
pass=0 fail=0
if make -s -j"$(nproc)" BUILD="$build" bench >/tmp/bench-check.$$ 2>&1; then
    pass=$((pass + 1))
else
    tail -n 30 /tmp/bench-check.$$; fail=$((fail + 1))
fi
rm -f /tmp/bench-check.$$
if [ -x "$build/bench/bench_amx_bound" ]; then
    if "$build/bench/bench_amx_bound" --quick --reps 1; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
fi
echo "bench: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
