#!/usr/bin/env bash
# Planted-bug check (make mutants): applies each bug of tests/mutants.txt, one at a time, to a
# scratch copy of the working tree (one copy per core, each taking its share of the bugs),
# rebuilds and runs tests. A mutant is "killed" when a test
# fails and "survived" when the suite passes: a survivor means the tests run at sizes where that
# code does not do its job, so a real bug there would pass too.
# usage: tools/mutants.sh [--no-baseline] [NAME...]     (default: every mutant)
#
# The scratch copy takes the Release build along (build/, timestamps kept), so a mutant rebuilds
# only what its file touches; afterwards its source and the build files it rewrote are put back
# as they were (file times too), so the next mutant does not rebuild them unmutated. Each
# record's `kill:` programs (or program:case) run first; only
# when they all pass does the whole suite run (fail-fast, in parallel), and a mutant killed there
# is flagged so the record can be corrected. A record whose `needs:` kernel table does not run on
# this CPU (estream info --system, "runs here") is "not applicable here: <why>", counted apart
# from killed and survived. --no-baseline skips the unmutated run of every record's kill tests
# (tools/test-all.sh passes it after the Release suite has passed on the same tree).
# Prints one line per mutant and "N passed, N failed" (passed = killed; failed = survived or
# could not be applied). Exit 0 when every applicable mutant was killed.
# ESTREAM_MUTANTS_FULL=1 runs the whole suite unstopped for each mutant, to list every program
# that catches it (tests/README.md's table). ESTREAM_MUTANTS_EMULATED=1: see runs_here below.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
list=$root/tests/mutants.txt
export ESTREAM_DATA=${ESTREAM_DATA:-$root/../shared/data}
export ESTREAM_TEST_TIMEOUT=${ESTREAM_TEST_TIMEOUT:-300} # a mutant that hangs is killed by this
jobs=$(nproc)
full=${ESTREAM_MUTANTS_FULL:-0}
baseline=1
if [ "${1:-}" = --no-baseline ]; then baseline=0; shift; fi
want=("$@")
scratch=$(mktemp -d "${TMPDIR:-/tmp}/estream-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The working tree's tracked files (uncommitted edits included), not HEAD, and the Release build.
mkdir "$scratch/0"
(cd "$root" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$scratch/0" ||
    { echo "mutants: cannot copy the tree"; exit 1; }
[ -d "$root/build" ] && cp -a "$root/build" "$scratch/0/build"
cd "$scratch/0"
if ! make -j"$jobs" tests >build.log 2>&1; then tail -n 20 build.log; echo "mutants: unmutated build failed"; exit 1; fi
# The unmutated build, kept aside once: each mutant's rebuilt files are copied back from it.
cp -a build "$scratch/pristine"
runs_here=$(build/estream info --system | sed -n 's/^kernels: .*(runs here: \([^;]*\);.*/\1/p')
# ESTREAM_MUTANTS_EMULATED=1: on an AVX2 CPU without AVX-512, the avx512 and amx records count as
# applicable too, since their kill tests run those tables on the tests' emulation
# (src/quant/avx512_emu.h). Not CI's default: they rebuild that emulation's objects, about a
# minute each on two cores, and CPUs with AVX-512 run them natively. Otherwise the test programs
# are relinked without that emulation (EMU512=0): no other record's kill tests need it, and a bug
# in a header it includes (kern.h) would rebuild it for each such record.
emu512=EMU512=0
if [ "${ESTREAM_MUTANTS_EMULATED:-0}" = 1 ] && [[ " $runs_here " == *" avx2 "* ]] &&
    [[ " $runs_here " != *" avx512 "* ]]; then
    runs_here="$runs_here avx512 amx"
    emu512=EMU512=1
fi

# The objects of kernel tables that never run here (no CPU support, no emulation): make takes them
# as up to date (make -o), so a bug in a header they include (kern.h) does not recompile them;
# nothing here could execute the mutated copy. The amx table runs only where avx512 does (natively
# or on the tests' tile emulation, tests/x86_amx_emu.o).
assume_old=()
if [[ " $runs_here " != *" avx512 "* ]]; then
    for o in src/quant/x86_avx512.o src/quant/vec_avx512.o src/quant/x86_amx.o tests/x86_amx_emu.o; do
        assume_old+=(-o "build/$o")
    done
fi
[[ " $runs_here " == *" avxvnni "* ]] || assume_old+=(-o build/src/quant/x86_avxvnni.o)

# A kill entry: "test_x" (the whole program) or "test_x:test_case" (that case alone).
run_entry() { # entry -> 0 passed, 1 failed, 200 names no test that runs; output in entry.log
    local prog=${1%%:*} filter=''
    [[ $1 == *:* ]] && filter=${1#*:}
    [ -x "build/tests/$prog" ] || { echo "no program build/tests/$prog" >entry.log; return 200; }
    ESTREAM_TEST_FILTER=$filter bash tests/run.sh -j 1 build "$prog" >entry.log 2>&1
    case $(tail -n 1 entry.log) in
    '0 passed, 0 failed'*) return 200 ;; # a filter that matches nothing runs no case: a broken record
    *' passed, 0 failed'*) return 0 ;;
    *) return 1 ;;
    esac
}

