"""Builds the records of bench/lmeval_vs_score.sh from WikiText-2 (tokenized flavour).

usage: make_task.py TEXT N OUT_DIR
  TEXT     wikitext-2-test.txt;  N  records
Writes OUT_DIR/docs.jsonl (lm-eval's documents), OUT_DIR/score.jsonl (the same questions as
estream score records) and OUT_DIR/task/estream_wikitext_mc.yaml (from the template beside this
file). Deterministic: the same TEXT and N give the same files.

Each record: a paragraph (not a heading) of at least CTX + K words, evenly spread over the
file; context = its first CTX words joined by single spaces; the gold choice its next K words;
3 distractors = K-word spans of 3 other eligible paragraphs (random, seeded), none equal to
the gold one; the gold index random. lm-eval scores (lm_context, " " + choice), lm_context being the plain
context (the server puts BOS before it for a model that adds one, docs/prompts.md): its
_encode_pair keeps the context as is (no trailing whitespace) and tokenizes context + " " +
choice. The score record {"context": context + " ", "choices": [choice..]} gives estream score
the same pair: its trailing space moves to the front of each choice, as lm-eval's _encode_pair
would do, while "n_bytes" stays the choice's own UTF-8 length, which is what lm-eval's
acc_bytes divides by (and acc_norm, which divides by characters, on ASCII choices).
"""
import json
import os
import random
import sys

CTX, K, N_CHOICES = 40, 5, 4


def main():
    text, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    paras = []
    with open(text, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("="):
                continue
            w = s.split()
            if len(w) >= CTX + K:
                paras.append(w)
    if len(paras) < n + N_CHOICES:
        raise SystemExit("make_task: only %d paragraphs of %d+ words" % (len(paras), CTX + K))
    rng = random.Random(20261203)
    step = len(paras) / n
    picks = [int(i * step) for i in range(n)]
    os.makedirs(os.path.join(out, "task"), exist_ok=True)
    with open(os.path.join(out, "docs.jsonl"), "w", encoding="utf-8") as docs, \
            open(os.path.join(out, "score.jsonl"), "w", encoding="utf-8") as score:
        for r, p in enumerate(picks):
            w = paras[p]
            context = " ".join(w[:CTX])
            gold_text = " ".join(w[CTX:CTX + K])
            choices = [gold_text]
            while len(choices) < N_CHOICES:
                q = rng.randrange(len(paras))
                if q == p:
                    continue
                o = rng.randrange(len(paras[q]) - K + 1)
                c = " ".join(paras[q][o:o + K])
                if c not in choices:
                    choices.append(c)
            gold = rng.randrange(N_CHOICES)
            choices[0], choices[gold] = choices[gold], choices[0]
            docs.write(json.dumps({"id": r, "lm_context": context, "choices": choices,
                                   "gold": gold}, ensure_ascii=False) + "\n")
            score.write(json.dumps({"id": r, "context": context + " ", "choices": choices,
                                    "gold": gold}, ensure_ascii=False) + "\n")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "estream_wikitext_mc.yaml.in"), encoding="utf-8") as f:
        yaml = f.read().replace("@DATA@", json.dumps(os.path.abspath(os.path.join(out, "docs.jsonl"))))
    with open(os.path.join(out, "task", "estream_wikitext_mc.yaml"), "w", encoding="utf-8") as f:
        f.write(yaml)


if __name__ == "__main__":
    main()
