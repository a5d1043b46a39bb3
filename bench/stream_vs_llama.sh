#!/usr/bin/env bash
# Prompt processing under a memory budget: estream (--mem BUDGET, from the pack and from the
# GGUF) against llama.cpp (mmap, repacking off) held to the same budget by a memory cgroup.
#
# usage: bench/stream_vs_llama.sh LLAMA_BENCH [MODEL] [BUDGETS] [LENGTHS] [THREADS] [ROUNDS]
#   LLAMA_BENCH  path of a locally built llama-bench (llama.cpp is never part of this tree)
#   MODEL        GGUF file (default: $TMPDIR/estream-olmoe-1b-7b-q4_0.gguf, written by
#                `estream synth --preset olmoe-1b-7b --type q4_0` if missing); estream runs
#                from MODEL's pack (MODEL with .gguf -> .pack, written by `estream pack` if
#                missing) and from the GGUF itself, both reported
#   BUDGETS      comma list of memory budgets, suffix K, M or G (powers of 1024) or bytes
#                (not estream's N% form: the cgroup needs bytes); default 2G,1G,600M
#   LENGTHS      default 1024,2048;  THREADS default 2;  ROUNDS default 3
# environment:
#   ESTREAM            estream binary to use as is (default: build/estream, made first)
#   LLAMA_TIMEOUT      seconds one llama-bench run may take (default 3600; "timeout" if over)
#   ESTREAM_BENCH_FLAGS more flags for `estream bench` (e.g. --no-bounds, --policy on-demand)
#   ESTREAM_CGROUP=1   run estream inside the same memory cgroup too (a check that it keeps
#                      to its budget, page cache included)
#   CGROUP_PARENT      memory cgroup (v1) under which the per-run cgroup is made (default:
#                      this shell's own memory cgroup, so that the runs stay accounted where
#                      the caller is)
#   NO_PACK=1          estream from the GGUF only (no pack written or run: for models whose
#                      pack would not fit on the disk beside them); the pack columns show "-"
#   LLAMA_RESIDENT=0   skip llama.cpp's run without a limit (a model larger than the machine's
#                      memory pages from disk there too, for as long as LLAMA_TIMEOUT allows)
#   ESTREAM_REPS       repetitions per `estream bench` run (default 3; its median is used)
#   LLAMA_REPS         llama-bench repetitions per run (default 3); LLAMA_NO_WARMUP=1 adds
#                      --no-warmup (for models that page from disk, where llama-bench's warmup
#                      run costs as much as a measured one and warms nothing the limit keeps)
#
# Method: per round, per budget, in this order: estream from the pack, estream from the GGUF
# (both `estream bench --mem BUDGET`), then llama-bench in a fresh memory cgroup (v1) whose
# limit is the budget (memory.limit_in_bytes, and memory.memsw.limit_in_bytes where swap is
# accounted, so it cannot swap around the limit). The cgroup limit includes the page cache:
# that is the point, llama.cpp's mmap'd weights have to fit in it too (clean pages are
# reclaimed and read again, so llama.cpp is slowed down rather than killed unless its
# anonymous memory alone exceeds the budget). No global drop_caches (the machine is shared);
# but a page is charged to the cgroup that first read it, and stays charged there: model pages
# already in the page cache (from the resident run, from estream, from another user) would be
# free for the limited llama-bench and the limit would hold nothing. So before every run the
# model file's own pages are dropped (posix_fadvise DONTNEED through `dd iflag=nocache`, this
# file only; pages another process has mapped stay, and are reported).
# A llama-bench run that the kernel OOM-kills inside its cgroup is reported as "killed"
# (memory.oom_control's oom_kill count, else exit status 137 with the limit hit). Rounds
# interleave the engines, as in bench/compare_llama.sh, because the two vCPUs of our machines
# sometimes share one core for minutes. One llama-bench run without any limit ("resident",
# whole model in the page cache) gives context. The tables report medians over rounds and
# the median of the per-round ratios estream/llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/stream_vs_llama.sh LLAMA_BENCH [MODEL] [BUDGETS] [LENGTHS] [THREADS] [ROUNDS]"
llama_bench=${1:?$usage}
model=${2:-${TMPDIR:-/tmp}/estream-olmoe-1b-7b-q4_0.gguf}
budgets=${3:-2G,1G,600M}
lengths=${4:-1024,2048}
threads=${5:-2}
rounds=${6:-3}
llama_timeout=${LLAMA_TIMEOUT:-3600}
[ -x "$llama_bench" ] || { echo "stream_vs_llama: $llama_bench is not executable" >&2; exit 1; }
out=$(mktemp -d)
bench_name=stream_vs_llama
# shellcheck source=bench/cgroup.sh
. bench/cgroup.sh