# The records, in file order.
R_name=() R_file=() R_find=() R_repl=() R_kill=() R_needs=()
name='' file='' find='' repl='' kill='' needs=''
flush() {
    if [ -n "$name" ] && { [ ${#want[@]} -eq 0 ] || [[ " ${want[*]} " == *" $name "* ]]; }; then
        R_name+=("$name") R_file+=("$file") R_find+=("$find") R_repl+=("$repl") R_kill+=("$kill") R_needs+=("$needs")
    fi
    name='' kill='' needs=''
}
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        '#'*) ;;
        name:*) name=${line#name: } ;;
        file:*) file=${line#file: } ;;
        find:*) find=${line#find: } ;;
        repl:*) repl=${line#repl: } ;;
        kill:*) kill=${line#kill: } ;;
        needs:*) needs=${line#needs: } ;;
        '') flush ;;
    esac
done <"$list"
flush
applicable() { [ -z "$1" ] || [[ " $runs_here " == *" $1 "* ]]; }

if [ $baseline = 1 ]; then
    # Unmutated, every named kill test must pass, or a kill would prove nothing.
    entries=$(for i in "${!R_name[@]}"; do applicable "${R_needs[$i]}" && echo "${R_kill[$i]}"; done |
              tr ' ' '\n' | sed '/^$/d' | sort -u)
    for e in $entries; do
        run_entry "$e"
        case $? in
        0) ;;
        200) echo "mutants: kill entry $e names no test that runs"; exit 1 ;;
        *) tail -n 20 entry.log; echo "mutants: $e fails without any planted bug"; exit 1 ;;
        esac
    done
    echo "mutants: the unmutated tree passes every kill entry ($(echo "$entries" | wc -w))"
fi

# One result line per mutant on stdout; its first word says which count it adds to.
run_mutant() { # name file find repl kill needs
    local name=$1 file=$2 find=$3 repl=$4 kill=$5 needs=$6
    if ! applicable "$needs"; then
        echo "n/a      $name: not applicable here: its code runs only in the $needs kernel table, and this CPU runs ${runs_here:-none}"
        return
    fi
    if [ -z "$kill" ]; then echo "BROKEN   $name: no kill: line in tests/mutants.txt"; return; fi
    # what make and the tests write in build/ from now on is newer than this (a second back: file
    # times move at the kernel's tick; nothing was written there in that second, restore below
    # keeps the unmutated build's times)
    touch -d '-1 second' stamp
    cp "$root/$file" "$file" # pristine copy (and a new mtime, so make rebuilds it)
    if ! FIND=$find REPL=$repl perl -0pi -e '
            my ($f, $r) = ($ENV{FIND}, $ENV{REPL});
            my $n = () = /\Q$f\E/g;
            die "found $n times\n" if $n != 1;
            s/\Q$f\E/$r/;' "$file" 2>perl.err; then
        echo "BROKEN   $name: the line to replace in $file $(cat perl.err)"
        restore "$file"; return
    fi
    local t0=$SECONDS by='' e targets=(tests)
    # the kill programs and the CLI they may run are enough to kill it; the rest of the suite is
    # built only when they pass (relinking every test program took a third of each mutant's time)
    [ "$full" = 1 ] || targets=(build/estream $(for e in $kill; do echo "build/tests/${e%%:*}"; done | sort -u))
    if ! make -j"$jobs" "$emu512" "${assume_old[@]}" "${targets[@]}" >build.log 2>&1; then
        echo "killed   $name: does not compile ($((SECONDS - t0)) s)"
        restore "$file"; return
    fi
    if [ "$full" != 1 ]; then
        for e in $kill; do
            run_entry "$e"
            case $? in
            0) ;;
            200) echo "BROKEN   $name: kill entry $e runs no test"
                 restore "$file"; return ;;
            *) by=$e; break ;;
            esac
        done
    fi
    if [ -n "$by" ]; then
        echo "killed   $name by: $by ($((SECONDS - t0)) s)"
    elif ! make -j"$jobs" "$emu512" "${assume_old[@]}" tests >build.log 2>&1; then
        echo "killed   $name: the suite does not compile ($((SECONDS - t0)) s)"
    elif ESTREAM_TEST_FAIL_FAST=$((1 - full)) bash tests/run.sh -j "$jobs" build >suite.log 2>&1; then
        echo "SURVIVED $name: the suite passes ($((SECONDS - t0)) s)"
    else
        local progs cases
        progs=$(sed -n 's/^FAIL \([^ ]*\).*/\1/p' suite.log | tr '\n' ' ')
        cases=$(sed -n 's/^ *\[  FAILED  \] \(test_[a-z0-9_]*\)$/\1/p' suite.log | sort -u | tr '\n' ' ')
        local note=''
        [ "$full" = 1 ] || note=" -- not by its kill: entries ($kill); correct tests/mutants.txt"
        echo "killed   $name by: ${progs}[${cases% }] ($((SECONDS - t0)) s)$note"
    fi
    restore "$file"
}

