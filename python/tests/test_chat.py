"""Chats and reranking from Python against the estream CLI on the same records: Session.chat
and classify of messages against ``{"messages"}`` and ``{"messages", "labels"}`` records,
Session.rerank against ``{"query", "documents"}``, bit for bit; the errors, the CLI's messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import estream
from conftest import CHAT_TEMPLATES, cli_jsonl, f32_bits, g9

CHATS = [
    [{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
    [{"role": "user", "content": "Is the sky blue?"}, {"role": "assistant", "content": "Yes."},
     {"role": "user", "content": [{"type": "text", "text": "And grass?"},
                                  {"type": "text", "text": "Ünïcödé, 中文 🙂"}]}],
    [{"role": "user", "content": ""}],
]
SYSTEM = [{"role": "system", "content": "You are a judge."},
          {"role": "user", "content": "Which is better, A or B?"}]


def _chats(model: Path) -> list:
    return CHATS + ([SYSTEM] if "qwen" in model.name else [])


@pytest.mark.parametrize("which", ["chat_model", "chat_qwen"])
def test_chat_equals_cli(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model = request.getfixturevalue(which)
    chats = _chats(model)
    want = cli_jsonl("score", model, [{"messages": m} for m in chats], tmp_path, "--top", "5")
    with estream.Session(model) as s:
        got = s.chat_many(chats, top=5)
        alone = s.chat(chats[1], top=5)
    assert (alone.ids == got[1].ids).all()
    assert (f32_bits(alone.logprobs) == f32_bits(got[1].logprobs)).all()
    for g, w in zip(got, want):
        assert g.n_tokens == w["n_tokens"]
        assert g.ids.tolist() == [p[0] for p in w["next"]]
        assert (f32_bits(g.logprobs) == f32_bits([p[1] for p in w["next"]])).all()
        assert list(g.logprobs) == sorted(g.logprobs, reverse=True)


def test_chat_labels_equal_cli(chat_model: Path, tmp_path: Path) -> None:
    labels = ["yes", "no", " maybe so"]
    want = cli_jsonl("score", chat_model, [{"messages": m, "labels": labels} for m in CHATS],
                     tmp_path)
    with estream.Session(chat_model) as s:
        got = s.classify_many([(m, labels) for m in CHATS])
    for g, w in zip(got, want):
        assert [g9(x) for x in g.label_logprobs] == w["label_logprobs"]
        assert [g9(x) for x in g.probs] == w["probs"]
        assert g.label == w["label"] and g.labels == labels


def test_own_chat_template_equals_cli(chat_model: Path, tmp_path: Path) -> None:
    tmpl = (CHAT_TEMPLATES / "chatml.jinja").read_text(encoding="utf-8")
    want = cli_jsonl("score", chat_model, [{"messages": SYSTEM}], tmp_path, "--top", "3",
                     "--chat-template", str(CHAT_TEMPLATES / "chatml.jinja"))
    with estream.Session(chat_model) as s:
        g = s.chat(SYSTEM, top=3, template=tmpl)
        default = s.chat(CHATS[0], top=3)
    assert g.ids.tolist() == [p[0] for p in want[0]["next"]]
    assert (f32_bits(g.logprobs) == f32_bits([p[1] for p in want[0]["next"]])).all()
    assert default.n_tokens != g.n_tokens


def test_rerank_equals_cli(chat_model: Path, tmp_path: Path) -> None:
    items = [("what is a cat", ["A cat is a small animal.", "Paris is a city.", "Cats purr."]),
             ("capital of France", ["Paris is a city.", "Berlin"])]
    want = cli_jsonl("score", chat_model, [{"query": q, "documents": d} for q, d in items],
                     tmp_path)
    own = "Query: {{ query }}\nDocument: {{ document }}\n{{ instruction }}? Answer:"
    (tmp_path / "rr.jinja").write_text(own + "\n", encoding="utf-8")
    want_own = cli_jsonl("score", chat_model, [{"query": q, "documents": d, "instruction": "Rel"}
                                               for q, d in items], tmp_path,
                         "--rerank-template", str(tmp_path / "rr.jinja"))
    with estream.Session(chat_model) as s:
        got = s.rerank_many(items)
        one = s.rerank(*items[1])
        got_own = s.rerank_many(items, instruction="Rel", template=own)
    assert one == got[1]
    for g, w in zip(got + got_own, want + want_own):
        assert [g9(x) for x in g.scores] == w["scores"]
        assert g.ranking == w["ranking"]
        assert all(0 < x < 1 for x in g.scores)
        assert [g.scores[i] for i in g.ranking] == sorted(g.scores, reverse=True)
    assert got_own[0].scores != got[0].scores


def test_chat_errors_equal_cli(chat_model: Path, tmp_path: Path) -> None:
    """A chat or rerank record the CLI refuses: the same message, prefixed by where it is."""
    cases = [
        ({"messages": []}, lambda s: s.chat([])),
        ({"messages": [{"role": "wizard", "content": "x"}]},
         lambda s: s.chat([{"role": "wizard", "content": "x"}])),
        ({"messages": [{"role": "user", "content": 5}]},
         lambda s: s.chat([{"role": "user", "content": 5}])),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         lambda s: s.chat([{"role": "user", "content": [{"type": "image_url"}]}])),
        ({"messages": ["hi"]}, lambda s: s.chat(["hi"])),
        ({"messages": [{"role": "assistant", "content": "x"}]},  # the template raises
         lambda s: s.chat([{"role": "assistant", "content": "x"}])),
        ({"messages": [{"role": "user", "content": "x"}], "labels": []},
         lambda s: s.classify([{"role": "user", "content": "x"}], [])),
        ({"query": "q", "documents": []}, lambda s: s.rerank("q", [])),
        ({"query": "q", "documents": ["a", 3]}, lambda s: s.rerank("q", ["a", 3])),
        ({"query": 1, "documents": ["a"]}, lambda s: s.rerank(1, ["a"])),
    ]
    want = cli_jsonl("score", chat_model, [c for c, _ in cases], tmp_path, "--on-error", "skip")
    with estream.Session(chat_model) as s:
        for (rec, call), w in zip(cases, want):
            assert "error" in w, rec
            with pytest.raises(estream.RecordError) as e:
                call(s)
            msg = str(e.value)
            assert msg.split(": ", 1)[1] == w["error"], rec
        assert s.chat(CHATS[0], top=1).ids.size == 1  # still usable
        with pytest.raises(ValueError):
            s.chat(CHATS[0], top=0)
        with pytest.raises(ValueError):
            s.chat(CHATS[0], template="")
