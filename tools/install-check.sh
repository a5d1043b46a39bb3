#!/usr/bin/env bash
# estream as an installed library: the exported symbols (tools/check-symbols.sh), `make install`
# / `make uninstall` with DESTDIR and PREFIX (exactly the files promised, none left behind), and
# the examples built with `pkg-config --cflags --libs estream` against a scratch prefix, run on a
# synthetic model resident and under a memory budget: examples/logprobs must print the numbers
# `estream score` gives for the same {"text"} record, examples/embed_lines the vectors of
# `estream embed` (float32, exactly).
# usage: tools/install-check.sh [BUILD_DIR]     (default build)
# Prints "install: N checks passed" (or says what failed and exits 1).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n_ok=0
ok() { n_ok=$((n_ok + 1)); }
die() { echo "install-check: $*" >&2; exit 1; }
make -s -j"$(nproc)" BUILD="$build" "$build/estream" "$build/libestream.so" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bash tools/check-symbols.sh "$build" && ok

# ---- make install into a staging folder: exactly these files, and make uninstall removes them
version=$(sed -n 's/^#define ES_VERSION_[A-Z]* \([0-9][0-9]*\)$/\1/p' include/estream.h | paste -sd. -)
major=${version%%.*}
make -s BUILD="$build" install DESTDIR="$tmp/stage" PREFIX=/usr >/dev/null
(cd "$tmp/stage" && find . \( -type f -o -type l \) | sort) >"$tmp/files"
cat >"$tmp/want" <<LIST
./usr/bin/estream
./usr/include/estream.h
./usr/lib/libestream.a
./usr/lib/libestream.so
./usr/lib/libestream.so.$major
./usr/lib/libestream.so.$version
./usr/lib/pkgconfig/estream.pc
./usr/share/man/man1/estream.1
LIST
diff "$tmp/want" "$tmp/files" || die "make install DESTDIR=... PREFIX=/usr installed other files (above)"
[ "$(readlink "$tmp/stage/usr/lib/libestream.so")" = "libestream.so.$major" ] ||
    die "libestream.so does not point at libestream.so.$major"
grep -qx 'prefix=/usr' "$tmp/stage/usr/lib/pkgconfig/estream.pc" || die "estream.pc: prefix is not /usr"
grep -q '^\.TH ESTREAM 1' "$tmp/stage/usr/share/man/man1/estream.1" &&
    grep -q 'estream score' "$tmp/stage/usr/share/man/man1/estream.1" || die "the man page lacks the commands"
if command -v man >/dev/null && man -l "$tmp/stage/usr/share/man/man1/estream.1" >/dev/null 2>&1; then :; fi
ok
make -s BUILD="$build" uninstall DESTDIR="$tmp/stage" PREFIX=/usr >/dev/null
left=$(find "$tmp/stage" \( -type f -o -type l \) | wc -l)
[ "$left" -eq 0 ] || die "make uninstall left $left files"
ok

