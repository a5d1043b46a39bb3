#!/bin/bash
# No two files of src/ call each other in a loop (STYLE §1: one concern a file, dependencies one
# way). The file-level call graph comes from the built objects, not from the text: file A depends
# on file B when A's object has an undefined symbol that B's object defines (nm -u, nm -g
# --defined-only), a call or a reference to B's data (a kernel table, a type table) alike;
# symbols no object of src/ defines (libc, liburing, jansson...) are left out. Every strongly
# connected component of more than one file is a loop, printed with the symbols on each of its
# edges. Functions inlined from headers leave no symbol and so no edge: a header is not a file of
# the graph, which is right, since a header cannot call back.
# A loop that is deliberate is allowed by the list below, each with its reason; the list names
# the exact set of files, so a loop that grows is reported again.
# Why a script of its own and not a part of tools/check-layers.sh: that one reads the sources and
# needs no build; this one reads objects, so it runs after make.
# usage: tools/check-calls.sh [BUILD_DIR]    (default build; the objects under BUILD_DIR/src)
# Exits 1 when a loop is not on the list (or the objects are missing).
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}

# Allowed loops: the files, sorted and separated by spaces, then " # " and the reason.
allowed=(
    # The Jinja interpreter is one recursive evaluator cut by concern: an expression may call a
    # macro, whose body is statements (eval.c -> exec.c: jr_call_macro), and statements evaluate
    # expressions (exec.c -> eval.c); expressions apply filters and tests, and filters apply the
    # expression operators back (sum, map(attribute=): filters.c -> eval.c: jr_binop,
    # jr_getitem); loop.length, loop.last and loop.nextitem (methods.c) run exec.c's lazy loop
    # ahead, while exec.c looks globals up in methods.c; methods bind their arguments with
    # filters.c's jr_bind. Without the loop the four would be one file of 2,400 lines.
    "src/jinja/eval.c src/jinja/exec.c src/jinja/filters.c src/jinja/methods.c # the Jinja interpreter's mutual recursion (expressions, statements, filters, methods)"
    # The server's listener starts each connection's thread at conn.c's sv_conn_main (a thread
    # entry handed to pthread_create: a callback), and the thread, when its reply is out or it
    # ends, gives its slot back and leaves the listener's list under the listener's lock
    # (sv_listen_conn_release, sv_listen_conn_end, with the per-address table that only
    # listen.c touches). Two halves of one slot protocol; conn.c holds the request loop alone.
    "src/serve/conn.c src/serve/listen.c # the listener starts connection threads, which hand their slots back"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The objects of today's sources only: a .o left behind by a moved or deleted file is skipped.
objs=()
for c in $(find src -name '*.c' | sort); do
    o=$build/${c%.c}.o
    [ -f "$o" ] && objs+=("$o")
done
if [ ${#objs[@]} = 0 ]; then echo "check-calls: no objects under $build/src (run make first)"; exit 1; fi

nm -A -g --defined-only "${objs[@]}" | awk '$2 != "U" && NF >= 3 { split($1, p, ":"); print p[1], $NF }' \
    >"$tmp/defs"
nm -A -u "${objs[@]}" | awk '{ split($1, p, ":"); print p[1], $NF }' >"$tmp/uses"
printf '%s\n' "${allowed[@]}" >"$tmp/allowed"

awk -v build="$build/" -v allowfile="$tmp/allowed" '
function src(o) { sub("^" build, "", o); sub(/\.o$/, ".c", o); return o }
# Tarjan: the strongly connected components of the graph, each of more than one node printed.
function visit(v,    i, w) {
    index_[v] = low[v] = ++counter
    stack[++sp] = v; onstack[v] = 1
    for (i = 1; i <= nout[v]; i++) {
        w = out[v, i]
        if (!(w in index_)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
        else if (onstack[w] && index_[w] < low[v]) low[v] = index_[w]
    }
    if (low[v] == index_[v]) {
        n = 0
        do { w = stack[sp--]; onstack[w] = 0; comp[++n] = w } while (w != v)
        if (n > 1) report(n)
    }
}
function report(n,    i, j, k, t, key, line, a, b) {
    for (i = 2; i <= n; i++)            # sort the members (insertion sort)
        for (j = i; j > 1 && comp[j - 1] > comp[j]; j--) { t = comp[j]; comp[j] = comp[j - 1]; comp[j - 1] = t }
    key = comp[1]
    for (i = 2; i <= n; i++) key = key " " comp[i]
    if (key in allow) { print "allowed loop: " key "  (" allow[key] ")"; allowed_seen[key] = 1; return }
    loops++
    print "loop: " key
    for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) {
        a = comp[i]; b = comp[j]
        if (a != b && ((a, b) in syms)) print "    " a " -> " b ": " syms[a, b]
    }
}
FILENAME == allowfile {
    if ($0 == "") next
    k = $0; sub(/ *#.*/, "", k); r = $0; sub(/^[^#]*# */, "", r); allow[k] = r; next
}
FILENAME ~ /defs$/ { owner[$2] = src($1); files[src($1)] = 1; next }
{
    from = src($1); files[from] = 1
    if (!($2 in owner) || owner[$2] == from) next
    to = owner[$2]
    if (!((from, to) in syms)) { out[from, ++nout[from]] = to; syms[from, to] = $2; edges++ }
    else syms[from, to] = syms[from, to] ", " $2
}
END {
    for (f in files) { nfiles++; if (!(f in index_)) visit(f) }
    for (k in allow) if (!(k in allowed_seen)) print "note: the allowed loop " k " is gone; drop it from the list"
    if (loops) { print "calls: " loops " loop(s) between files of src/"; exit 1 }
    print "calls: " nfiles " files, " edges " file-to-file dependencies, no loop"
}' "$tmp/allowed" "$tmp/defs" "$tmp/uses"