if [ -n "${ESTREAM:-}" ]; then
    estream=$ESTREAM
else
    make -j"$(nproc)" build/estream >/dev/null
    estream=build/estream
fi

IFS=, read -r -a budget_list <<<"$budgets"
budget_bytes=()
for b in "${budget_list[@]}"; do
    budget_bytes+=("$(to_bytes "$b")") || { echo "stream_vs_llama: bad budget '$b'" >&2; exit 1; }
done

if [ ! -f "$model" ]; then
    echo "writing $model (estream synth --preset olmoe-1b-7b --type q4_0)" >&2
    "$estream" synth --preset olmoe-1b-7b --type q4_0 --seed 1 -o "$model"
fi
case $model in *.gguf) pack=${model%.gguf}.pack ;; *) pack=$model.pack ;; esac
no_pack=${NO_PACK:-0}
[ "$no_pack" = 1 ] && pack="(none: NO_PACK=1)"
if [ "$no_pack" != 1 ] && [ ! -f "$pack" ]; then
    echo "writing $pack (estream pack)" >&2
    "$estream" pack "$model" -o "$pack"
fi

# --- llama-bench flags ---------------------------------------------------------------------
llama_help=$("$llama_bench" --help 2>&1 || true)
ll_flags=(-m "$model" -p "$lengths" -n 0 -t "$threads" -r "${LLAMA_REPS:-3}" -o jsonl -v)
[ "${LLAMA_NO_WARMUP:-0}" = 1 ] && ll_flags+=(--no-warmup)
if grep -q -- '--no-repack <0|1>' <<<"$llama_help"; then ll_flags+=(--no-repack 1); repack_flag="--no-repack 1"
elif grep -q -- '--no-repack' <<<"$llama_help"; then ll_flags+=(--no-repack); repack_flag="--no-repack"
elif grep -q -- '--repack <0|1>' <<<"$llama_help"; then ll_flags+=(--repack 0); repack_flag="--repack 0"
else repack_flag=""
fi
if grep -q -- '--load-mode' <<<"$llama_help"; then ll_flags+=(-lm mmap)
elif grep -q -- '--mmap' <<<"$llama_help"; then ll_flags+=(-mmp 1)
fi
# whether the weights were repacked, from the loader's log (-v): a CPU_REPACK buffer
repack_seen() {
    if grep -q 'CPU_REPACK model buffer' "$1"; then echo on
    elif grep -q 'model buffer size' "$1"; then echo off
    else echo "?"
    fi
}

