#!/usr/bin/env bash
# The whole test suite: Release, ASan+UBSan, the OpenAI client check (tools/openai-check.sh),
# lm-evaluation-harness against the server (tools/lmeval-check.sh),
# the installed library and its examples (tools/install-check.sh), the Python package
# (tools/python-check.sh), Ray Data (tools/ray-check.sh), two servers behind nginx
# (tools/replicas-check.sh), the chat templates against Python's jinja2 (tools/chat-check.sh), TSan
# (concurrent parts), the planted-bug check
# (tools/mutants.sh), bounded fuzz runs, and the AArch64 kernel tables cross-built and run under
# qemu-user (tools/cross-aarch64.sh).
# Prints "N passed, N failed" per stage, a table of the stages' wall times, and a final total.
#
# The AArch64 stage (mostly single-threaded qemu) runs in the background beside the others, and
# each stage runs its programs in parallel (tests/run.sh -j), so the machine's cores stay busy;
# every stage's output is still printed whole and in order.
# ESTREAM_CI_FULL=1 runs the full matrix: every AArch64 test on every qemu CPU model (the default
# runs test_plan and test_forward on `max` only, the kernel tests on all three), and each
# mutant's whole suite unstopped instead of its kill tests (every program that catches it, the
# listing tests/README.md's table comes from).
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
full=${ESTREAM_CI_FULL:-0}
total_p=0 total_f=0 status=0
stage_rows=()
t_all=$SECONDS
stage_begin() { stage_name=$1; stage_t0=$SECONDS; stage_p0=$total_p; stage_f0=$total_f; echo "=== $1 ==="; }
stage_end() {
    local s=$((SECONDS - stage_t0))
    stage_rows+=("$(printf '%-22s %5d:%02d  %5d passed  %3d failed' "$stage_name" $((s / 60)) $((s % 60)) \
        $((total_p - stage_p0)) $((total_f - stage_f0)))")
    echo "--- $stage_name: $((s / 60)) min $((s % 60)) s"
}
add_counts() { # "N passed, N failed" line -> totals (no line: one failure)
    local p f
    p=$(echo "$1" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' | tail -n 1)
    f=$(echo "$1" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' | tail -n 1)
    [ -n "$p" ] || { p=0; f=1; }
    total_p=$((total_p + p)) total_f=$((total_f + f))
    [ "$f" -eq 0 ] || status=1
}

# AArch64 (neon, i8mm tables): cross build + qemu-user, in the background from the start. A skip
# (no cross toolchain or qemu, and no way to install them) counts as a failure here: CI installs
# them.
cross_log=$(mktemp) cross_rc=$(mktemp) stage_log=$(mktemp)
cross_t0=$SECONDS
# its exit status, then the second it ended at (SECONDS counts on in the subshell)
(ESTREAM_CROSS_ALL_MODELS=$full bash tools/cross-aarch64.sh >"$cross_log" 2>&1; echo "$? $SECONDS" >"$cross_rc") &
cross_pid=$!

suite() { # name, make args...
    local name=$1; shift
    stage_begin "$name"
    if ! make -j"$jobs" "$@" tests >/dev/null; then
        echo "$name: build failed"; make "$@" tests 2>&1 | tail -n 30; total_f=$((total_f + 1)); status=1
        stage_end; return 1
    fi
    local build out f0=$total_f
    build=$(make --no-print-directory -s "$@" print-build)
    # tee into a file of our own: `tee /dev/stderr` reopens a log file that stderr points at and
    # truncates it (bash .ci/run >ci.log 2>&1 kept only the last stages).
    bash tests/run.sh -j "$jobs" "$build" 2>&1 | tee "$stage_log"
    out=$(tail -n 1 "$stage_log")
    add_counts "$out"
    stage_end
    [ "$total_f" -eq "$f0" ]
}
# The folders of src/ are floors: every include goes down, and the CLI includes only estream.h.
stage_begin layers
if bash tools/check-layers.sh; then add_counts "1 passed, 0 failed"; else add_counts "0 passed, 1 failed"; fi
stage_end
# The docs name only paths and es_ functions that exist.
stage_begin docs
if bash tools/check-docs.sh; then add_counts "1 passed, 0 failed"; else add_counts "0 passed, 1 failed"; fi
stage_end
release_ok=0
suite release && release_ok=1
# No two files of src/ call each other in a loop (the call graph from the Release objects; the
# allowed loops are listed in the script with their reasons).
stage_begin calls
if bash tools/check-calls.sh build; then add_counts "1 passed, 0 failed"; else add_counts "0 passed, 1 failed"; fi
stage_end
suite "asan+ubsan" SAN=1

# A check script as a stage: its last line "LABEL: N passed, N failed" (or "LABEL: N checks
# passed") gives the counts; none, or a non-zero exit, is a failure with its output's tail.
check_stage() { # stage name, label, command...
    local name=$1 label=$2 out rc=0 counts
    shift 2
    stage_begin "$name"
    out=$("$@" 2>&1) || rc=$?
    counts=$(echo "$out" | sed -n "s/^$label: \([0-9]*\) checks passed\$/\1 passed, 0 failed/p; s/^$label: \([0-9]* passed, [0-9]* failed\)\$/\1/p" | tail -n 1)
    if [ "$rc" -eq 0 ] && [ -n "$counts" ]; then echo "$out" | tail -n 2; add_counts "$counts"
    else echo "$out" | tail -n 30; f0=$total_f; add_counts "$counts"; [ "$total_f" -gt "$f0" ] || { total_f=$((total_f + 1)); status=1; }; fi
    stage_end
}
# The README's first command, as a newcomer runs it: a fresh TMPDIR, so the model is synthesized
# and packed anew; it checks that the streamed prefill gives the resident run's next tokens under
# its budget.
demo_tmp=$(mktemp -d)
check_stage demo demo env TMPDIR="$demo_tmp" bash tools/demo.sh
rm -rf "$demo_tmp"
# The benchmarks build, and bench_amx_bound's quick cases run (its tdpbssd count is checked).
check_stage bench bench bash tools/bench-check.sh build
# The README's examples, run as written on the synthetic model they make.
check_stage readme readme bash tools/readme-check.sh build
# The official OpenAI Python client against estream serve (a cached virtualenv from PyPI, every
# number equal to estream score / estream embed).
check_stage "openai client" "openai client" bash tools/openai-check.sh build
# lm-evaluation-harness (PyPI, cached virtualenv) against estream serve on a model that adds
# BOS, tasks unedited, both tokenized_requests modes: accuracies equal to llama.cpp's log-probs.
check_stage lmeval lmeval bash tools/lmeval-check.sh build
# estream installed: the shared library's symbols, make install/uninstall, the examples built
# with pkg-config against a scratch prefix and equal to the CLI.
check_stage install install bash tools/install-check.sh build
# The Python package: pip install ./python in a fresh virtualenv, its pytest suite against the
# CLI's numbers.
check_stage "python package" "python package" bash tools/python-check.sh build
# estream.ray.Scorer under Ray Data (pinned ray[data] from PyPI, cached virtualenv): two actors
# on a local Ray cluster, every row equal to estream score --on-error skip's line.
check_stage "ray data" ray bash tools/ray-check.sh build
# Two estream serve replicas behind nginx (Debian's nginx-light, installed when missing) under
# the OpenAI client: every answer equal to one server's, both replicas used, a replica stopped
# mid-run with no request lost.
check_stage replicas replicas bash tools/replicas-check.sh build
# Chat templates against Python's jinja2 in a cached virtualenv (jinja2 pinned): the committed
# expectations made again and compared, and estream's renderer held to them byte for byte.
check_stage "chat templates" "chat check" bash tools/chat-check.sh build

# ThreadSanitizer: the thread pool and the tests that drive threads (test_kern: a product split
# over pool threads, with the amx table's per-thread tile state on its emulation; test_io: pread
# workers; test_trace: three threads recording into one trace; test_stream: the expert loader
# thread and the residency protocol, with slow, short and failing reads; test_tune: profile runs;
# test_budget: a budgeted prefill's per-thread embedding-row reads;
# test_batch:
# batches on 1-3 threads, the head's per-row pool jobs, streamed batches and their cancelling;
# test_serve: the server binary built with TSan, its connection threads, executor and signal
# thread under concurrent clients, cancels and shutdowns; test_chat: one compiled chat template
# rendered by four threads at once; a report fails the test).
stage_begin tsan
tsan_tests=()
for t in test_pool test_kern test_plan test_forward test_io test_trace test_stream test_tune test_batch test_profile test_serve test_chat test_budget; do
    [ -f "tests/$t.c" ] && tsan_tests+=("$t")
done
# Programs whose threads are in some cases only, run with those: test_kern's test_threads* (a
# product split over the pool; its other cases check the tables' numbers on one thread, already
# run in two suites, and took five of this stage's nine minutes under TSan); test_budget's
# budgeted prefill on two threads that read embedding rows into per-thread buffers.
declare -A tsan_filter=([test_kern]='test_threads*' [test_budget]='test_embedding_not_mapped')
if make -j"$jobs" TSAN=1 build-tsan/estream "${tsan_tests[@]/#/build-tsan/tests/}" >/dev/null 2>&1; then
    for t in "${!tsan_filter[@]}"; do
        TSAN_OPTIONS=halt_on_error=1 ESTREAM_TEST_FILTER="${tsan_filter[$t]}" bash tests/run.sh -j "$jobs" build-tsan "$t" 2>&1 |
            sed 's/^/tsan /' | tee "$stage_log"
        out=$(tail -n 1 "$stage_log")
        add_counts "${out#tsan }"
    done
    others=(); for t in "${tsan_tests[@]}"; do [ -n "${tsan_filter[$t]:-}" ] || others+=("$t"); done
    # Left out, as numerics whose threads the other cases drive in a fraction of the time (each
    # over 40 s under TSan): Llama 4's tests (an 8-layer model, one prefill of 8,320 tokens),
    # test_forward's hidden-256 prefills (their reference path is single-threaded), the amx
    # table's batches and wide plan chunks on its emulation (its per-thread tile state is
    # test_kern's test_threads_amx and test_forward's test_amx_bit_identical here); and the batch
    # invariance of every family but those whose layers run a pool job of their own: OLMoE (the
    # attention, the operator, streaming and the pack), DeepSeek-V2's MLA, LFM2's convolutions,
    # Qwen2-MoE's shared-expert gate, gpt-oss's sinks and windows. The others (10-20 s each
    # under TSan, a new family's too) run the same jobs with other numbers.
    tsan_keep=' test_invariance_olmoe test_invariance_deepseek2 test_invariance_lfm2moe'
    tsan_keep+=' test_invariance_qwen2moe test_invariance_gptoss '
    tsan_skip='*llama4*,test_small_f32,test_small_q4_0,test_amx_batches,test_plan_amx_wide_chunks'
    for t in $(grep -oE 'cmocka_unit_test[a-z_]*\(test_invariance_[a-z0-9_]+' tests/test_batch.c | sed 's/.*(//'); do
        [[ $tsan_keep == *" $t "* ]] || tsan_skip+=",$t"
    done
    for t in $tsan_keep; do # a kept case renamed away would leave its family out unnoticed
        grep -q "($t," tests/test_batch.c || { echo "tsan: $t, kept above, is not in test_batch.c"; add_counts "0 passed, 1 failed"; }
    done
    TSAN_OPTIONS=halt_on_error=1 ESTREAM_TEST_SKIP="$tsan_skip" bash tests/run.sh -j "$jobs" build-tsan "${others[@]}" 2>&1 |
        sed 's/^/tsan /' | tee "$stage_log"
    out=$(tail -n 1 "$stage_log")
    add_counts "${out#tsan }"
else
    echo "tsan: build failed"; total_f=$((total_f + 1)); status=1
fi
stage_end

# Planted bugs (tests/mutants.txt): each must make a test fail. The scratch copy reuses the
# Release build; the unmutated run of the kill tests is skipped when the Release suite passed.
stage_begin mutants
base=(); [ "$release_ok" = 1 ] && base=(--no-baseline)
out=$(ESTREAM_MUTANTS_FULL=$full bash tools/mutants.sh "${base[@]}" 2>&1)
echo "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
add_counts "$out"
stage_end

# Fuzz for a bounded time (libFuzzer, clang): each target runs ESTREAM_FUZZ_SECONDS (default 30)
# from its seed corpus and counts as one pass (no crash, leak, timeout or out-of-memory) or one
# failure. The targets run side by side, $jobs at a time.
fuzz_secs=${ESTREAM_FUZZ_SECONDS:-30}
fuzz_one() { # target, seed folder, extra libFuzzer flags... -> prints one result line, then the log on failure
    local target=$1 seeds=$2; shift 2
    local corpus log
    corpus=$(mktemp -d) log=$(mktemp)
    cp "$seeds"/* "$corpus"/ 2>/dev/null || true
    # a crashing input is kept as build-fuzz/<target>-crash-<sha1> (or -leak-, -timeout-, -oom-)
    if "build-fuzz/$target" -max_total_time="$fuzz_secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="build-fuzz/$target-" "$@" "$corpus" >"$log" 2>&1; then
        echo "fuzz $target: no crash ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs)"
    else
        echo "fuzz $target: FAILED"; tail -n 40 "$log"
    fi
    rm -rf "$corpus" "$log"
}
stage_begin "fuzz (${fuzz_secs} s each)"
if make -j"$jobs" fuzz >/dev/null 2>&1; then
    # wait on the fuzz runs by pid: a bare `wait` (or `wait -n`) would also wait on the AArch64
    # stage running in the background, and its time would be counted here
    fuzz_out=$(mktemp -d) fuzz_pids=() i=0
    for spec in "fuzz_gguf tests/fuzz/corpus -dict=tests/fuzz/gguf.dict" \
                "fuzz_model tests/fuzz/corpus-model -dict=tests/fuzz/model.dict" \
                "fuzz_tok tests/fuzz/corpus-tok" \
                "fuzz_chat tests/fuzz/corpus-chat -dict=tests/fuzz/chat.dict" \
                "fuzz_serve tests/fuzz/corpus-serve -dict=tests/fuzz/serve.dict" \
                "fuzz_cgroup tests/fuzz/corpus-cgroup"; do
        i=$((i + 1))
        # shellcheck disable=SC2086 # the spec is target, seeds and flags
        fuzz_one $spec >"$fuzz_out/$i" &
        fuzz_pids+=($!)
        # at most $jobs at once (the runs take the same time: the oldest ends first)
        if [ "${#fuzz_pids[@]}" -ge "$jobs" ]; then wait "${fuzz_pids[0]}"; fuzz_pids=("${fuzz_pids[@]:1}"); fi
    done
    wait "${fuzz_pids[@]}"
    for i in $(seq "$i"); do
        cat "$fuzz_out/$i"
        if grep -q ': no crash' "$fuzz_out/$i"; then total_p=$((total_p + 1)); else total_f=$((total_f + 1)); status=1; fi
    done
    rm -rf "$fuzz_out"
else
    echo "fuzz: build failed"; make fuzz 2>&1 | tail -n 20; total_f=$((total_f + 1)); status=1
fi
stage_end

stage_begin "aarch64 (qemu-user)"
echo "(started with the release stage; waiting for it)"
wait "$cross_pid"
cat "$cross_log"
read -r rc cross_end <"$cross_rc" 2>/dev/null || { rc=1 cross_end=$SECONDS; }
out=$(tail -n 5 "$cross_log")
f0=$total_f
add_counts "$out"
# a non-zero exit with no failure counted (a skip, 77, or a death after the summary) is one
if [ "$rc" -ne 0 ] && [ "$total_f" -eq "$f0" ]; then status=1; total_f=$((total_f + 1)); fi
rm -f "$cross_log" "$cross_rc" "$stage_log"
stage_end
s=$((${cross_end:-$SECONDS} - cross_t0))
stage_rows[-1]="${stage_rows[-1]}  (ran $((s / 60)):$(printf %02d $((s % 60))) from the start, beside the others)"

s=$((SECONDS - t_all))
echo "=== stage times ($(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')) ==="
printf '%-22s %8s\n' stage "min:s"
for r in "${stage_rows[@]}"; do echo "$r"; done
printf '%-22s %5d:%02d\n' "all" $((s / 60)) $((s % 60))
echo "all: $total_p passed, $total_f failed"
exit $status
