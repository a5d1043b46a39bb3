"""The package's numbers against the estream CLI's on the same inputs, bit for bit: tokenize,
score (texts, ids, --top), loglikelihood, choose, classify, embed (JSONL and .npy), ppl. The
same library runs underneath, so every float32 must have the same bits and every double the
same 9 significant digits the CLI writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import estream
from conftest import TEXTS, cli, cli_jsonl, f32_bits, g9


@pytest.fixture(scope="module")
def sessions(any_model: Path):
    """One resident session per model (2 threads, as the CLI runs here)."""
    with estream.Session(any_model, threads=2) as s:
        yield s


# ---- tokens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bos", [False, True])
def test_tokenize_equals_cli(any_model: Path, bos: bool) -> None:
    m = estream.Model(any_model, vocab_only=True)
    for text in TEXTS + [""]:
        args = ["tokenize", "-m", str(any_model), "-p", text] + (["--bos"] if bos else [])
        want = [int(t) for t in cli(*args).stdout.split()]
        assert m.tokenize(text, bos=bos) == want, text
        args.append("--no-parse-special")
        want = [int(t) for t in cli(*args).stdout.split()]
        assert m.tokenize(text, bos=bos, parse_special=False) == want, text


def test_detokenize_round_trip(any_model: Path) -> None:
    m = estream.Model(any_model)
    for text in TEXTS:
        ids = m.tokenize(text, parse_special=False)
        assert m.detokenize(ids) == text
        assert m.detokenize_bytes(ids) == text.encode()
    if m.bos is not None:
        assert m.tokenize("x", bos=True)[0] == m.bos
    with pytest.raises(IndexError):
        m.token_bytes(m.n_vocab)


# ---- score ----------------------------------------------------------------------------------
def _same_text_score(got: estream.TextScore, want: dict, top: int) -> None:
    assert got.ids.tolist() == want["ids"]
    assert (f32_bits(got.logprobs.tolist()) == f32_bits(want["logprobs"])).all()
    # position 0 has no score when nothing comes before it (a text's BOS, ids starting with
    # BOS); ids conditioned on an implicit BOS have one (docs/prompts.md)
    first = 1 if want["logprobs"][0] is None else 0
    assert bool(np.isnan(got.logprobs[0])) == (first == 1)
    assert got.greedy.tolist()[first:] == want["greedy"][first:]
    assert got.sum == pytest.approx(want["sum"], rel=1e-8) and g9(got.sum) == want["sum"]
    # the sum is the CLI's float32 log-probs added in order in double
    s = 0.0
    for v in want["logprobs"][first:]:
        s += float(np.float32(v))
    assert got.sum == s
    if top:
        assert got.top_ids is not None and got.top_logprobs is not None
        for i, row in enumerate(want["top"]):
            if row is None:
                continue
            assert got.top_ids[i].tolist() == [p[0] for p in row]
            assert (got.top_logprobs[i].view(np.uint32) == f32_bits([p[1] for p in row])).all()


@pytest.mark.parametrize("top", [0, 3])
def test_score_texts_equal_cli(sessions: estream.Session, any_model: Path, tmp_path: Path,
                               top: int) -> None:
    extra = ["--top", str(top)] if top else []
    want = cli_jsonl("score", any_model, [{"text": t} for t in TEXTS], tmp_path, *extra)
    got = sessions.score(TEXTS, top=top)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same_text_score(g, w, top)


def test_score_ids_equal_cli(sessions: estream.Session, any_model: Path, tmp_path: Path) -> None:
    m = sessions.model
    ids = [m.tokenize(t) for t in TEXTS] + [[1, 2, 3], [m.n_vocab - 1] * 5]
    want = cli_jsonl("score", any_model, [{"ids": v} for v in ids], tmp_path)
    got = sessions.score(ids)
    got_np = sessions.score([np.array(v, dtype=np.int64) for v in ids])
    for v, g, gn, w in zip(ids, got, got_np, want):
        _same_text_score(g, w, 0)
        assert g.ids.tolist() == w["ids"]  # as given: an implicit BOS is not among them
        if m.add_bos and v[0] != m.bos:  # conditioned on it: the first id has a score
            assert w["logprobs"][0] is not None
        assert (g.logprobs.view(np.uint32) == gn.logprobs.view(np.uint32)).all()


PAIRS = [
    ("Q: 2+2= ", "4"),  # trailing whitespace moves to the continuation
    ("The capital of France is", " Paris"),
    ("", "An empty context has BOS as its prefix"),
    ("Unicode context: café\n\n", "naïve"),
    ("tabs\t", "\tand more"),
    ("中文", "文本"),
]


def test_loglikelihood_equals_cli(sessions: estream.Session, any_model: Path,
                                  tmp_path: Path) -> None:
    want = cli_jsonl("score", any_model, [{"context": c, "continuation": x} for c, x in PAIRS],
                     tmp_path)
    got = sessions.loglikelihood(PAIRS)
    for (lp, greedy), w in zip(got, want):
        assert g9(lp) == w["logprob"]
        assert greedy == w["greedy"]
        assert isinstance(lp, float) and isinstance(greedy, bool)


CHOICES = [
    ("The sky is", [" blue", " green", " a very long choice of many tokens"], 0),
    ("Q: Which is a fruit?\nA:", [" apple", " chair", " café", " 🙂"], 0),
    ("Context with trailing space ", ["one", "two"], 1),
    ("", [" first", " second"], None),
]


def test_choose_equals_cli(sessions: estream.Session, any_model: Path, tmp_path: Path) -> None:
    recs = [{"context": c, "choices": ch} | ({} if g is None else {"gold": g})
            for c, ch, g in CHOICES]
    want = cli_jsonl("score", any_model, recs, tmp_path)
    got = sessions.choose_many(CHOICES)
    assert sessions.choose(*CHOICES[0]) == got[0]
    for g, w in zip(got, want):
        assert [g9(x) for x in g.logprobs] == w["logprobs"]
        assert g.n_tokens == w["n_tokens"] and g.n_bytes == w["n_bytes"]
        assert (g.chosen, g.chosen_norm_tokens, g.chosen_norm_bytes) == (
            w["chosen"], w["chosen_norm_tokens"], w["chosen_norm_bytes"])
        assert g.correct == w.get("correct")
    # a choice scores as its continuation
    lp, _ = sessions.loglikelihood([(CHOICES[0][0], CHOICES[0][1][1])])[0]
    assert lp == got[0].logprobs[1]


LABELS = [
    ("Great film! Sentiment:", [" positive", " negative"]),  # one token each on most models
    ("Great film!", ["a", "b", "c"]),  # one byte, one token
    ("The weather today is", [" sunny and warm", " cold", " raining heavily"]),  # multi-token
]


def test_classify_equals_cli(sessions: estream.Session, any_model: Path, tmp_path: Path) -> None:
    want = cli_jsonl("score", any_model, [{"text": t, "labels": ls} for t, ls in LABELS],
                     tmp_path)
    got = sessions.classify_many(LABELS)
    assert sessions.classify(*LABELS[2]) == got[2]
    for g, w, (_, ls) in zip(got, want, LABELS):
        assert [g9(x) for x in g.label_logprobs] == w["label_logprobs"]
        assert [g9(x) for x in g.probs] == w["probs"]
        assert g.label == w["label"] and g.labels == ls
        assert sum(g.probs) == pytest.approx(1.0)


# ---- embed ----------------------------------------------------------------------------------
@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("last", True), ("first", False),
                                               ("mean", False), ("none", True)])
def test_embed_equals_cli(sessions: estream.Session, any_model: Path, tmp_path: Path,
                          pooling: str, normalize: bool) -> None:
    extra = ["--pooling", pooling] + ([] if normalize else ["--no-normalize"])
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    items: list = TEXTS + [ids]
    recs = [{"text": t} for t in TEXTS] + [{"ids": ids}]
    want = cli_jsonl("embed", any_model, recs, tmp_path, *extra)
    got = sessions.embed(items, pooling=pooling, normalize=normalize)
    if pooling == "none":
        assert isinstance(got, list)
        for g, w in zip(got, want):
            assert g.shape == (w["n_tokens"], sessions.model.n_embd)
            assert (g.reshape(-1).view(np.uint32) ==
                    f32_bits([x for row in w["embedding"] for x in row])).all()
        return
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (len(items), sessions.model.n_embd)
    for g, w in zip(got, want):
        assert (g.view(np.uint32) == f32_bits(w["embedding"])).all()


def test_embed_equals_cli_npy(sessions: estream.Session, any_model: Path, tmp_path: Path) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.npy"
    import json

    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    cli("embed", "-m", str(any_model), "-f", str(src), "-o", str(dst), "-t", "2")
    want = np.load(dst)
    got = sessions.embed(TEXTS)
    assert got.shape == want.shape and (got.view(np.uint32) == want.view(np.uint32)).all()


# ---- perplexity -----------------------------------------------------------------------------
@pytest.mark.parametrize("ctx,chunks", [(128, 3), (64, None)])
def test_perplexity_equals_cli(any_model: Path, text_file: Path, tmp_path: Path, ctx: int,
                               chunks: int | None) -> None:
    # a few KiB of the text, so that "all chunks" stays short
    part = tmp_path / "part.txt"
    part.write_bytes(text_file.read_bytes()[:20000])
    args = ["ppl", "-m", str(any_model), "-f", str(part), "-c", str(ctx), "-t", "2", "--json"]
    if chunks:
        args += ["--chunks", str(chunks)]
    import json

    want = json.loads(cli(*args).stdout)
    with estream.Session(any_model, threads=2) as s:
        got = s.perplexity(part.read_text(encoding="utf-8"), ctx=ctx, chunks=chunks)
        again = s.perplexity(part.read_bytes(), ctx=ctx, chunks=chunks)
    assert "%.6f" % got.ppl == "%.6f" % want["ppl"]
    assert "%.8f" % got.nll == "%.8f" % want["nll"]
    assert (got.n_scored, got.chunks, got.n_tokens) == (want["n_scored"], want["chunks"],
                                                        want["n_tokens"])
    assert again == got


# ---- batches do not change anything ---------------------------------------------------------
def test_batches_and_budgets_give_the_same_numbers(tiny: Path) -> None:
    with estream.Session(tiny, threads=2) as s:
        want = s.score(TEXTS)
        emb = s.embed(TEXTS)
    # tiny batches (one record each), one thread, and the experts streamed through an arena
    for kw in ({"batch_tokens": 16}, {"threads": 1}, {"stream": True, "groups": 2, "banks": 2},
               {"mem": "2G"}):
        with estream.Session(tiny, **kw) as s:
            got = s.score(TEXTS)
            for g, w in zip(got, want):
                assert (g.logprobs.view(np.uint32) == w.logprobs.view(np.uint32)).all(), kw
                assert g.sum == w.sum
            assert (s.embed(TEXTS).view(np.uint32) == emb.view(np.uint32)).all(), kw


def test_streaming_session_equals_cli(small: Path, tmp_path: Path) -> None:
    """Experts streamed through an arena of 2 banks of 2 experts: the CLI's numbers."""
    recs = [{"text": t} for t in TEXTS]
    want = cli_jsonl("score", small, recs, tmp_path, "--groups", "2", "--banks", "2",
                     "--no-direct")
    with estream.Session(small, threads=2, groups=2, banks=2, direct_io=False) as s:
        got = s.score(TEXTS)
        st = s.stats()
    for g, w in zip(got, want):
        _same_text_score(g, w, 0)
    assert st["streaming"] == 1 and (st["groups"], st["banks"]) == (2, 2)
    assert st["bytes_read"] > 0


def test_implicit_bos_off_equals_cli(any_model: Path, tmp_path: Path) -> None:
    """implicit_bos=False scores ids exactly as given, as ``--no-implicit-bos``."""
    m = estream.Model(any_model)
    ids = [m.tokenize(t) for t in TEXTS[:2]]
    want = cli_jsonl("score", any_model, [{"ids": v} for v in ids], tmp_path,
                     "--no-implicit-bos")
    with estream.Session(m, implicit_bos=False) as s:
        for g, w in zip(s.score(ids), want):
            _same_text_score(g, w, 0)
            assert w["logprobs"][0] is None  # nothing before the first id
    m.close()
