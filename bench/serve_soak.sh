#!/usr/bin/env bash
# Hostile clients against `estream serve`: slow header senders beside normal clients, SIGTERM
# during that attack and a trickled body, a FIFO as the model; and a sequential client's rate.
#
# usage: bench/serve_soak.sh [MODEL]
#   MODEL  GGUF or pack (default $TMPDIR/estream-tiny-q8_0.gguf: estream synth --preset tiny
#          --type q8_0 --seed 5, the tiny OLMoE the hostile-client findings were made on)
# environment: ESTREAM (binary, default build/estream, made first), MAX_CONN (20), IO_TIMEOUT
#   (5), TIMEOUT (10), SLOW (slow senders, default 4 x MAX_CONN), ATTACK_SECONDS (30 per attack
#   phase), CLIENTS (4), THREADS (1)
#
# bench/serve_soak.py runs the phases (its header says what each does and measures) and prints
# one JSON line per phase, then a table of each target and whether it was met; the exit status
# is 0 only when every target was.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${TMPDIR:-/tmp}/estream-tiny-q8_0.gguf}
if [ -n "${ESTREAM:-}" ]; then estream=$ESTREAM; else make -j"$(nproc)" build/estream >/dev/null; estream=build/estream; fi
[ -f "$model" ] || "$estream" synth --preset tiny --type q8_0 --seed 5 -o "$model" >/dev/null
"$estream" info --system 2>/dev/null | head -n 3 >&2 || true
echo "model $model; max-connections ${MAX_CONN:-20}, io-timeout ${IO_TIMEOUT:-5} s, timeout ${TIMEOUT:-10} s" >&2
python3 bench/serve_soak.py "$estream" "$model"
