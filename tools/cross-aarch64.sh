#!/usr/bin/env bash
# Cross-builds estream for AArch64 with Debian's toolchain and runs the kernel, tile, element-wise,
# plan and fast-vs-reference tests under qemu-user, once per emulated CPU model, so that every
# AArch64 kernel table runs and is compared with the scalar oracle:
#   max          dotprod + i8mm  -> the asimd, neon and i8mm tables are tested
#   cortex-a76   dotprod only    -> asimd and neon run, i8mm skipped (the CPU lacks it)
#   cortex-a72   no dotprod      -> asimd only (neon and i8mm skipped)
# Correctness only: qemu-user emulates, so no speed can be measured here. A table's code is the
# same whichever model runs it (no kernel branches on the CPU's features), so its numbers are
# compared with the scalar oracle once, on `max`; the other models check what the dispatch picks
# there and that every kernel of each table it offers runs without an illegal instruction
# (test_kern's determinism cases run every weight type's product through each table, test_tiles
# every tile path), leaving out test_kern's sweeps against the scalar table (over 6 minutes) and
# test_tiles' scalar case (the scalar table's tiles, the same code on every model).
#
# Usage: tools/cross-aarch64.sh            (from anywhere; builds into build-aarch64/)
#   ESTREAM_CROSS_CPUS="max cortex-a76"    other CPU models (qemu-aarch64 -cpu help lists them)
#   ESTREAM_CROSS_TESTS="test_kern"        these tests on every model (default: all five on max,
#                                          test_kern test_tiles test_vec on the others)
#   ESTREAM_CROSS_ALL_MODELS=1             all five tests, whole, on every model (ESTREAM_CI_FULL=1)
#   ESTREAM_CROSS_JOBS=1                   build jobs and CPU models run at once (default: nproc)
#   ESTREAM_DATA                           the shared data folder (default ../shared/data)
# Installs what is missing when run as root (or with sudo) on Debian: gcc-aarch64-linux-gnu,
# qemu-user, and the arm64 libraries (dpkg --add-architecture arm64). Ends with "N passed,
# N failed" and exits 0 if all passed, 1 on any failure, 77 (never 0) when the tools are missing
# and cannot be installed: "aarch64 cross tests: SKIPPED: <why>".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build-aarch64
triplet=aarch64-linux-gnu
cc=$triplet-gcc
libdir=/usr/lib/$triplet
read -r -a cpus <<<"${ESTREAM_CROSS_CPUS:-max cortex-a76 cortex-a72}"
# `max` runs every test (it has all three tables, so test_plan and test_forward compare each with
# the reference path there); the other models run the kernel tests, which check what the
# dispatch picks on them: test_forward alone takes about 10 minutes per model under qemu.
all_tests="test_kern test_tiles test_vec test_plan test_forward"
# Left out under qemu, run natively in the release and ASan suites (tests/t.h: ESTREAM_TEST_SKIP):
# test_forward's prefill of 8,320 tokens (Llama 4 past its chunk, over 15 minutes here) and its
# hidden-256 model's 13 prefills of 769 tokens (6 minutes), whose thread and plan-capacity
# invariance is the driver's, not a table's; the tables' end-to-end bits are test_fast_every_isa's.
# Also test_plan's float-weight case (100 s of the program's 154 on max, qemu's float
# multiply-adds being slow): the plan's code is the same for every weight type (Q4_0 and Q8_0 run
# it here), the float kernels are held to scalar by test_kern, and test_forward's tiny-f32 cases
# run float experts through the plan on these tables.
export ESTREAM_TEST_SKIP=${ESTREAM_TEST_SKIP:-test_llama4_past_chunk,test_small_f32,test_small_q4_0,test_plan_f32}
read -r -a tests <<<"${ESTREAM_CROSS_TESTS:-$all_tests}"
full_model() { [ "$1" = max ] || [ "${ESTREAM_CROSS_ALL_MODELS:-0}" = 1 ]; } # cpu: runs everything
tests_for() { # cpu -> the tests that model runs
    if [ -n "${ESTREAM_CROSS_TESTS:-}" ] || full_model "$1"; then echo "${tests[*]}"
    else echo "test_kern test_tiles test_vec"; fi
}
timeout_s=${ESTREAM_TEST_TIMEOUT:-1800}

skip() {
    echo "aarch64 cross tests: SKIPPED: $*"
    exit 77
}

# ---- tools --------------------------------------------------------------------------------------
# Host packages, then the target's libraries (multiarch :arm64; libc6:arm64 also puts the
# dynamic loader at /lib/ld-linux-aarch64.so.1, so qemu-aarch64 runs the tests without -L).
host_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user pkg-config)
arm_pkgs=(libc6:arm64 libc6-dev:arm64 libcmocka-dev:arm64 liburing-dev:arm64 libpcre2-dev:arm64
          libxxhash-dev:arm64)
missing=()
for p in "${host_pkgs[@]}" "${arm_pkgs[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || skip "missing ${missing[*]} and no apt-get to install them"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo -n true 2>/dev/null || skip "missing ${missing[*]}; run as root (or with sudo) to install"
        sudo="sudo -n"
    fi
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    grep -qx arm64 <<<"$(dpkg --print-foreign-architectures)" || $sudo dpkg --add-architecture arm64 ||
        skip "dpkg --add-architecture arm64 failed"
    $sudo apt-get update -qq >/dev/null 2>&1 || skip "apt-get update failed (no package mirror?)"
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        skip "apt-get install ${missing[*]} failed"
fi
command -v "$cc" >/dev/null || skip "$cc not found"
command -v qemu-aarch64 >/dev/null || skip "qemu-aarch64 not found (package qemu-user)"
known=$(qemu-aarch64 -cpu help 2>&1)
for c in "${cpus[@]}"; do
    grep -qw -- "$c" <<<"$known" || skip "qemu-aarch64 does not know the CPU model $c"