# Undoes a mutant: its source as copied (file time too: older than the build again), and every
# build file written since the stamp copied back from the unmutated build (or removed where it
# has none), then any that a failed compile deleted. Without this, the next mutant would rebuild
# everything the last one touched (a kern.h bug: every kernel table, about a minute).
restore() { # file
    cp -p "$root/$1" "$1"
    find build -newer stamp \( -type f -o -type l \) -print0 |
        while IFS= read -r -d '' f; do
            rm -f "$f"
            if [ -e "$scratch/pristine/${f#build/}" ] || [ -L "$scratch/pristine/${f#build/}" ]; then
                cp -a "$scratch/pristine/${f#build/}" "$f"
            fi
        done
    (cd "$scratch/pristine" && find . \( -type f -o -type l \) -print0) |
        while IFS= read -r -d '' f; do
            [ -e "build/$f" ] || [ -L "build/$f" ] || { mkdir -p "$(dirname "build/$f")"; cp -a "$scratch/pristine/$f" "build/$f"; }
        done
}

# $jobs workers, each in its own copy of the scratch tree (build included, timestamps kept), take
# every $jobs-th record: a mutant's rebuild and kill tests mostly keep one core busy. The full
# run (the whole suite on all cores per mutant) has one.
workers=$jobs
[ "$full" = 1 ] && workers=1
[ "$workers" -gt "${#R_name[@]}" ] && workers=${#R_name[@]}
for ((w = 1; w < workers; w++)); do cp -a "$scratch/0" "$scratch/$w"; done
: >"$scratch/results"
for ((w = 0; w < workers; w++)); do
    (
        cd "$scratch/$w" || exit 1
        for i in "${!R_name[@]}"; do
            [ $((i % workers)) -eq "$w" ] || continue
            line=$(run_mutant "${R_name[$i]}" "${R_file[$i]}" "${R_find[$i]}" "${R_repl[$i]}" "${R_kill[$i]}" "${R_needs[$i]}")
            echo "$line" # as it finishes: the workers' lines interleave
            echo "$line" >>"$scratch/results"
        done
    ) &
done
wait
count() { grep -c "^$1" "$scratch/results"; }
killed=$(count 'killed ') survived=$(count 'SURVIVED ') broken=$(count 'BROKEN ') na=$(count 'n/a ')
[ $((killed + survived + broken + na)) -eq "${#R_name[@]}" ] ||
    { echo "mutants: $((killed + survived + broken + na)) results for ${#R_name[@]} records"; broken=$((broken + 1)); }
echo "mutants: $killed killed, $survived survived, $broken could not be applied, $na not applicable here"
echo "$killed passed, $((survived + broken)) failed"
[ $((survived + broken)) -eq 0 ] && [ $((killed + na)) -gt 0 ]
