#!/usr/bin/env bash
# Runs every test program of a build and prints one summary line "N passed, N failed, N skipped".
# Usage: tests/run.sh [-j N] [BUILD_DIR] [PROGRAM...]   (default: build, every test_* program)
#   -j N   run up to N programs at once (default ESTREAM_TEST_JOBS, else nproc). Each program
#          writes its own log; results are reported in name order once each has finished, so a
#          failure reads the same at any -j. The slowest programs of the last run (kept in
#          BUILD_DIR/tests/.durations) start first, so the longest one does not start last.
# Counts are cmocka test cases; a program that crashes or times out counts one failure.
# ESTREAM_TEST_FAIL_FAST=1 starts no program after the first failure (tools/mutants.sh: one
# failure is enough to call a planted bug caught) and stops the ones running.
# ESTREAM_TEST_FILTER=PATTERN runs only the matching test cases of each program (tests/t.h);
# ESTREAM_TEST_SKIP=PATTERN[,PATTERN...] leaves the matching ones out.
set -u
jobs=${ESTREAM_TEST_JOBS:-$(nproc)}
if [ "${1:-}" = -j ]; then jobs=$2; shift 2; fi
case $jobs in '' | *[!0-9]* | 0) echo "tests/run.sh: -j wants a positive number, not '$jobs'" >&2; exit 2 ;; esac
build=${1:-build}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
export ESTREAM_DATA=${ESTREAM_DATA:-$root/../shared/data}
export ESTREAM_BIN=$root/$build/estream
export CMOCKA_MESSAGE_OUTPUT=stdout
tmp=$(mktemp -d "${TMPDIR:-/tmp}/estream-tests.XXXXXX")
export TMPDIR=$tmp
pids=()
stop_all() { local p; for p in "${pids[@]}"; do pkill -TERM -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done; }
trap 'stop_all; rm -rf "$tmp"' EXIT
timeout_s=${ESTREAM_TEST_TIMEOUT:-900}
fail_fast=${ESTREAM_TEST_FAIL_FAST:-0}

if [ ! -d "$ESTREAM_DATA/vocab" ]; then
    echo "tests/run.sh: shared data not found at $ESTREAM_DATA (set ESTREAM_DATA)" >&2
fi

cd "$root"
names=()
if [ $# -gt 0 ]; then
    names=("$@")
else
    for t in "$build"/tests/test_*; do [ -x "$t" ] && names+=("$(basename "$t")"); done
fi
[ ${#names[@]} -gt 0 ] || { echo "tests/run.sh: no test programs in $build/tests"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

# Start order: longest first by the last recorded duration, else by tests/durations.txt (a fresh
# build: CI's clean clone), unknown ones (new programs) first.
durations=$build/tests/.durations
[ -f "$durations" ] || : >"$durations" 2>/dev/null
order=$(for n in "${names[@]}"; do
    d=$(awk -v n="$n" '$1 == n && d == "" { d = $2 } END { print (d == "" ? 1e9 : d) }' \
        "$durations" tests/durations.txt 2>/dev/null)
    echo "${d:-1e9} $n"
done | sort -k1,1gr -k2 | awk '{print $2}')

# One program: its log, then "rc seconds" in <log>.rc when it ends.
run_one() { # name
    local log="$tmp/$1.log" start
    start=$(date +%s.%N)
    timeout "$timeout_s" "$build/tests/$1" >"$log" 2>&1
    local rc=$?
    [ -e "$tmp/stopping" ] && return # stopped by fail-fast: neither passed nor failed
    echo "$rc $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')" >"$log.rc.tmp"
    mv "$log.rc.tmp" "$log.rc"
}
failed_early() { # any finished program failed?
    local n rc
    for n in "${names[@]}"; do
        [ -f "$tmp/$n.log.rc" ] || continue
        read -r rc _ <"$tmp/$n.log.rc"
        [ "$rc" -ne 0 ] && return 0
    done
    return 1
}

running=0 stopped=0
for n in $order; do
    if [ "$fail_fast" = 1 ] && failed_early; then stopped=1; break; fi
    run_one "$n" &
    pids+=($!)
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
if [ "$fail_fast" = 1 ]; then
    # stop what still runs once one program has failed
    while [ "$running" -gt 0 ]; do
        if failed_early; then stopped=1; : >"$tmp/stopping"; stop_all; break; fi
        wait -n
        running=$((running - 1))
    done
fi
wait

passed=0 failed=0 skipped=0 failed_names=()
: >"$tmp/durations.new"
for name in "${names[@]}"; do
    log="$tmp/$name.log"
    [ -f "$log.rc" ] || continue # not started, or stopped by fail-fast
    read -r rc secs <"$log.rc"
    echo "$name $secs" >>"$tmp/durations.new"
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
    else
        echo "ok   $name: $p passed, $s skipped (${secs}s)"
    fi
    # A skipped test says which and why (the line the test printed before skipping), so an ISA
    # or a data file that is missing never passes unnoticed.
    if [ "$s" -ne 0 ]; then
        awk '/^\[  SKIPPED \] / && !/test\(s\)/ { sub(/^\[  SKIPPED \] /, ""); print "     skipped " $0 ": " (prev ~ /^\[ RUN/ ? "(no reason given)" : prev) } { prev = $0 }' "$log"
    fi
done
# Keep the durations of a whole, unfiltered run for the next run's start order.
if [ "$stopped" = 0 ] && [ -z "${ESTREAM_TEST_FILTER:-}${ESTREAM_TEST_SKIP:-}" ] && [ -d "$build/tests" ]; then
    cat "$tmp/durations.new" "$durations" 2>/dev/null | awk '!seen[$1]++' >"$tmp/d" && cp "$tmp/d" "$durations" 2>/dev/null
fi
[ "$stopped" = 0 ] || echo "fail-fast: stopped after the first failing program"
[ ${#failed_names[@]} -eq 0 ] || echo "failed programs: ${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
