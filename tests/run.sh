#!/usr/bin/env bash
# Runs every test program of a build and prints one summary line "N passed, N failed, N skipped".
# Usage: tests/run.sh [BUILD_DIR]   (default: build)
# Counts are cmocka test cases; a program that crashes or times out counts one failure.
# ESTREAM_TEST_FAIL_FAST=1 stops after the first failing program (tools/mutants.sh: one failure
# is enough to call a planted bug caught, and the rest of the suite would only cost time).
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export ESTREAM_DATA=${ESTREAM_DATA:-$root/../shared/data}
export ESTREAM_BIN=$root/$build/estream
export CMOCKA_MESSAGE_OUTPUT=stdout
tmp=$(mktemp -d "${TMPDIR:-/tmp}/estream-tests.XXXXXX")
export TMPDIR=$tmp
trap 'rm -rf "$tmp"' EXIT
timeout_s=${ESTREAM_TEST_TIMEOUT:-900}

if [ ! -d "$ESTREAM_DATA/vocab" ]; then
    echo "tests/run.sh: shared data not found at $ESTREAM_DATA (set ESTREAM_DATA)" >&2
fi

passed=0 failed=0 skipped=0 failed_names=()
cd "$root"
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    log="$tmp/$name.log"
    start=$(date +%s.%N)
    timeout "$timeout_s" "$t" >"$log" 2>&1
    rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1   # crashed, timed out or failed outside a test case
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        echo "FAIL $name (rc=$rc, ${secs}s)"
        sed 's/^/    /' "$log" | tail -n 40
        [ "${ESTREAM_TEST_FAIL_FAST:-0}" = 1 ] && break
    else
        echo "ok   $name: $p passed, $s skipped (${secs}s)"
    fi
    # A skipped test says which and why (the line the test printed before skipping), so an ISA
    # or a data file that is missing never passes unnoticed.
    if [ "$s" -ne 0 ]; then
        awk '/^\[  SKIPPED \] / && !/test\(s\)/ { sub(/^\[  SKIPPED \] /, ""); print "     skipped " $0 ": " (prev ~ /^\[ RUN/ ? "(no reason given)" : prev) } { prev = $0 }' "$log"
    fi
done
[ ${#failed_names[@]} -eq 0 ] || echo "failed programs: ${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
