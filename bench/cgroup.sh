# shellcheck shell=bash disable=SC2034,SC2154  # (sourced: the variables are the scripts')
# Shared by the bench scripts that hold llama.cpp to a memory budget (stream_vs_llama.sh,
# score_vs_llama.sh): budgets in bytes, a memory cgroup (v1) per run, the page cache of one file.
# Source it after setting bench_name (for messages) and out (a scratch folder, removed at exit).
# It sets the EXIT/INT/TERM traps.

to_bytes() { # 2G, 600M, 512K, 123 -> bytes (powers of 1024); fails on anything else
    awk -v s="$1" 'BEGIN {
        if (s !~ /^[0-9]+(\.[0-9]+)?[KkMmGg]?$/) exit 1
        m = 1; u = substr(s, length(s)); if (u ~ /[KkMmGg]/) s = substr(s, 1, length(s) - 1)
        if (u ~ /[Kk]/) m = 1024; else if (u ~ /[Mm]/) m = 1048576; else if (u ~ /[Gg]/) m = 1073741824
        printf "%.0f\n", s * m }'
}
# --- the memory cgroup (v1) ----------------------------------------------------------------
cg_root=/sys/fs/cgroup/memory
cg_parent=${CGROUP_PARENT:-$cg_root$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3; exit }' /proc/self/cgroup 2>/dev/null)}
cg_parent=${cg_parent%/}
cg=$cg_parent/estream-bench-$$
cgroup_ok=1
cgroup_why=
if [ ! -f "$cg_root/memory.limit_in_bytes" ]; then
    cgroup_ok=0
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        cgroup_why="only cgroup v2 is mounted (this script drives the v1 memory controller)"
    else
        cgroup_why="no cgroup v1 memory controller at $cg_root"
    fi
elif ! mkdir "$cg" 2>/dev/null; then
    cgroup_ok=0; cgroup_why="cannot create a memory cgroup under $cg_parent (not root? read-only?)"
elif ! rmdir "$cg" 2>/dev/null; then
    cgroup_ok=0; cgroup_why="cannot remove the test cgroup $cg"
fi
# shellcheck disable=SC2317  # (called by the trap)
cleanup() {
    local i
    if [ -d "$cg" ]; then
        # a run still inside (interrupted): end it, by process id
        while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$cg/cgroup.procs" 2>/dev/null || true
        for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
        [ -d "$cg" ] && echo "$bench_name: could not remove $cg" >&2
    fi
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cg_run BYTES OUT ERR CMD...: runs CMD in a fresh memory cgroup limited to BYTES (RAM and,
# where accounted, RAM+swap), removes the cgroup and sets: cg_rc (exit status), cg_oom (tasks
# the OOM killer killed in it), cg_failcnt (charges that failed at the limit; often 0 even when
# the limit was reached, reclaim comes first), cg_max (peak usage, page cache included),
# cg_limit (BYTES).
cg_run() {
    local bytes=$1 o=$2 e=$3 i
    shift 3
    cg_limit=$bytes
    mkdir "$cg"
    echo "$bytes" >"$cg/memory.limit_in_bytes"
    if [ -f "$cg/memory.memsw.limit_in_bytes" ]; then echo "$bytes" >"$cg/memory.memsw.limit_in_bytes"; fi
    cg_rc=0
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@" >"$o" 2>"$e" || cg_rc=$?
    cg_oom=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control")
    cg_failcnt=$(cat "$cg/memory.failcnt")
    cg_max=$(cat "$cg/memory.max_usage_in_bytes")
    for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.5; done
    [ ! -d "$cg" ] || { echo "$bench_name: could not remove $cg" >&2; exit 1; }
}

# cached_bytes FILE: how much of FILE is in the page cache (0 without fincore)
# (printf %.0f: mawk prints numbers past 2^31 as 8.05401e+09, which `[ -gt ]` refuses)
cached_bytes() { fincore -b -n -o RES "$1" 2>/dev/null | awk '{ printf "%.0f\n", $1; n++ } END { if (!n) print 0 }'; }

# drop_file_cache FILE: drops FILE's pages from the page cache (only unmapped ones can go)
drop_file_cache() {
    local left
    dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || true
    left=$(cached_bytes "$1")
    if [ "${left:-0}" -gt 67108864 ]; then
        echo "  note: $((left >> 20)) MiB of $1 stay in the page cache (mapped by another process?)" >&2
    fi
}

# llama_status: ok | killed | timeout | failed(RC), from cg_* of the last cg_run; "killed": the
# cgroup's OOM killer fired (oom_kill in memory.oom_control), or, on kernels without that
# count, SIGKILL with the usage at the limit
llama_status() {
    if [ "${cg_oom:-0}" -gt 0 ] || { [ -z "$cg_oom" ] && [ "$cg_rc" -eq 137 ] && [ "$cg_max" -ge $((cg_limit * 95 / 100)) ]; }; then
        echo killed
    elif [ "$cg_rc" -eq 124 ]; then echo timeout
    elif [ "$cg_rc" -ne 0 ]; then echo "failed($cg_rc)"
    else echo ok
    fi
}

