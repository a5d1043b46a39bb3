#!/usr/bin/env bash
# The whole test suite: Release, ASan+UBSan, TSan (concurrent parts), the planted-bug check
# (tools/mutants.sh), bounded fuzz runs, and the AArch64 kernel tables cross-built and run under
# qemu-user (tools/cross-aarch64.sh).
# Prints "N passed, N failed" per configuration and a final total.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
total_p=0 total_f=0 status=0
run() { # name, make args...
    local name=$1; shift
    echo "=== $name ==="
    if ! make -j"$jobs" "$@" tests >/dev/null; then
        echo "$name: build failed"; make "$@" tests 2>&1 | tail -n 30; total_f=$((total_f + 1)); status=1; return
    fi
    local out
    out=$(make --no-print-directory "$@" test 2>&1 | tee /dev/stderr | tail -n 1)
    local p f
    p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
    f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
    [ -n "$p" ] || { p=0; f=1; }
    total_p=$((total_p + p)) total_f=$((total_f + f))
    [ "$f" -eq 0 ] || status=1
}
run release
run "asan+ubsan" SAN=1
# ThreadSanitizer: the thread pool and the tests that drive threads (test_io: pread workers;
# test_trace: three threads recording into one trace; test_stream: the expert loader thread and
# the residency protocol, with slow, short and failing reads; test_tune: profile runs).
echo "=== tsan ==="
if make -j"$jobs" TSAN=1 build-tsan/estream >/dev/null 2>&1; then
    for t in test_pool test_kern test_plan test_forward test_io test_trace test_stream test_tune; do
        [ -f "tests/$t.c" ] || continue
        make -j"$jobs" TSAN=1 "build-tsan/tests/$t" >/dev/null || { total_f=$((total_f + 1)); status=1; continue; }
        out=$(ESTREAM_DATA=${ESTREAM_DATA:-$PWD/../shared/data} ESTREAM_BIN=$PWD/build-tsan/estream \
              CMOCKA_MESSAGE_OUTPUT=stdout TSAN_OPTIONS=halt_on_error=1 "build-tsan/tests/$t" 2>&1)
        rc=$?
        p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | head -n 1)
        echo "tsan $t: rc=$rc ${p:-0} passed"
        if [ $rc -ne 0 ]; then echo "$out" | tail -n 40; total_f=$((total_f + 1)); status=1; else total_p=$((total_p + ${p:-0})); fi
    done
else
    echo "tsan: build failed"; total_f=$((total_f + 1)); status=1
fi
# Planted bugs (tests/mutants.txt): each must make the Release suite fail.
echo "=== mutants ==="
out=$(bash tools/mutants.sh 2>&1)
echo "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
[ -n "$p" ] || { p=0; f=1; }
total_p=$((total_p + p)) total_f=$((total_f + f))
[ "$f" -eq 0 ] || status=1
# Fuzz for a bounded time (libFuzzer, clang): each target runs ESTREAM_FUZZ_SECONDS (default 30)
# from its seed corpus and counts as one pass (no crash, leak, timeout or out-of-memory) or one
# failure.
fuzz_secs=${ESTREAM_FUZZ_SECONDS:-30}
fuzz() { # target, seed folder, extra libFuzzer flags...
    local target=$1 seeds=$2; shift 2
    local corpus log
    corpus=$(mktemp -d) log=$(mktemp)
    cp "$seeds"/* "$corpus"/ 2>/dev/null || true
    # a crashing input is kept as build-fuzz/<target>-crash-<sha1> (or -leak-, -timeout-, -oom-)
    if "build-fuzz/$target" -max_total_time="$fuzz_secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="build-fuzz/$target-" "$@" "$corpus" >"$log" 2>&1; then
        echo "fuzz $target: no crash ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs)"
        total_p=$((total_p + 1))
    else
        echo "fuzz $target: FAILED"; tail -n 40 "$log"; total_f=$((total_f + 1)); status=1
    fi
    rm -rf "$corpus" "$log"
}
echo "=== fuzz (gguf reader, model loader, tokenizer: ${fuzz_secs} s each) ==="
if make fuzz >/dev/null 2>&1; then
    fuzz fuzz_gguf tests/fuzz/corpus -dict=tests/fuzz/gguf.dict
    fuzz fuzz_model tests/fuzz/corpus-model -dict=tests/fuzz/model.dict
    fuzz fuzz_tok tests/fuzz/corpus-tok
else
    echo "fuzz: build failed"; make fuzz 2>&1 | tail -n 20; total_f=$((total_f + 1)); status=1
fi
# AArch64 (neon, i8mm tables): cross build + qemu-user, three CPU models. A skip (no cross
# toolchain or qemu, and no way to install them) counts as a failure here: CI installs them.
echo "=== aarch64 (cross build, qemu-user) ==="
out=$(bash tools/cross-aarch64.sh 2>&1)
rc=$?
echo "$out"
p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' | tail -n 1)
f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' | tail -n 1)
[ -n "$p" ] || { p=0; f=1; }           # skipped (77) or died before its summary
[ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1
total_p=$((total_p + p)) total_f=$((total_f + f))
[ "$f" -eq 0 ] || status=1
echo "all: $total_p passed, $total_f failed"
exit $status
