#!/usr/bin/env bash
# Sequential read bandwidth of es_io (bench_io, both backends) against fio on the same file,
# block size and queue depth: fio with ioengine=io_uring, direct=1, rw=read. The two are
# interleaved twice (fio, bench_io, fio, bench_io); each step drops the page cache first when
# run as root (direct reads bypass it anyway; this keeps read-ahead state out of it too).
# Prints each figure, the medians and the ratio bench_io / fio per backend.
#
# usage: bench/io_vs_fio.sh FILE [BLOCK=1M] [DEPTH=2]
#   BUILD=dir   where bench_io is built (default build; built if missing)
#   RUNS=n      passes per bench_io run (default 1: each step reads the file once, as fio does;
#               the VM disks we measured on vary by 2x from one GB to the next)
set -euo pipefail
file=${1:?usage: bench/io_vs_fio.sh FILE [BLOCK=1M] [DEPTH=2]}
bs=${2:-1M}
depth=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
bench=$root/$build/bench/bench_io
[ -x "$bench" ] || make -C "$root" BUILD="$build" "$build/bench/bench_io" >/dev/null
if ! command -v fio >/dev/null; then
    echo "io_vs_fio: fio is not installed (Debian: apt-get install fio)" >&2
    exit 1
fi

drop() {
    if [ "$(id -u)" -eq 0 ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
    fi
}
[ "$(id -u)" -eq 0 ] || echo "io_vs_fio: not root, page cache not dropped" >&2

fio_mbs() { # one fio run, prints MB/s (10^6 bytes/s)
    drop
    fio --name=seqread --filename="$file" --ioengine=io_uring --direct=1 --rw=read \
        --bs="$bs" --iodepth="$depth" --numjobs=1 --size=100% --output-format=terse \
        --terse-version=3 | awk -F';' '{ printf "%.1f\n", $7 * 1024 / 1e6 }' # $7: read KiB/s
}

fio_runs=() uring_runs=() pread_runs=()
for round in 1 2; do
    f=$(fio_mbs)
    fio_runs+=("$f")
    echo "round $round fio io_uring direct: $f MB/s"
    drop
    out=$("$bench" "$file" "$bs" "$depth" "${RUNS:-1}")
    echo "$out" | sed "s/^/round $round /"
    u=$(echo "$out" | sed -n 's/^bench_io io_uring:.*MB\/s=\([0-9.]*\).*/\1/p')
    p=$(echo "$out" | sed -n 's/^bench_io pread:.*MB\/s=\([0-9.]*\).*/\1/p')
    uring_runs+=("${u:-0}")
    pread_runs+=("${p:-0}")
done

mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
f=$(mean "${fio_runs[@]}")
u=$(mean "${uring_runs[@]}")
p=$(mean "${pread_runs[@]}")
echo "file=$file bs=$bs iodepth=$depth (means of 2 interleaved rounds)"
echo "fio (io_uring, direct): $f MB/s"
awk -v f="$f" -v u="$u" -v p="$p" 'BEGIN {
    printf "bench_io io_uring:      %s MB/s  ratio %.3f\n", u, (f > 0 ? u / f : 0)
    printf "bench_io pread:         %s MB/s  ratio %.3f\n", p, (f > 0 ? p / f : 0) }'
