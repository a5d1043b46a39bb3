#!/usr/bin/env bash
# Planted-bug check (make mutants): applies each bug of tests/mutants.txt, one at a time, to a
# scratch copy of the working tree, builds it and runs the Release suite. A mutant is "killed"
# when the suite fails and "survived" when it passes: a survivor means the tests run at sizes
# where that code does not do its job, so a real bug there would pass too.
# usage: tools/mutants.sh [NAME...]     (default: every mutant)
# Prints one line per mutant (with the test program that failed) and "N passed, N failed",
# where passed = killed. Exit 0 when every mutant was killed. The suite stops at the first
# failing program (that keeps CI's 36 mutants inside its time); ESTREAM_MUTANTS_FULL=1 runs it
# whole, to list every program that catches a mutant.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
list=$root/tests/mutants.txt
export ESTREAM_DATA=${ESTREAM_DATA:-$root/../shared/data}
export ESTREAM_TEST_TIMEOUT=${ESTREAM_TEST_TIMEOUT:-300} # a mutant that hangs is killed by this
jobs=$(nproc)
fail_fast=1; [ "${ESTREAM_MUTANTS_FULL:-0}" = 1 ] && fail_fast=0
scratch=$(mktemp -d "${TMPDIR:-/tmp}/estream-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The working tree's tracked files (uncommitted edits included), not HEAD.
(cd "$root" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$scratch" ||
    { echo "mutants: cannot copy the tree"; exit 1; }
cd "$scratch"
echo "mutants: baseline build and suite in $scratch"
if ! make -j"$jobs" tests >build.log 2>&1; then tail -n 20 build.log; echo "mutants: baseline build failed"; exit 1; fi
if ! bash tests/run.sh build >suite.log 2>&1; then tail -n 20 suite.log; echo "mutants: baseline suite fails"; exit 1; fi

killed=0 survived=0 broken=0
run_mutant() { # name file find repl
    local name=$1 file=$2 find=$3 repl=$4
    if [ $# -gt 4 ] || { [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $name "* ]]; }; then return; fi
    cp "$root/$file" "$file" # pristine copy (and a new mtime, so make rebuilds it)
    if ! FIND=$find REPL=$repl perl -0pi -e '
            my ($f, $r) = ($ENV{FIND}, $ENV{REPL});
            my $n = () = /\Q$f\E/g;
            die "found $n times\n" if $n != 1;
            s/\Q$f\E/$r/;' "$file" 2>perl.err; then
        echo "BROKEN   $name: the line to replace in $file $(cat perl.err)"
        broken=$((broken + 1)); return
    fi
    local t0=$SECONDS
    if ! make -j"$jobs" tests >build.log 2>&1; then
        echo "killed   $name: does not compile ($((SECONDS - t0)) s)"; killed=$((killed + 1))
    elif ESTREAM_TEST_FAIL_FAST=$fail_fast bash tests/run.sh build >suite.log 2>&1; then
        echo "SURVIVED $name: the suite passes ($((SECONDS - t0)) s)"; survived=$((survived + 1))
    else
        local progs cases
        progs=$(sed -n 's/^FAIL \([^ ]*\).*/\1/p' suite.log | tr '\n' ' ')
        cases=$(sed -n 's/^ *\[  FAILED  \] \(test_[a-z0-9_]*\)$/\1/p' suite.log | sort -u | tr '\n' ' ')
        echo "killed   $name by: ${progs}[${cases% }] ($((SECONDS - t0)) s)"
        killed=$((killed + 1))
    fi
    cp "$root/$file" "$file"
}

want=("$@")
name='' file='' find='' repl=''
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        '#'*) ;;
        name:*) name=${line#name: } ;;
        file:*) file=${line#file: } ;;
        find:*) find=${line#find: } ;;
        repl:*) repl=${line#repl: } ;;
        '') [ -n "$name" ] && run_mutant "$name" "$file" "$find" "$repl"; name='' ;;
    esac
done <"$list"
[ -n "$name" ] && run_mutant "$name" "$file" "$find" "$repl"
echo "mutants: $killed killed, $survived survived, $broken could not be applied"
echo "$killed passed, $((survived + broken)) failed"
[ $((survived + broken)) -eq 0 ] && [ $killed -gt 0 ]
