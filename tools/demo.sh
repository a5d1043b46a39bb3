#!/usr/bin/env bash
# The main job on a built-in default: build estream, write a synthetic OLMoE-shaped model
# (preset mini, Q4_0), pack it, prefill a long prompt (the first 3,000 bytes of WikiText-2 when
# the shared data is there, else a built-in paragraph) with every expert resident and then
# under a memory budget below the resident run's peak (experts streamed from the pack into a
# small arena: same logits, less memory), tune the arena for that budget (estream tune: storage,
# one profile per group size, the pipeline model) and prefill again with the tuned arena, and
# measure at several prompt lengths.
# Usage: bash tools/demo.sh [PRESET] [TYPE] [BUDGET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-mini}
type=${2:-q4_0}
budget=${3:-100M}
bash tools/install-deps.sh
make -j"$(nproc)" build/estream >/dev/null
tmp=${TMPDIR:-/tmp}
model=$tmp/estream-demo-$preset-$type.gguf
pack=$tmp/estream-demo-$preset-$type.pack
prompt=$tmp/estream-demo-prompt.txt
[ -f "$model" ] || build/estream synth --preset "$preset" --type "$type" --seed 1 -o "$model"
[ -f "$pack" ] || build/estream pack "$model" -o "$pack"
rm -f "$pack.tune" # the demo shows the default rule first, then tunes
if [ -f ../shared/data/text/wikitext-2-test.txt ]; then
    head -c 3000 ../shared/data/text/wikitext-2-test.txt >"$prompt"
else
    printf '%s\n' "The river runs past the old mill and under the stone bridge, where the children of the village gather in the evening to watch the water." >"$prompt"
fi
echo "== estream info"
# the first lines only, without a pipe into head: under pipefail, head closing first would kill
# estream with SIGPIPE and fail the demo
info=$(build/estream info -m "$model")
sed -n '1,9p' <<<"$info"
echo
echo "== estream prefill -f $prompt (every expert resident)"
resident=$(build/estream prefill -m "$model" -f "$prompt" --top 5)
echo "$resident"
echo
echo "== estream prefill -f $prompt --mem $budget (experts streamed from the pack)"
streamed=$(build/estream prefill -m "$pack" -f "$prompt" --top 5 --mem "$budget")
echo "$streamed"
echo
# The demo checks what it shows: the same next tokens with the same probabilities, and (for a
# budget in M or G) a peak resident memory under the budget.
checks=0
top() { grep -E '^ +[0-9]+\. ' <<<"$1"; }
if [ "$(top "$resident")" != "$(top "$streamed")" ]; then
    echo "demo: the streamed run's top 5 differ from the resident run's" >&2
    exit 1
fi
echo "check: the streamed run's top 5 next tokens equal the resident run's"
checks=$((checks + 1))
if [[ $budget =~ ^([0-9]+)([MG])$ ]]; then
    limit=${BASH_REMATCH[1]} # MiB
    [ "${BASH_REMATCH[2]}" = G ] && limit=$((limit * 1024))
    peak=$(sed -n 's/^peak RSS: *\([0-9.]*\) MiB.*/\1/p' <<<"$streamed")
    if ! awk -v p="$peak" -v l="$limit" 'BEGIN { exit !(p > 0 && p <= l) }'; then
        echo "demo: the streamed run's peak RSS ($peak MiB) is not under the budget ($budget)" >&2
        exit 1
    fi
    echo "check: the streamed run's peak RSS, $peak MiB, is under the budget of $budget"
    checks=$((checks + 1))
fi
echo
echo "== estream bench -p 128,512,1024 --mem $budget --policy early,on-demand (with the bounds)"
build/estream bench -m "$pack" -p 128,512,1024 -r 3 --mem "$budget" --policy early,on-demand --tune none
echo
echo "== estream tune --mem $budget (writes $pack.tune), then prefill --mem $budget with it"
build/estream tune -m "$pack" --mem "$budget"
build/estream prefill -m "$pack" -f "$prompt" --top 5 --mem "$budget"
echo
echo "demo: $checks checks passed"
