#!/usr/bin/env bash
# lm-evaluation-harness against estream serve: the same zero-shot multiple-choice task run by
# lm-eval's local-completions client over HTTP and by `estream score` from a JSONL file must
# give the same accuracies (and the same per-choice log-likelihoods).
#
# usage: bench/lmeval_vs_score.sh [MODEL] [RECORDS] [THREADS]
#   MODEL    GGUF (default: the tiny-qwen3moe-vocab preset, f32, written to a temporary folder;
#            the measured run in bench/README.md is /tmp/b/olmoe.gguf, the olmoe-1b-7b preset
#            in Q4_0)
#   RECORDS  40..1000 (default 100);  THREADS  default 2
# environment: ESTREAM (binary, default build/estream, made first), ESTREAM_VENV_DIR (the
#   virtualenv of lm_eval[api], default $HOME/.cache/estream/venv-lmeval, made once from PyPI
#   and reused while its stamp matches), PYTHON (makes it; default python3), LMEVAL_CONCURRENT
#   (num_concurrent, default 2), LMEVAL_BATCH (prompts per request, --batch_size, default 8),
#   LMEVAL_TOKENIZED (tokenized_requests: True, the default, sends id lists; False sends
#   strings), LMEVAL_KEEP=1 (keep the temporary folder: records, lm-eval's results and samples,
#   score's output, the server's log), LMEVAL_EXTRA (more model_args)
#
# Method.
# - Records (bench/lmeval/make_task.py): RECORDS paragraphs of WikiText-2's test text, evenly
#   spread; context = the first 40 words, 4 choices of 5 words: the true next words and spans
#   of 3 other paragraphs; gold index seeded-random. One JSONL of documents for lm-eval
#   (lm_context, choices, gold) and the same questions as estream score records
#   {"context": C + " ", "choices": [X..], "gold"}.
# - lm-eval (a YAML task from bench/lmeval/estream_wikitext_mc.yaml.in: dataset_path json with
#   data_files, output_type multiple_choice, target_delimiter " ", metrics acc, acc_norm,
#   acc_bytes) scores (C, " " + X): its _encode_pair tokenizes C and C + " " + X with
#   add_special_tokens false and takes the continuation as the tokens past len(tok(C)). estream
#   score does the same with {"context": C + " "}: the trailing space moves to the choice.
# - tokenizer_backend=auto (local-completions' default): lm-eval probes GET /tokenizer_info for
#   eos_token and POST /tokenize for tokens, then uses its RemoteTokenizer on them ({"prompt",
#   "add_special_tokens": false}); the script fails unless lm-eval logs that it did.
#   tokenized_requests=True: the prompts go out as token id lists (echo, logprobs 1, max_tokens
#   1); False: as the /detokenize'd strings, which the server tokenizes again (the same ids).
# - BOS: lm-eval's remote tokenizer never adds it (add_bos_token=True in model_args only
#   reaches the huggingface backend's tok_encode in lm_eval 0.4.13), and the task is plain text.
#   For a model whose tokenizer adds BOS the server conditions every prompt that does not start
#   with BOS on one it does not echo (docs/prompts.md), so lm-eval's (context, continuation) is
#   scored after [BOS] + tok(C), estream score's sequence, in either mode, and the context
#   length lm-eval counted lines up with the echoed tokens. (Before that rule this script put
#   the BOS token's text before each context; that is no longer needed.)
# - Normalisation: lm-eval's acc_norm divides each choice's log-likelihood by its length in
#   characters (len(choice) in Python), acc_bytes by its UTF-8 bytes; estream score's
#   acc_norm_bytes is the bytes rule (n_bytes of the choice as given, without the delimiter).
#   So acc_bytes must equal acc_norm_bytes; acc_norm equals it where no choice is non-ASCII.
# - The check: lm-eval's logged samples (--log_samples) give each request's (context,
#   continuation) and log-likelihood: every pair must be the one intended, and every
#   log-likelihood equal to score's per-choice "logprobs" to 1e-4 (lm-eval sums the float32
#   per-token log-probs in Python doubles, score in its own order). Accuracies must be equal.
# Exit 1 when anything differs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
records=${2:-100}
threads=${3:-2}
venv=${ESTREAM_VENV_DIR:-${HOME:-/root}/.cache/estream/venv-lmeval}
concurrent=${LMEVAL_CONCURRENT:-2}
batch=${LMEVAL_BATCH:-8}
tokenized=${LMEVAL_TOKENIZED:-True}
text=${ESTREAM_DATA:-$root/../shared/data}/text/wikitext-2-test.txt
reqs="lm_eval[api]==0.4.13"
say() { echo "lmeval_vs_score: $*" >&2; }
die() { say "$*"; exit 1; }
[ -f "$text" ] || die "no WikiText-2 at $text (set ESTREAM_DATA to shared/data)"
case $records in '' | *[!0-9]*) die "RECORDS must be a number" ;; esac
case $tokenized in True | False) ;; *) die "LMEVAL_TOKENIZED must be True or False" ;; esac
[ "$records" -ge 40 ] && [ "$records" -le 1000 ] || die "RECORDS must be in 40..1000"

