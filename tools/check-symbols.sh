#!/usr/bin/env bash
# The shared library's interface, checked three ways (tools/install-check.sh runs it; CI too):
#   1. its dynamic symbols (nm -D --defined-only) are es_* only: the objects are built with
#      -fvisibility=hidden, and only estream.h's ES_API declarations are exported;
#   2. they are exactly the functions include/estream.h declares ES_API;
#   3. they are exactly tests/data/abi/libestream.so.MAJOR.symbols, the list this soname
#      promises: a function removed or renamed (a break) needs ES_VERSION_MAJOR bumped and a new
#      list; one added needs its name in the list (and ES_VERSION_MINOR bumped).
# And the soname is libestream.so.MAJOR of estream.h's ES_VERSION_MAJOR, and include/
# estream_tools.h (the command line's helpers, outside the promise) declares nothing ES_API.
# usage: tools/check-symbols.sh [BUILD_DIR]    (default build; BUILD_DIR/libestream.so)
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:-build}/libestream.so
[ -f "$lib" ] || { echo "check-symbols: no $lib (make $lib)" >&2; exit 1; }
major=$(sed -n 's/^#define ES_VERSION_MAJOR \([0-9][0-9]*\)$/\1/p' include/estream.h)
list=tests/data/abi/libestream.so.$major.symbols
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
bad() { echo "check-symbols: $*" >&2; status=1; }

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libestream.so.$major" ] || bad "soname is '$soname', not libestream.so.$major"

nm -D --defined-only "$lib" | awk '{ print $NF }' | sort -u >"$tmp/exported"
grep -v '^es_' "$tmp/exported" >"$tmp/foreign" || true
[ ! -s "$tmp/foreign" ] || bad "exported symbols outside es_*: $(tr '\n' ' ' <"$tmp/foreign")"

sed -n 's/^ES_API .*[^a-z0-9_]\(es_[a-z0-9_]*\)(.*/\1/p' include/estream.h | sort -u >"$tmp/declared"
if ! diff "$tmp/declared" "$tmp/exported" >"$tmp/d1"; then
    bad "exports differ from estream.h's ES_API declarations (< declared only, > exported only):"
    cat "$tmp/d1" >&2
fi
if [ ! -f "$list" ]; then
    bad "no $list: write it (the exported symbols of soname libestream.so.$major, one per line)"
elif ! diff "$list" "$tmp/exported" >"$tmp/d2"; then
    bad "exports differ from $list (< promised only: a break, bump ES_VERSION_MAJOR; > new:" \
        "add them to the list and bump ES_VERSION_MINOR):"
    cat "$tmp/d2" >&2
fi
# estream_tools.h (the tree's own helpers) is outside the promise: nothing in it is ES_API, so
# none of its functions is exported (the diff against estream.h's declarations above)
if grep -n 'ES_API' include/estream_tools.h >"$tmp/tools_api"; then
    bad "include/estream_tools.h declares ES_API functions (they belong in estream.h):"
    cat "$tmp/tools_api" >&2
fi
[ "$status" -eq 0 ] && echo "symbols: $(wc -l <"$tmp/exported") exported, all es_* and declared in estream.h, soname $soname"
exit "$status"