run_estream() { # run_estream FILE BUDGET BYTES OUT ERR: estream bench --mem BUDGET on FILE
    local c=("$estream" bench -m "$1" -p "$lengths" -t "$threads" -r "${ESTREAM_REPS:-3}" --mem "$2" --json) st
    # shellcheck disable=SC2206  # (split on purpose)
    c+=(${ESTREAM_BENCH_FLAGS:-})
    drop_file_cache "$1"
    if [ "${ESTREAM_CGROUP:-0}" = 1 ] && [ "$cgroup_ok" = 1 ]; then
        cg_run "$3" "$4" "$5" "${c[@]}"
        echo "$cg_rc $(llama_status) $cg_max" >"$4.status"
    else
        local rc=0
        "${c[@]}" >"$4" 2>"$5" || rc=$?
        echo "$rc - -" >"$4.status"
    fi
    read -r st _ <"$4.status"
    if [ "$st" != 0 ] || grep -q '"error"' "$4"; then
        echo "  estream failed on $1 --mem $2: $(grep -m1 '"error"' "$4" || tail -n1 "$5")" >&2
    fi
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs," \
     "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo);" \
     "estream kernels: $("$estream" bench -m "$model" -p 1 -r 1 --json 2>/dev/null | sed -n 's/.*"kernels": "\([a-z0-9]*\)".*/\1/p')"
echo "model: $model ($(du -h "$model" | cut -f1)), pack $pack; threads $threads; lengths $lengths;" \
     "budgets $budgets; $rounds interleaved rounds"
echo "llama.cpp: $llama_bench ${ll_flags[*]:2}"
[ -n "$repack_flag" ] || echo "  (this llama-bench has no repack switch: repacking is whatever its build does;" \
                             "build ggml with -DGGML_CPU_REPACK=OFF to turn it off; the table says which was seen)"
if [ "$cgroup_ok" = 1 ]; then
    echo "cgroup: $cg_parent/estream-bench-$$ (v1 memory$([ -f "$cg_root/memory.memsw.limit_in_bytes" ] && echo ', swap accounted'))"
else
    echo "cgroup: unavailable: $cgroup_why; llama.cpp runs only without a limit (resident)"
fi

# llama.cpp without a limit, once, for context
rc=0
if [ "${LLAMA_RESIDENT:-1}" != 0 ]; then
    timeout --foreground --kill-after=10 "$llama_timeout" "$llama_bench" "${ll_flags[@]}" >"$out/llres" 2>"$out/llres.err" || rc=$?
    [ "$rc" = 0 ] || echo "  llama-bench (resident) failed with status $rc: $(tail -n1 "$out/llres.err")" >&2
    repack_seen "$out/llres.err" >"$out/llres.repack"
    echo "resident llama.cpp done" >&2
else
    : >"$out/llres"; : >"$out/llres.repack"
fi

for r in $(seq 1 "$rounds"); do
    for i in "${!budget_list[@]}"; do
        b=${budget_list[$i]} bytes=${budget_bytes[$i]}
        [ "$no_pack" = 1 ] || run_estream "$pack" "$b" "$bytes" "$out/espack.$i.$r" "$out/espack.$i.$r.err"
        run_estream "$model" "$b" "$bytes" "$out/esgguf.$i.$r" "$out/esgguf.$i.$r.err"
        if [ "$cgroup_ok" = 1 ]; then
            drop_file_cache "$model"
            pre=$(cached_bytes "$model")
            cg_run "$bytes" "$out/ll.$i.$r" "$out/ll.$i.$r.err" \
                timeout --foreground --kill-after=10 "$llama_timeout" "$llama_bench" "${ll_flags[@]}"
            st=$(llama_status)
            # the model's pages that another process read are charged to that process's cgroup,
            # not to ours: cached before the run, or more cached after it than the limit let this
            # run keep, means the limit did not hold all of the model ("shared" in the table)
            post=$(cached_bytes "$model") shared=0
            if [ "$pre" -gt 67108864 ] || [ "$post" -gt $((bytes + 67108864)) ]; then shared=1; fi
            echo "$st $cg_max $cg_failcnt $(repack_seen "$out/ll.$i.$r.err") $shared" >"$out/ll.$i.$r.status"
            [ "$shared" = 0 ] || echo "  llama-bench under $b (round $r): another process had the model cached" \
                                      "($((pre >> 20)) MiB before, $((post >> 20)) MiB after): not held to the budget" >&2
            case $st in
                ok) ;;
                killed) echo "  llama-bench OOM-killed under $b (round $r)" >&2 ;;
                *) echo "  llama-bench under $b (round $r): $st: $(tail -n1 "$out/ll.$i.$r.err")" >&2 ;;
            esac
        fi
        echo "round $r budget $b done" >&2
    done
