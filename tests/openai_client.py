"""estream serve under the official OpenAI Python client (run by tools/openai-check.sh).

Every number the server gives through `openai.OpenAI(...).completions.create` and
`.embeddings.create` must equal (exactly, as float32) what `estream score --top 5` and
`estream embed` print for the same inputs on the same model. `.chat.completions.create(...,
max_tokens=1, logprobs=True, top_logprobs=5)` must give the next-token distribution of the
prompt that Python's jinja2 renders from the model's chat template (set up as Hugging Face's
apply_chat_template sets it up: tests/data/chat/make_expected.py): its tokens (`estream
tokenize`) run by `estream prefill --ids ... --dump-logits`, log-softmax in float64 here (the
server's float32 log-probs within 1e-5), and equal (float32) to `estream score`'s record of the
same messages. The token strings are checked
against the model file itself: this script reads the vocabulary from the GGUF and renders each
token as src/tok/vocab.c does (llama.cpp's token_to_piece with special = true), then spells it as
the server documents (the piece when it is valid UTF-8, else "bytes:\\xNN...").

usage: openai_client.py --base-url URL/v1 --api-key KEY --model-name NAME --estream BIN
                        --model MODEL.gguf
Prints "openai client: N checks passed", or every failed check and exits 1.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "chat"))
import make_expected  # noqa: E402  (jinja2 set up as Hugging Face's apply_chat_template)
from checks import Checks  # noqa: E402  (tests/checks.py, beside this script)

TOP = 5


# ---- the vocabulary, read from the GGUF ----

def read_gguf_vocab(path):
    """tokenizer.ggml.model, .tokens (bytes), .token_type and .bos/eos ids from a GGUF v2/v3."""
    want = {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}
    out = {}
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the metadata comes first; the vocabulary is a few MB
    if data[:4] != b"GGUF":
        raise SystemExit("%s: not a GGUF file" % path)
    version, = struct.unpack_from("<I", data, 4)
    if version < 2:
        raise SystemExit("%s: GGUF v%d is too old for this reader" % (path, version))
    _, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def string():
        nonlocal pos
        n, = struct.unpack_from("<Q", data, pos)
        s = data[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def value(t, keep):
        nonlocal pos
        if t in scalar:
            v, = struct.unpack_from(scalar[t], data, pos)
            pos += struct.calcsize(scalar[t])
            return v
        if t == 8:
            return string()
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if et in scalar and not keep:
                pos += n * struct.calcsize(scalar[et])
                return None
            if et == 5 and keep:
                v = np.frombuffer(data, dtype="<i4", count=n, offset=pos).tolist()
                pos += 4 * n
                return v
            return [value(et, keep) for _ in range(n)]
        raise SystemExit("%s: unknown GGUF value type %d" % (path, t))

    for _ in range(n_kv):
        key = string().decode()
        t, = struct.unpack_from("<I", data, pos)
        pos += 4
        v = value(t, key in want or key.startswith("tokenizer.ggml.") or
                  key == "tokenizer.chat_template")
        if key.startswith("tokenizer.ggml."):
            out[key[len("tokenizer.ggml."):]] = v
        elif key == "tokenizer.chat_template":
            out["chat_template"] = v
    return out


def gpt2_byte_map():
    """GPT-2's bytes_to_unicode, inverted: code point -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {c: b for b, c in zip(bs, cs)}


