#!/usr/bin/env bash
# The main job on a built-in default: build estream, write a synthetic OLMoE-shaped model
# (preset mini, Q4_0), prefill a long prompt with it (the first 3,000 bytes of WikiText-2 when
# the shared data is there, else a built-in paragraph), and measure prompt processing.
# Usage: bash tools/demo.sh [PRESET] [TYPE]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-mini}
type=${2:-q4_0}
bash tools/install-deps.sh
make -j"$(nproc)" build/estream >/dev/null
tmp=${TMPDIR:-/tmp}
model=$tmp/estream-demo-$preset-$type.gguf
prompt=$tmp/estream-demo-prompt.txt
[ -f "$model" ] || build/estream synth --preset "$preset" --type "$type" --seed 1 -o "$model"
if [ -f ../shared/data/text/wikitext-2-test.txt ]; then
    head -c 3000 ../shared/data/text/wikitext-2-test.txt >"$prompt"
else
    printf '%s\n' "The river runs past the old mill and under the stone bridge, where the children of the village gather in the evening to watch the water." >"$prompt"
fi
echo "== estream info"
build/estream info -m "$model" | head -n 9
echo
echo "== estream prefill -f $prompt (fast path, all CPUs)"
build/estream prefill -m "$model" -f "$prompt" --top 5
echo
echo "== estream bench -p 128,512,1024"
build/estream bench -m "$model" -p 128,512,1024 -r 3
