#!/usr/bin/env bash
# Writes the man page estream(1) to stdout from the binary's own help texts (estream --help and
# each command's --help), so the page says what the installed binary does.
# usage: tools/make-man.sh ESTREAM_BINARY VERSION
set -euo pipefail
bin=$1 version=$2
# roff: a line starting with . or ' is a request, and \ starts an escape
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
main=$("$bin" --help)
# a command's row starts at column 3; wrapped descriptions are indented further
commands=$(echo "$main" | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && /^  [a-z]/ { print $1 }')
cat <<HEAD
.TH ESTREAM 1 "" "estream $version" "User Commands"
.SH NAME
estream \\- fast, memory-bounded prefill of Mixture-of-Experts models (GGUF)
.SH SYNOPSIS
.B estream
.I COMMAND
[\\fIoptions\\fR]
.SH DESCRIPTION
HEAD
echo ".nf"
echo "$main" | roff
echo ".fi"
for c in $commands; do
    echo ".SH \"estream $c\""
    echo ".nf"
    "$bin" "$c" --help | roff
    echo ".fi"
done
cat <<'TAIL'
.SH FILES
.TP
.I MODEL.tune
the configurator's profiles, beside the model (estream tune)
.SH SEE ALSO
The README and docs/ of the estream sources; the library: estream.h, pkg-config estream.
TAIL