# ---- the virtualenv (once) ----
. tools/venv.sh
cached_venv "$venv" "$reqs"
py=$venv/bin/python

# ---- binary, model, server ----
if [ -n "${ESTREAM:-}" ]; then
    estream=$ESTREAM
else
    make -j"$(nproc)" build/estream >/dev/null
    estream=build/estream
fi
tmp=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid" 2>/dev/null || true; fi
    if [ -n "${LMEVAL_KEEP:-}" ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
if [ -n "${1:-}" ]; then
    model=$1
    [ -f "$model" ] || die "no model $model"
else
    model=$tmp/tiny-qwen3moe-vocab.gguf
    "$estream" synth --preset tiny-qwen3moe-vocab --type f32 -o "$model" >/dev/null 2>&1
fi
name=$(basename "$model" .gguf)
key=sk-bench-$RANDOM$RANDOM
printf '%s\n' "$key" >"$tmp/key"
: >"$tmp/serve.err" # before the server's redirection opens it: the sed below must find it
"$estream" serve -m "$model" --port 0 --api-key-file "$tmp/key" -t "$threads" \
    --model-name "$name" 2>"$tmp/serve.err" &
server_pid=$!
port=
for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$tmp/serve.err" | head -1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.err" >&2; die "estream serve exited"; }
    sleep 0.05
done
[ -n "$port" ] || die "no 'listening on' line from estream serve"
base=http://127.0.0.1:$port
"$py" - "$base" "$key" >"$tmp/tokinfo.json" <<'EOF' || { cat "$tmp/serve.err" >&2; die "the server never became ready"; }
import json, sys, time, urllib.request
base, key = sys.argv[1], sys.argv[2]
for _ in range(1200):  # a large model takes a while to open
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    time.sleep(0.1)
else:
    sys.exit(1)
req = urllib.request.Request(base + "/tokenizer_info", headers={"Authorization": "Bearer " + key})
print(urllib.request.urlopen(req, timeout=10).read().decode())
EOF
add_bos=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("add_bos_token"))' "$tmp/tokinfo.json")
say "model $name: add_bos_token $add_bos; the contexts are plain text (no BOS text)"

# ---- records and task ----
"$py" bench/lmeval/make_task.py "$text" "$records" "$tmp/data"

# ---- lm-eval ----
margs="base_url=$base/v1/completions,model=$name,tokenizer_backend=auto,auth_token=$key"
margs+=",num_concurrent=$concurrent,max_retries=1,tokenized_requests=$tokenized${LMEVAL_EXTRA:+,$LMEVAL_EXTRA}"
say "lm_eval --model local-completions --model_args ${margs//$key/KEY} --batch_size $batch"
t0=$(date +%s.%N)
if ! HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_DATASETS_CACHE=$tmp/hf TOKENIZERS_PARALLELISM=false \
    OPENAI_API_KEY=$key "$venv/bin/lm_eval" --model local-completions --model_args "$margs" \
    --tasks estream_wikitext_mc --include_path "$tmp/data/task" --batch_size "$batch" \
    --output_path "$tmp/lmeval" --log_samples >"$tmp/lmeval.log" 2>&1; then
    tail -40 "$tmp/lmeval.log" >&2
    die "lm_eval failed"
fi
t1=$(date +%s.%N)
lm_s=$(echo "$t1 - $t0" | bc)
# auto must have found the server's tokenizer (it falls back to a Hugging Face one otherwise)
grep -o 'Using remote tokenizer[^"]*' "$tmp/lmeval.log" | head -1 >&2 ||
    die "lm-eval's tokenizer_backend=auto did not pick the server's tokenizer (see $tmp/lmeval.log)"