done

# --- tables (awk only: no Python needed) ---------------------------------------------------
files=("$out"/llres "$out"/llres.repack)
for f in "$out"/espack.* "$out"/esgguf.* "$out"/ll.*; do
    case $f in *.err) ;; *) [ ! -e "$f" ] || files+=("$f") ;; esac
done
awk -v rounds="$rounds" -v budgets="$budgets" -v bbytes="${budget_bytes[*]}" -v cgok="$cgroup_ok" -v nopack="$no_pack" '
function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function num(key,   s) {   # the number after "key": in $0, or "" if absent
    if (!match($0, "\"" key "\": *-?[0-9.eE+-]+")) return ""
    s = substr($0, RSTART, RLENGTH); sub(/.*: */, "", s); return s
}
function str(key,   s) {   # the string after "key": in $0, or "" if absent
    if (!match($0, "\"" key "\": *\"[^\"]*\"")) return ""
    s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: *"/, "", s); sub(/"$/, "", s); return s
}
function mib(x) { return x == "" ? "-" : sprintf("%.0f", x / 1048576) }
BEGIN { nb = split(budgets, bname, ","); split(bbytes, bsize, " ") }
{   f = FILENAME; sub(/.*\//, "", f); nf = split(f, p, ".")   # kind.budget.round[.status]
    kind = p[1]; i = p[2] + 1; r = p[3]
}
kind == "llres" && nf == 1 {
    n = num("n_prompt"); v = num("avg_ts"); if (n != "" && v != "") { res[n] = v; lens[n] = 1 }
    next
}
kind == "llres" && p[2] == "repack" { resrepack = $1; next }
(kind == "espack" || kind == "esgguf") && nf == 3 {
    n = num("n_prompt"); if (n == "") next
    lens[n] = 1
    if ($0 ~ /"error"/) { esfail[kind, i, n]++; next }
    es[kind, i, n, r] = num("tokens_per_second")
    m = num("peak_rss_bytes"); if (m != "" && m + 0 > rss[kind, i, n] + 0) rss[kind, i, n] = m
    bub[kind, i, n, r] = num("bubble_rate")
    if (kind == "espack" || !(i in plan)) plan[i] = sprintf("budget_bytes %s, groups %s, banks %s, qd %s, policy %s, io %s, read %s MiB",
        num("budget_bytes"), num("groups"), num("banks"), num("qd"), str("policy"), str("io_backend"), mib(num("bytes_read")))
    next
}
(kind == "espack" || kind == "esgguf") && nf == 4 { if ($1 != 0) esrc[kind, i, r] = $1; if ($3 != "-") { if ($3 + 0 > escg[kind, i] + 0) escg[kind, i] = $3 }; next }
kind == "ll" && nf == 3 {
    n = num("n_prompt"); v = num("avg_ts"); if (n != "" && v != "") { ll[i, n, r] = v; lens[n] = 1 }
    next
}
kind == "ll" && nf == 4 { llst[i, r] = $1; if ($2 + 0 > llmax[i] + 0) llmax[i] = $2; llrepack[i] = $4; if ($5 == 1) { llsh[i, r] = 1; nshared++ }; next }
END {
    for (n in lens) order[++k] = n + 0
    for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (order[b] < order[a]) { t = order[a]; order[a] = order[b]; order[b] = t }
    printf "\nllama.cpp resident (no limit, whole model in the page cache; repacking %s):\n", resrepack == "" ? "?" : resrepack
    for (a = 1; a <= k; a++) printf "  n_prompt %-6d %s tok/s\n", order[a], (order[a] in res) ? sprintf("%.1f", res[order[a]]) : "-"
    printf "\n%-7s %-8s %10s %8s %6s %10s %8s %10s %-14s %9s %9s\n", "budget", "n_prompt", "pack tok/s", "pack RSS", "bubble",
           "gguf tok/s", "gguf RSS", "llama tok/s", "llama runs", "pack/ll", "gguf/ll"
    printf "%-7s %-8s %10s %8s %6s %10s %8s %10s %-14s %9s %9s\n", "", "", "(estream)", "MiB", "", "(estream)", "MiB",
           "(cgroup)", "", "median", "median"
    for (i = 1; i <= nb; i++) for (a = 1; a <= k; a++) {
        n = order[a]
        split("", ep); split("", eg); split("", eb); split("", lv); split("", rp); split("", rg)
        nep = neg = neb = nlv = nrp = nrg = 0; nok = nkill = nother = nsh = 0; other = ""
        for (r = 1; r <= rounds; r++) {
            if (("espack", i, n, r) in es) ep[++nep] = es["espack", i, n, r]
            if (("esgguf", i, n, r) in es) eg[++neg] = es["esgguf", i, n, r]
            if (("espack", i, n, r) in bub && bub["espack", i, n, r] != "") eb[++neb] = bub["espack", i, n, r]
            if ((i, n, r) in ll) { lv[++nlv] = ll[i, n, r]; nok++; if ((i, r) in llsh) nsh++ }
            else if (llst[i, r] == "killed") nkill++
            else if ((i, r) in llst) { nother++; other = llst[i, r] }
            if (((i, n, r) in ll) && ll[i, n, r] > 0) {
                if (("espack", i, n, r) in es) rp[++nrp] = es["espack", i, n, r] / ll[i, n, r]
                if (("esgguf", i, n, r) in es) rg[++nrg] = es["esgguf", i, n, r] / ll[i, n, r]
            }
        }
        runs = !cgok ? "no cgroup" : nok == rounds ? "ok" : nkill == rounds ? "killed" : \
               sprintf("%dok %dkill%s", nok, nkill, nother ? " " nother other : "")
        if (nsh) runs = runs sprintf(" %dshared", nsh)
        printf "%-7s %-8d %10s %8s %6s %10s %8s %10s %-14s %9s %9s\n", bname[i], n,
               nep ? sprintf("%.1f", median(ep, nep)) : (nopack == 1 ? "-" : "failed"), mib(rss["espack", i, n]),
               neb ? sprintf("%.3f", median(eb, neb)) : "-",
               neg ? sprintf("%.1f", median(eg, neg)) : "failed", mib(rss["esgguf", i, n]),
               nlv ? sprintf("%.1f", median(lv, nlv)) : (cgok ? (nkill ? "killed" : "-") : "-"), runs,
               nrp ? sprintf("%.2fx", median(rp, nrp)) : "-", nrg ? sprintf("%.2fx", median(rg, nrg)) : "-"
    }
    if (nshared) printf "(\"shared\": runs during which another process had the model in the page cache; its pages\n are charged to the cgroup of that process, so the limit did not hold them and those llama.cpp figures\n overstate what llama.cpp does within the budget)\n"
    printf "\nper budget: llama.cpp cgroup peak usage (page cache included), repacking seen; estream plan (pack, else gguf):\n"
    for (i = 1; i <= nb; i++) {
        printf "  %-6s = %s bytes: llama.cpp peak %s MiB, repacking %s", bname[i], bsize[i], mib(llmax[i]), (i in llrepack) ? llrepack[i] : "-"
        if (("espack", i) in escg) printf "; estream in cgroup: pack peak %s MiB", mib(escg["espack", i])
        if (("esgguf", i) in escg) printf ", gguf peak %s MiB", mib(escg["esgguf", i])
        printf "\n           estream: %s\n", (i in plan) ? plan[i] : "(no result)"
    }
}' "${files[@]}"
[ "$cgroup_ok" = 1 ] || echo "stream_vs_llama: no memory cgroup ($cgroup_why): llama.cpp was not run under the budgets"
exit 0