done

# ---- build ----------------------------------------------------------------------------------------
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:/usr/share/pkgconfig
pkg-config --exists cmocka liburing libpcre2-8 libxxhash || skip "arm64 .pc files not found in $libdir/pkgconfig"
jobs=${ESTREAM_CROSS_JOBS:-$(nproc)}
bins=()
for t in "${tests[@]}"; do bins+=("$build/tests/$t"); done
echo "=== aarch64 cross build ($cc, $build/) ==="
if ! make -j"$jobs" CC="$cc" BUILD="$build" "${bins[@]}" >/dev/null; then
    echo "aarch64 cross build failed"
    make CC="$cc" BUILD="$build" "${bins[@]}" 2>&1 | tail -n 30
    echo "0 passed, 1 failed"
    exit 1
fi
grep -q "Machine:.*AArch64" <<<"$($triplet-readelf -h "$build/tests/${tests[0]}" 2>/dev/null)" || {
    echo "$build/tests/${tests[0]} is not an AArch64 program"; echo "0 passed, 1 failed"; exit 1; }

# ---- run ------------------------------------------------------------------------------------------
export ESTREAM_DATA=${ESTREAM_DATA:-$root/../shared/data}
export CMOCKA_MESSAGE_OUTPUT=stdout
tmp=$(mktemp -d "${TMPDIR:-/tmp}/estream-cross.XXXXXX")
export TMPDIR=$tmp
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0

# The tables a CPU model must test in test_kern (and must not): a table that should run but was
# skipped, or the other way round, is a failure, never a silent pass.
expect_tables() { # cpu log
    local want
    case $1 in
    max) want="asimd neon i8mm" ;;
    cortex-a76 | neoverse-n1) want="asimd neon" ;;
    cortex-a72 | cortex-a57 | cortex-a53 | cortex-a35) want="asimd" ;;
    *) return 0 ;; # an unknown model: no expectation
    esac
    local ok=0 t
    for t in asimd neon i8mm; do
        if grep -q "^\[       OK \] test_determinism_$t\$" "$2"; then
            [[ " $want " == *" $t "* ]] || { echo "    $1: the $t table ran, but this CPU model lacks it"; ok=1; }
        else
            [[ " $want " != *" $t "* ]] || { echo "    $1: the $t table was not tested"; ok=1; }
        fi
    done
    return $ok
}

# Each CPU model's programs run one after the other in the background (qemu-user is mostly one
# thread), up to $jobs models at a time; the results are then reported in order.
run_model() { # cpu
    local t
    for t in $(tests_for "$1"); do
        local log="$tmp/$t-$1.log" start
        start=$(date +%s)
        local skip=$ESTREAM_TEST_SKIP
        [ "$t" = test_kern ] && ! full_model "$1" && skip+=',test_*_vs_*'
        # the scalar table's tiles: the same code on every model, compared with rows on max
        [ "$t" = test_tiles ] && ! full_model "$1" && skip+=',test_scalar'
        ESTREAM_TEST_SKIP=$skip timeout "$timeout_s" qemu-aarch64 -cpu "$1" "$build/tests/$t" >"$log" 2>&1
        echo "$? $(($(date +%s) - start))" >"$log.rc"
    done
}
running=0
for c in "${cpus[@]}"; do
    run_model "$c" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait

for c in "${cpus[@]}"; do
    echo "=== qemu-aarch64 -cpu $c ==="
    for t in $(tests_for "$c"); do
        log="$tmp/$t-$c.log"
        read -r rc secs <"$log.rc" || { rc=1 secs=0; }
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
        s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END{print s+0}')
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1 # crashed, timed out or failed outside a test
        if [ "$t" = test_kern ] && ! expect_tables "$c" "$log" >"$log.tables"; then
            f=$((f + 1))
            cat "$log.tables"
        fi
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
        if [ "$f" -ne 0 ]; then
            echo "FAIL $t on $c (rc=$rc, ${secs}s)"
            sed 's/^/    /' "$log" | tail -n 40
        else
            echo "ok   $t on $c: $p passed, $s skipped (${secs}s)"
        fi
        # which tables ran, and why tests were skipped
        grep -E "^(asimd|neon|i8mm) vs scalar, q4_0|^(asimd|neon|i8mm|scalar): [0-9]+ tiled|^cpu: " "$log" |
            sed 's/^/     /'
        [ "$t" = test_kern ] && sed -n 's/^\[       OK \] test_determinism_\([a-z0-9]*\)$/     \1: every weight type runs, bits equal across splits/p' "$log"
        # (cmocka lists each skipped test twice: inline, then in its summary; the first counts)
        awk '/^\[  SKIPPED \] / && !/test\(s\)/ { sub(/^\[  SKIPPED \] /, ""); if (!seen[$0]++) print "     skipped " $0 ": " (prev ~ /^\[ RUN/ ? "(no reason given)" : prev) } { prev = $0 }' "$log"
    done
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
