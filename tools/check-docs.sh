#!/usr/bin/env bash
# The docs are true to the tree: every repository path a Markdown file or the public headers
# name in backquotes (`src/run/batch.c`, `tools/demo.sh`, `tests/data/chat/*.jinja`) exists, and
# every es_* function or type they name in backquotes is defined or declared somewhere under
# include/ or src/. Paths outside the repository (`../shared/...`) and examples of user files
# are not checked, nor llama.cpp's (*.cpp); a program (`bench/bench_tok`) is its source's name.
# Prints each stale name with the file and line and exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
bad=0
files=$(git ls-files '*.md' include/estream.h include/estream_tools.h | grep -v '^tests/data/')
for f in $files; do
    # `path` mentions: a top folder of the repository, then a path; trailing punctuation dropped
    while IFS=: read -r line path; do
        path=${path%%[),.:;]}
        path=${path%/}
        case $path in *'<'*|*'{'*|*'$'*|*NAME*|*' '*) continue ;; esac # placeholders
        case $path in *.cpp) continue ;; esac # llama.cpp's sources (we have no C++)
        if [[ $path == *'*'* ]]; then
            compgen -G "$path" >/dev/null || { echo "$f:$line: no file matches \`$path\`"; bad=1; }
        elif [ ! -e "$path" ] && [ ! -e "$path.c" ]; then # a program: its source
            echo "$f:$line: \`$path\` does not exist"; bad=1
        fi
    done < <(grep -noE '`(src|include|tests|tools|docs|bench|python|examples|\.ci)/[^` ]*' "$f" |
             sed -E 's/^([0-9]+):`/\1:/')
    # `es_name` mentions (functions, types): an identifier of the tree
    while IFS=: read -r line sym; do
        git grep -qw -e "$sym" -- include src ||
            { echo "$f:$line: \`$sym\` is not in include/ or src/"; bad=1; }
    done < <(grep -noE '`es_[a-z0-9_]+' "$f" | sed -E 's/^([0-9]+):`/\1:/' | sort -u)
done
[ $bad = 0 ] && echo "docs: every path and es_ name they mention exists"
exit $bad
