#!/usr/bin/env bash
# The README's examples run as written: every ```sh block of its "One example per job" section
# is run, in order, as one script in a scratch folder where build/ is this tree's build, with
# the shared WikiText-2 as the text.txt the ppl example reads. Blocks that start a service, need
# the network or install (serve, lm_eval, pip, sudo make install) are left to the stages that
# test those (the openai, lmeval, python and install stages); so is the make line (built here).
# Prints "readme: N checks passed" (N = the blocks run) or the failing block and exits 1.
# usage: tools/readme-check.sh [BUILD_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/${1:-build}
[ -x "$build/estream" ] || { echo "readme: no $build/estream (build first)"; exit 1; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/estream-readme.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
ln -s "$build" "$scratch/build"
text=${ESTREAM_DATA:-$root/../shared/data}/text/wikitext-2-test.txt
if [ -f "$text" ]; then head -c 60000 "$text" >"$scratch/text.txt"
else for i in $(seq 400); do echo "The river runs past the old mill and under the stone bridge."; done >"$scratch/text.txt"; fi

# the section's sh blocks, one file each
awk -v dir="$scratch" '
    /^## One example per job/ { on = 1; next }
    /^## / && on { exit }
    on && /^```sh$/ { n++; f = sprintf("%s/block%02d.sh", dir, n); inb = 1; next }
    inb && /^```$/ { inb = 0; close(f); next }
    inb { print > f }' "$root/README.md"
blocks=("$scratch"/block*.sh)
[ -f "${blocks[0]}" ] || { echo "readme: no sh block under \"One example per job\""; exit 1; }

ran=0
for b in "${blocks[@]}"; do
    if grep -qE '(^|[ /])(serve|lm_eval|pip|sudo)( |$)' "$b"; then continue; fi
    grep -vE '^make( |$)' "$b" >"$b.run"
    grep -qE '^[^# ]' "$b.run" || continue
    if ! (cd "$scratch" && bash -euo pipefail "$b.run") >"$b.log" 2>&1; then
        echo "readme: this README block failed:"; cat "$b"; echo "-- its output:"; tail -n 20 "$b.log"
        exit 1
    fi
    ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || { echo "readme: no example ran"; exit 1; }
echo "readme: $ran checks passed"