kill -TERM "$server_pid"
src=0
wait "$server_pid" || src=$?
server_pid=
[ "$src" -eq 0 ] || { tail -20 "$tmp/serve.err" >&2; die "estream serve exited $src after SIGTERM"; }

# ---- estream score on the same questions ----
t0=$(date +%s.%N)
"$estream" score -m "$model" -f "$tmp/data/score.jsonl" -o "$tmp/score.jsonl" --json -t "$threads" \
    >"$tmp/score.summary" 2>"$tmp/score.err" || { cat "$tmp/score.err" >&2; die "estream score failed"; }
t1=$(date +%s.%N)
score_s=$(echo "$t1 - $t0" | bc)

# ---- compare ----
"$py" - "$tmp" "$add_bos" "$lm_s" "$score_s" "$concurrent" "$batch" "$tokenized" <<'EOF'
import glob, json, math, sys
tmp, add_bos, lm_s, score_s, conc, batch, tok = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
res = json.load(open(sorted(glob.glob(tmp + "/lmeval/**/results_*.json", recursive=True))[-1]))
r = res["results"]["estream_wikitext_mc"]
samples = [json.loads(l) for f in glob.glob(tmp + "/lmeval/**/samples_estream_wikitext_mc_*.jsonl",
                                            recursive=True) for l in open(f)]
summary = json.load(open(tmp + "/score.summary"))
score = {s["id"]: s for s in map(json.loads, open(tmp + "/score.jsonl"))}
docs = {d["id"]: d for d in map(json.loads, open(tmp + "/data/docs.jsonl"))}
bad, maxd, n_ll, ascii_choices = [], 0.0, 0, 0
for s in samples:
    d = s["doc"]
    sc = score[d["id"]]
    if all(c.isascii() for c in d["choices"]):
        ascii_choices += 1
    # "arguments": {"gen_args_<i>": {"arg_0": context, "arg_1": continuation}}, in request
    # order; "resps": [[[log-likelihood, is_greedy]]] per request (logged as strings)
    args = [s["arguments"]["gen_args_%d" % i] for i in range(len(s["arguments"]))]
    for i, (arg, resp) in enumerate(zip(args, s["resps"])):
        ctx, cont = arg["arg_0"], arg["arg_1"]
        if ctx != docs[d["id"]]["lm_context"] or cont != " " + d["choices"][i]:
            bad.append("doc %d choice %d: lm-eval scored %r + %r" % (d["id"], i, ctx[-30:], cont))
        ll = float(resp[0][0])
        diff = abs(ll - sc["logprobs"][i])
        maxd = max(maxd, diff)
        n_ll += 1
        if not diff <= 1e-4:
            bad.append("doc %d choice %d: lm-eval %.9g, score %.9g" % (d["id"], i, ll, sc["logprobs"][i]))
lm = {k: r[k + ",none"] for k in ("acc", "acc_norm", "acc_bytes")}
es = {k: summary[k] for k in ("acc", "acc_norm_tokens", "acc_norm_bytes")}
eq_acc = lm["acc"] == es["acc"]
eq_bytes = lm["acc_bytes"] == es["acc_norm_bytes"]
eq_norm = lm["acc_norm"] == es["acc_norm_bytes"]
yn = lambda b: "yes" if b else "no"
print("records %d (choices all ASCII in %d); lm-eval requests %d; model adds BOS: %s; "
      "tokenized_requests=%s" % (len(samples), ascii_choices, n_ll, add_bos, tok))
print("| records | lm-eval acc | lm-eval acc_norm (chars) | lm-eval acc_bytes | estream score acc | "
      "score acc_norm_bytes | acc equal | acc_bytes = acc_norm_bytes | acc_norm = acc_norm_bytes | "
      "max abs diff of a choice's log-likelihood | lm-eval wall s (num_concurrent %s, batch %s) | "
      "score wall s |" % (conc, batch))
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
print("| %d | %.4f | %.4f | %.4f | %.4f | %.4f | %s | %s | %s | %.2g | %.1f | %.1f |" % (
    len(samples), lm["acc"], lm["acc_norm"], lm["acc_bytes"], es["acc"], es["acc_norm_bytes"],
    yn(eq_acc), yn(eq_bytes), yn(eq_norm), maxd, lm_s, score_s))
print("score: %s tokens, %.1f tokens/s" % (summary["tokens"], summary["tokens_per_second"]))
for b in bad[:20]:
    print("MISMATCH: " + b)
ok = not bad and eq_acc and eq_bytes and len(samples) == len(score)
sys.exit(0 if ok else 1)
EOF