class Vocab:
    """Each token's piece as src/tok/vocab.c's render_piece makes it, and its JSON spelling."""

    def __init__(self, path):
        v = read_gguf_vocab(path)
        self.kind = v["model"].decode()
        self.tokens = v["tokens"]
        self.types = v.get("token_type") or [1] * len(self.tokens)
        self.bos = v.get("bos_token_id")
        self.eos = v.get("eos_token_id")
        self.chat_template = v.get("chat_template")
        self.add_bos = bool(v.get("add_bos_token"))  # as the synthetic models write it
        self._cp2b = gpt2_byte_map()
        self._pieces = {}

    def __len__(self):
        return len(self.tokens)

    def piece(self, i):
        p = self._pieces.get(i)
        if p is None:
            p = self._pieces[i] = self._render(i)
        return p

    def _render(self, i):
        text, ty = self.tokens[i], self.types[i]
        if ty in (2, 3, 4):  # unknown, control, user-defined: the text itself
            return text
        if ty == 1:  # normal
            if self.kind == "gpt2":
                out = bytearray()
                for ch in text.decode("utf-8", errors="replace"):
                    b = self._cp2b.get(ord(ch))
                    if b is not None:
                        out.append(b)
                    else:
                        out += b"[UNK_BYTE_0x" + ch.encode().hex().encode() + b"]"
                return bytes(out)
            return text.replace("\u2581".encode(), b" ")
        if ty == 6:  # byte: <0xXX>
            return bytes([int(text[3:5], 16)])
        return b""  # unused, undefined

    def spell(self, i):
        """The token's text in the server's JSON (sv_token_json)."""
        p = self.piece(i)
        if valid_utf8(p) and b"\0" not in p:
            return p.decode()
        return "bytes:" + "".join("\\x%02x" % b for b in p)


def utf8_char_len(b, i):
    """Length of the valid UTF-8 character at b[i:], 0 if none (RFC 3629)."""
    c = b[i]
    if c < 0x80:
        return 1
    for k in (2, 3, 4):
        try:
            b[i:i + k].decode("utf-8")
            return k
        except UnicodeDecodeError:
            pass
    return 0


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def utf8_clean(b):
    """Every byte that does not start a valid character (and NUL) -> U+FFFD, as the server does."""
    out, i = [], 0
    while i < len(b):
        k = utf8_char_len(b, i)
        if k and b[i] != 0:
            out.append(b[i:i + k].decode())
            i += k
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


# ---- the CLI ----

