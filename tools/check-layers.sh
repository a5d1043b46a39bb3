#!/bin/bash
# The folders of src/ are floors (STYLE §1): a file includes headers of its own floor or the
# floors below, never one above; the clients of the library (records/, serve/, cli/) include only
# the public header (include/estream.h), the tree's tools header (include/estream_tools.h:
# helpers outside the ABI promise) and their own floors'; the examples and the Python package
# use estream.h alone.
# Also: no file of src/ above 750 lines but the ISA tables and the GGUF reader.
# Prints each include that breaks the order (and each file too long) and exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
floors=(core jinja quant gguf io tok pack model moe stream tune run job records serve cli)
declare -A rank
for i in "${!floors[@]}"; do rank[${floors[$i]}]=$i; done
bad=0
for f in $(find src -name '*.[ch]' | sort); do
    from=${f#src/}; from=${from%%/*}
    if [ -z "${rank[$from]+x}" ]; then echo "$f: folder $from is not a known floor"; bad=1; continue; fi
    while IFS=: read -r line inc; do
        to=${inc%%/*}
        [ "$to" = "$inc" ] && continue                      # "estream.h" or a same-folder name
        if [ "${rank[$from]:-0}" -ge "${rank[records]}" ] && [ "${rank[$to]:-99}" -lt "${rank[records]}" ]; then
            echo "$f:$line: $from/ is a client of include/estream.h but includes internal header $inc"; bad=1
        elif [ -z "${rank[$to]+x}" ]; then
            echo "$f:$line: includes $inc from an unknown folder"; bad=1
        elif [ "${rank[$to]}" -gt "${rank[$from]}" ]; then
            echo "$f:$line: $from/ includes $inc, a floor above it"; bad=1
        fi
    done < <(grep -n '^#include "' "$f" | sed -E 's/^([0-9]+):#include "([^"]+)".*/\1:\2/')
done
# Programs outside the tree's own clients use the public header only: the examples (built
# against an installed libestream) and the Python package (the shared library's exports).
for f in examples/*.c; do
    if grep -n '#include' "$f" | grep -v '<[a-z/]*\.h>\|"estream\.h"\|<estream\.h>' | grep -q .; then
        echo "$f: includes more than estream.h and system headers"; bad=1
    fi
done
if grep -rn 'estream_tools' python/estream >/dev/null 2>&1; then
    echo "python/estream: refers to estream_tools.h (the package may use estream.h's API only)"; bad=1
fi
# One concern per file: a file past 750 lines is two (the ISA tables, one per instruction set,
# and the GGUF reader's one parse are the exceptions).
while read -r n f; do
    case $f in src/quant/x86_*.c | src/quant/arm_*.c | src/gguf/gguf_read.c | total) ;;
    *) [ "$n" -le 750 ] || { echo "$f: $n lines, above 750 (split it by concern)"; bad=1; } ;;
    esac
done < <(find src -name '*.[ch]' -print0 | xargs -0 wc -l)
[ $bad = 0 ] && echo "layers: every include goes down (${floors[*]}); no file above 750 lines"
exit $bad
