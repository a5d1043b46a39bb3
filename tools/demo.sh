#!/usr/bin/env bash
# The main job on a built-in default: build estream, write a synthetic OLMoE-shaped model
# (preset mini, Q4_0) and prefill a prompt with it, printing the top next tokens, the time and
# the peak resident memory. Usage: bash tools/demo.sh [PRESET] [TYPE]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-mini}
type=${2:-q4_0}
bash tools/install-deps.sh
make -j"$(nproc)" >/dev/null
model=${TMPDIR:-/tmp}/estream-demo-$preset-$type.gguf
[ -f "$model" ] || build/estream synth --preset "$preset" --type "$type" --seed 1 -o "$model"
build/estream info -m "$model" | head -n 9
echo
build/estream prefill -m "$model" -f ../shared/data/text/wikitext-2-test.txt --top 5 2>/dev/null ||
build/estream prefill -m "$model" -p "The river runs past the old mill and under the stone bridge, where the children of the village gather in the evening to watch the water." --top 5