def run_cli(args, cmd, records, extra=()):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.jsonl")
        with open(path, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        p = subprocess.run([args.estream, cmd, "-m", args.model, "-f", path, "-t", "2", *extra],
                           capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("estream %s failed (%d): %s" % (cmd, p.returncode, p.stderr))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def f32(x):
    return None if x is None else np.float32(x)


def same_f32(a, b):
    """Exact equality as float32 (a JSON float of either side, or a float32 from base64)."""
    return (a is None and b is None) or (a is not None and b is not None and f32(a) == f32(b))


def expected_top(vocab, pairs, tok, lp):
    """The top_logprobs dict of one position: the best entries and the token itself, keyed by
    token text; tokens that share a text keep the best log-prob of them."""
    d = {}
    for i, v in [(i, v) for i, v in pairs if i != tok] + [(tok, lp)]:
        k = vocab.spell(i)
        if k not in d or v > d[k]:
            d[k] = v
    return d


def check_completion(c, args, vocab, prompt, label):
    """Asks for prompt (any of the four shapes); compares each choice with score's records."""
    resp = c.completions.create(model=args.model_name, prompt=prompt, echo=True, logprobs=TOP,
                                max_tokens=1, temperature=0)
    single = isinstance(prompt, str) or (isinstance(prompt[0], int))
    items = [prompt] if single else list(prompt)
    # a string prompt is its tokens (score's text record's, less the BOS the record puts first)
    # scored as an ids record: both conditioned on a BOS that is not echoed (docs/prompts.md)
    texts = [p for p in items if isinstance(p, str)]
    tok = iter(run_cli(args, "score", [{"text": p} for p in texts], []) if texts else [])
    recs = []
    for p in items:
        if isinstance(p, str):
            ids = next(tok)["ids"]
            recs.append({"ids": ids[1:] if vocab.bos is not None and ids[0] == vocab.bos else ids})
        else:
            recs.append({"ids": list(p)})
    score = run_cli(args, "score", recs, ["--top", str(TOP)])
    ck = args.checks
    ck.ok(resp.object == "text_completion", "%s: object is %r" % (label, resp.object))
    ck.ok(resp.model == args.model_name, "%s: model is %r" % (label, resp.model))
    ck.ok(len(resp.choices) == len(items), "%s: %d choices for %d prompts"
          % (label, len(resp.choices), len(items)))
    ext = []
    n_prompt = 0
    for i, ch in enumerate(sorted(resp.choices, key=lambda x: x.index)):
        s = score[i]
        ids = s["ids"]
        first = 1 if s["logprobs"][0] is None else 0  # 0: conditioned on an implicit BOS
        n_prompt += len(ids) + (1 - first)  # the implicit BOS runs too
        lab = "%s[%d]" % (label, i)
        lp = ch.logprobs
        ck.ok(ch.index == i, "%s: index %d" % (lab, ch.index))
        ck.ok(len(lp.tokens) == len(ids) + 1, "%s: %d tokens, score has %d ids (+1 generated)"
              % (lab, len(lp.tokens), len(ids)))
        ck.ok(lp.tokens[:len(ids)] == [vocab.spell(t) for t in ids],
              "%s: the echoed tokens are not score's ids %s" % (lab, ids))
        ck.ok(len(lp.text_offset) == len(lp.tokens) and
              all(a <= b for a, b in zip(lp.text_offset, lp.text_offset[1:])),
              "%s: text_offset %s" % (lab, lp.text_offset))
        ck.ok((lp.token_logprobs[0] is None) == (first == 1) and
              (lp.top_logprobs[0] is None) == (first == 1),
              "%s: position 0 is %r, score's %r" % (lab, lp.token_logprobs[0], s["logprobs"][0]))
        for j in range(first, len(ids)):
            ck.ok(same_f32(lp.token_logprobs[j], s["logprobs"][j]),
                  "%s: token %d log-prob %r, score %r" % (lab, j, lp.token_logprobs[j],
                                                          s["logprobs"][j]))
            want = expected_top(vocab, s["top"][j], ids[j], s["logprobs"][j])
            got = lp.top_logprobs[j]
            ck.ok(set(got) == set(want) and all(same_f32(got[k], want[k]) for k in want),
                  "%s: top_logprobs[%d] %r, from score %r" % (lab, j, got, want))
        ck.ok(ch.finish_reason in ("length", "stop"), "%s: finish_reason %r" % (lab, ch.finish_reason))
        ext.append((ids, lp, ch))
    # The generated token is the greedy next token after the prompt: score's "top" at the last
    # position of ids + [any id] holds the best next tokens (position j's alternatives are
    # predicted from the tokens before j), so one more score run gives all it should be.
    ext_score = run_cli(args, "score", [{"ids": ids + [ids[0]]} for ids, _, _ in ext],
                        ["--top", str(TOP)])
    for i, ((ids, lp, ch), es) in enumerate(zip(ext, ext_score)):
        lab = "%s[%d] generated" % (label, i)
        g, g_lp = es["top"][-1][0]
        ck.ok(lp.tokens[-1] == vocab.spell(g), "%s: token %r, the greedy one is %r"
              % (lab, lp.tokens[-1], vocab.spell(g)))
        ck.ok(same_f32(lp.token_logprobs[-1], g_lp),
              "%s: log-prob %r, score %r" % (lab, lp.token_logprobs[-1], g_lp))
        want = expected_top(vocab, es["top"][-1], g, g_lp)
        got = lp.top_logprobs[-1]
        ck.ok(set(got) == set(want) and all(same_f32(got[k], want[k]) for k in want),
              "%s: top_logprobs %r, from score %r" % (lab, got, want))
        text = choices_text(vocab, items[i], ids, g)
        ck.ok(ch.text == text, "%s: text %r, expected %r" % (lab, ch.text, text))
    u = resp.usage
    ck.ok(u.prompt_tokens == n_prompt and u.completion_tokens == len(items) and
          u.total_tokens == n_prompt + len(items), "%s: usage %r (prompt tokens %d)"
          % (label, u, n_prompt))


def choices_text(vocab, prompt, ids, g):
    """echo's text: a string prompt as sent, an id prompt as its pieces; then the new token."""
    head = prompt.encode() if isinstance(prompt, str) else b"".join(vocab.piece(t) for t in ids)
    return utf8_clean(head + vocab.piece(g))


def check_embeddings(c, args, inputs, label, **kw):
    raw = c.embeddings.with_raw_response.create(model=args.model_name, input=inputs, **kw)
    resp = raw.parse()
    asked = json.loads(raw.http_request.content).get("encoding_format")
    sent = json.loads(raw.text)["data"][0]["embedding"]
    ck = args.checks
    if "encoding_format" in kw:
        ck.ok(asked == kw["encoding_format"], "%s: the client asked for %r" % (label, asked))
    ck.ok(isinstance(sent, str) == (asked == "base64"),
          "%s: asked for %r, the server sent a %s" % (label, asked, type(sent).__name__))
    args.encodings_seen.add(asked)
    items = [inputs] if isinstance(inputs, str) or isinstance(inputs[0], int) else list(inputs)
    recs = [{"text": p} if isinstance(p, str) else {"ids": list(p)} for p in items]
    emb = run_cli(args, "embed", recs)
    ck.ok(len(resp.data) == len(items), "%s: %d vectors for %d inputs"
          % (label, len(resp.data), len(items)))
    for i, (d, e) in enumerate(zip(resp.data, emb)):
        v = d.embedding
        if isinstance(v, str):  # an old client that does not decode base64 itself
            import base64
            v = np.frombuffer(base64.b64decode(v), dtype="<f4").tolist()
        got = np.asarray(v, dtype=np.float32)
        want = np.asarray(e["embedding"], dtype=np.float32)
        ck.ok(d.index == i, "%s[%d]: index %d" % (label, i, d.index))
        ck.ok(got.shape == want.shape and bool(np.array_equal(got, want)),
              "%s[%d]: the vector differs from estream embed's (max |diff| %s)"
              % (label, i, np.max(np.abs(got - want)) if got.shape == want.shape else "shape"))
    n = sum(e["n_tokens"] for e in emb)
    ck.ok(resp.usage.prompt_tokens == n, "%s: usage.prompt_tokens %d, embed's tokens %d"
          % (label, resp.usage.prompt_tokens, n))


def check_chat(c, args, vocab, messages, label):
    """A chat's next-token distribution against the prompt jinja2 renders, run by the CLI."""
    ck = args.checks
    r = c.chat.completions.create(model=args.model_name, messages=messages, max_tokens=1,
                                  logprobs=True, top_logprobs=TOP, temperature=0)
    tmpl = make_expected.environment().from_string(vocab.chat_template.decode("utf-8"))
    special = {"bos_token": vocab.bos, "eos_token": vocab.eos}
    text = tmpl.render(messages=messages, tools=None, documents=None, add_generation_prompt=True,
                       **{k: (vocab.tokens[i].decode("utf-8") if i is not None else "")
                          for k, i in special.items()})
    p = subprocess.run([args.estream, "tokenize", "-m", args.model, "-p", text],
                       capture_output=True, text=True, check=True)
    ids = [int(x) for x in p.stdout.split()]
    if vocab.add_bos and vocab.bos is not None and (not ids or ids[0] != vocab.bos):
        ids = [vocab.bos] + ids
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "ids"), "w") as f:
            f.write(" ".join(map(str, ids)))
        subprocess.run([args.estream, "prefill", "-m", args.model, "--ids", os.path.join(d, "ids"),
                        "-t", "2", "--dump-logits", os.path.join(d, "logits")],
                       capture_output=True, check=True)
        logits = np.fromfile(os.path.join(d, "logits"), dtype="<f4").reshape(len(ids), -1)[-1]
    x = logits.astype(np.float64)
    lp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    best = sorted(range(len(lp)), key=lambda i: (-lp[i], i))[:TOP]
    ch = r.choices[0]
    ck.ok(r.usage.prompt_tokens == len(ids),
          "%s: prompt_tokens %d, jinja2's prompt is %d tokens" % (label, r.usage.prompt_tokens,
                                                                len(ids)))
    ck.ok(ch.message.role == "assistant", "%s: role %r" % (label, ch.message.role))
    ck.ok(ch.message.content == utf8_clean(vocab.piece(best[0])),
          "%s: content %r, the greedy token is %r" % (label, ch.message.content,
                                                      vocab.piece(best[0])))
    got = ch.logprobs.content
    ck.ok(len(got) == 1 and len(got[0].top_logprobs) == TOP,
          "%s: %d tokens in logprobs.content" % (label, len(got)))
    if not got:
        return
    ck.ok(got[0].token == vocab.spell(best[0]) and abs(got[0].logprob - lp[best[0]]) < 1e-5,
          "%s: token %r %r, want %r %r" % (label, got[0].token, got[0].logprob,
                                           vocab.spell(best[0]), lp[best[0]]))
    ck.ok(got[0].bytes == list(vocab.piece(best[0])), "%s: bytes %r" % (label, got[0].bytes))
    for k, (t, i) in enumerate(zip(got[0].top_logprobs, best)):
        ck.ok(t.token == vocab.spell(i) and abs(t.logprob - lp[i]) < 1e-5,
              "%s: top %d is %r %r, want %r %r" % (label, k, t.token, t.logprob, vocab.spell(i),
                                                   lp[i]))
    # estream score on the same messages: the same float32 numbers
    w = run_cli(args, "score", [{"messages": messages}], ("--top", str(TOP)))[0]
    ck.ok([vocab.spell(i) for i, _ in w["next"]] == [t.token for t in got[0].top_logprobs] and
          all(same_f32(v, t.logprob) for (_, v), t in zip(w["next"], got[0].top_logprobs)),
          "%s: estream score's next %r" % (label, w["next"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--estream", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    args.checks = ck = Checks()
    args.encodings_seen = set()
    vocab = Vocab(args.model)
    c = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)

    models = c.models.list()
    ck.ok([m.id for m in models.data] == [args.model_name], "models: %r" % models.data)

    texts = ["The quick brown fox jumps over the lazy dog.",
             "Robert <unk> is an English film , television and theatre actor .",
             "naïve café — 東京 😀 ",
             "x"]
    rng = random.Random(7)
    idl = [rng.randrange(len(vocab)) for _ in range(12)]
    idl2 = [[vocab.bos if vocab.bos is not None else 0, 72, 297, 108],
            [rng.randrange(len(vocab)) for _ in range(5)]]
    check_completion(c, args, vocab, texts[0], "completions(string)")
    check_completion(c, args, vocab, texts[1:], "completions(strings)")
    check_completion(c, args, vocab, idl, "completions(ids)")
    check_completion(c, args, vocab, idl2, "completions(id lists)")

    check_embeddings(c, args, texts, "embeddings(default encoding)")
    check_embeddings(c, args, texts[2], "embeddings(float, string)", encoding_format="float")
    check_embeddings(c, args, idl2, "embeddings(float, id lists)", encoding_format="float")

    chats = [
        [{"role": "system", "content": "You are a strict judge. Answer A or B."},
         {"role": "user", "content": "Which is larger, A: 3 or B: 5?"}],
        [{"role": "user", "content": "Bonjour, ça va ? 東京 😀"},
         {"role": "assistant", "content": "Oui."},
         {"role": "user", "content": ""}],
    ]
    if vocab.chat_template:
        for i, m in enumerate(chats):
            check_chat(c, args, vocab, m, "chat %d" % i)
    else:
        ck.ok(False, "the model has no tokenizer.chat_template")
    try:
        c.chat.completions.create(model=args.model_name, messages=chats[0], max_tokens=2)
        ck.ok(False, "chat max_tokens 2 was accepted")
    except openai.BadRequestError as e:
        ck.ok("prefill-only" in str(e), "chat max_tokens 2: %r" % str(e))
    try:
        c.chat.completions.create(model=args.model_name, messages=[{"role": "wizard",
                                                                    "content": "x"}])
        ck.ok(False, "an unknown role was accepted")
    except openai.BadRequestError as e:
        ck.ok("role" in str(e), "unknown role: %r" % str(e))

    ck.ok(args.encodings_seen == {"base64", "float"},
          "the client's default encoding is not base64 (asked: %r)" % args.encodings_seen)

    bad = openai.OpenAI(base_url=args.base_url, api_key=args.api_key + "-wrong", max_retries=0)
    try:
        bad.completions.create(model=args.model_name, prompt="x", max_tokens=1)
        ck.ok(False, "a wrong key was accepted")
    except openai.AuthenticationError as e:
        ck.ok(e.status_code == 401, "wrong key: status %d" % e.status_code)
    try:
        c.completions.create(model=args.model_name, prompt="x", max_tokens=5)
        ck.ok(False, "max_tokens 5 was accepted")
    except openai.BadRequestError as e:
        ck.ok("prefill-only" in str(e), "max_tokens 5: the message %r does not say prefill-only"
              % str(e))

    if ck.failed:
        print("openai client: %d checks passed, %d failed" % (ck.passed, len(ck.failed)))
        return 1
    print("openai client: %d checks passed" % ck.passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