# ---- a scratch prefix, and the examples built from it with pkg-config
prefix=$tmp/prefix
make -s BUILD="$build" install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion estream)" = "$version" ] || die "pkg-config --modversion estream is not $version"
cp examples/*.c examples/Makefile "$tmp/"
mkdir -p "$tmp/ex" && mv "$tmp"/*.c "$tmp/Makefile" "$tmp/ex/"
make -s -C "$tmp/ex" CFLAGS="-O2 -Wall -Wextra -Werror" >/dev/null || die "the examples do not build against $prefix"
export LD_LIBRARY_PATH=$prefix/lib
# ldd's loader writes a line at a time: piped into grep -q, which exits at the first match, it
# may die of SIGPIPE, which pipefail turns into a failure (seen in CI under load); read a file.
ldd "$tmp/ex/logprobs" >"$tmp/ldd.out" || die "ldd cannot read examples/logprobs"
grep -q "libestream.so.$major => $prefix/lib/" "$tmp/ldd.out" ||
    die "examples/logprobs does not load $prefix/lib/libestream.so.$major"
ok
est=$prefix/bin/estream
"$est" synth --preset mini --type q4_0 --seed 4 -o "$tmp/mini.gguf" >/dev/null 2>&1
"$est" pack -m "$tmp/mini.gguf" -o "$tmp/mini.pack" >/dev/null 2>&1
text="The tower is 324 metres tall, about the same height as an 81-storey building."
printf '{"text": "%s"}\n' "$text" >"$tmp/rec.jsonl"
printf '%s\n' "$text" "" "Its base is square, measuring 125 metres on each side." \
    "During its construction, the tower surpassed the Washington Monument." >"$tmp/lines.txt"
awk 'NF { gsub(/"/, "\\\""); printf "{\"text\": \"%s\"}\n", $0 }' "$tmp/lines.txt" >"$tmp/lines.jsonl"
# an impossible budget is estream's one-line error (naming the smallest budget that works)
if "$tmp/ex/logprobs" "$tmp/mini.gguf" "$text" 1K >"$tmp/out" 2>"$tmp/err"; then die "logprobs under 1K succeeded"; fi
grep -q "^logprobs: cannot make the session: .*budget" "$tmp/err" || die "logprobs under 1K said: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || die "more than one line of error: $(cat "$tmp/err")"
least=$(sed -n 's/.*the smallest budget that works is \([0-9][0-9]*\) MiB.*/\1/p' "$tmp/err")
[ -n "$least" ] || die "no smallest budget in: $(cat "$tmp/err")"
ok
# resident, and under that smallest budget (the experts streamed: 2 banks of 1; the mini
# preset's 54 MiB of experts never fit beside M_other there), against the CLI
# resident (every output is the same under any budget)
"$est" score -m "$tmp/mini.gguf" -f "$tmp/rec.jsonl" >"$tmp/score.jsonl" 2>/dev/null || die "estream score failed"
"$est" embed -m "$tmp/mini.gguf" -f "$tmp/lines.jsonl" >"$tmp/embed.jsonl" 2>/dev/null || die "estream embed failed"
for model in mini.gguf mini.pack; do
    for mem in "" "${least}M"; do
        what="$model${mem:+ under $mem}"
        "$tmp/ex/logprobs" "$tmp/$model" "$text" $mem >"$tmp/lp.txt" 2>"$tmp/lp.err" ||
            die "logprobs on $what failed: $(cat "$tmp/lp.err")"
        if [ -n "$mem" ]; then
            grep -q "experts streamed" "$tmp/lp.err" || die "logprobs on $what did not stream: $(cat "$tmp/lp.err")"
            rss=$(sed -n 's/.*peak RSS \([0-9]*\)\..*/\1/p' "$tmp/lp.err")
            [ -n "$rss" ] && [ "$rss" -lt "$least" ] || die "logprobs on $what: $(cat "$tmp/lp.err")"
        fi
        "$tmp/ex/embed_lines" "$tmp/$model" "$tmp/lines.txt" $mem >"$tmp/emb.txt" || die "embed_lines on $what failed"
        python3 - "$tmp" "$what" <<'PY' || die "the examples' numbers differ from the CLI's on $what"
import json, struct, sys
tmp, what = sys.argv[1], sys.argv[2]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", float(x)))[0]
rows = [l.rstrip("\n").split("\t") for l in open(tmp + "/lp.txt")]
rec = json.loads(open(tmp + "/score.jsonl").readline())
ids = [int(r[1]) for r in rows[:-1]]
lps = [None if r[2] == "-" else f32(r[2]) for r in rows[:-1]]
want = [None if x is None else f32(x) for x in rec["logprobs"]]
assert ids == rec["ids"], "%s: ids %s vs %s" % (what, ids, rec["ids"])
assert lps == want, "%s: log-probs differ" % what
embs = [l.split() for l in open(tmp + "/emb.txt")]
recs = [json.loads(l) for l in open(tmp + "/embed.jsonl")]
assert [int(e[0]) for e in embs] == [1, 3, 4], "%s: lines %s" % (what, [e[0] for e in embs])
assert len(embs) == len(recs)
for e, r in zip(embs, recs):
    assert [f32(x) for x in e[1:]] == [f32(x) for x in r["embedding"]], "%s: embedding of line %s" % (what, e[0])
PY
        ok
    done
done
make -s BUILD="$build" uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" \( -type f -o -type l \) | wc -l)
[ "$left" -eq 0 ] || die "make uninstall PREFIX=... left $left files"
ok
echo "install: $n_ok checks passed"
