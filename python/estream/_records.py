"""The record kinds of ``estream score`` and ``estream embed``, as sequences for
es_session_run, and their results once run: a transcription of src/records/score_rec.c and
src/records/embed_rec.c, so that every sequence (ids, score_from, outputs asked) is the one the
CLI builds for the same record, and every derived number (sums, argmaxes, renormalised
probabilities) is computed in the same order and precision.

DESIGN
- A Record is the list of its sequences (SeqSpec: the ids and the output arrays, numpy, which
  es_session_run writes through their addresses) and a function that makes the result from
  them. Records never share arrays, so any batch of them may run together.
- Text is handled as UTF-8 bytes, as the C code sees it: the whitespace moved from a context to
  its continuation is ASCII whitespace only (score_rec.c's is_space: Python's str.rstrip() on
  ASCII), and a choice's n_bytes is its UTF-8 length.
- A bad record raises ValueError with the CLI's message for it ("the text has no tokens", ...)
  prefixed by where it is in the caller's input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from . import _capi
from .model import Model
from .results import Choice, Classification, TextScore

TextLike = Union[str, bytes]
TextOrIds = Union[str, bytes, Sequence[int], np.ndarray]

# score_rec.c is_space(): ' ' \t \n \r \v \f and 0x1c..0x1f
_SPACE = frozenset(b" \t\n\r\v\f\x1c\x1d\x1e\x1f")
RULES = ("chosen", "chosen_norm_tokens", "chosen_norm_bytes")


class RecordError(ValueError):
    """A record that estream score or embed would refuse (the CLI's message)."""


@dataclass
class SeqSpec:
    """One es_seq: ids, where scoring starts, and the output arrays asked for."""

    ids: np.ndarray  # int32, contiguous
    score_from: int = 0
    token_logprob: Optional[np.ndarray] = None  # float32 [n]
    token_rank: Optional[np.ndarray] = None  # int32 [n]
    top: int = 0
    top_ids: Optional[np.ndarray] = None  # int32 [n, top]
    top_logprobs: Optional[np.ndarray] = None  # float32 [n, top]
    labels: Optional[np.ndarray] = None  # int32 [n_labels]
    label_logprobs: Optional[np.ndarray] = None  # float32 [n_labels]
    pooling: int = 0
    normalize: int = 0
    embedding: Optional[np.ndarray] = None  # float32 [n_embd] or [n, n_embd]

    def alloc_scores(self, top: int = 0) -> None:
        """The per-token outputs (score_rec.c alloc_outputs)."""
        n = len(self.ids)
        self.token_logprob = np.empty(n, dtype=np.float32)
        self.token_rank = np.empty(n, dtype=np.int32)
        if top > 0:
            self.top = top
            self.top_ids = np.full((n, top), -1, dtype=np.int32)
            self.top_logprobs = np.full((n, top), np.nan, dtype=np.float32)

    def fill(self, q: _capi.Seq) -> None:
        """Writes this sequence into the ctypes es_seq q (addresses of the arrays)."""
        q.ids = self.ids.ctypes.data
        q.n_ids = len(self.ids)
        q.score_from = self.score_from
        if self.token_logprob is not None:
            q.token_logprob = self.token_logprob.ctypes.data
            q.token_rank = self.token_rank.ctypes.data  # type: ignore[union-attr]
        if self.top_ids is not None:
            q.top_n = self.top
            q.top_ids = self.top_ids.ctypes.data
            q.top_logprobs = self.top_logprobs.ctypes.data  # type: ignore[union-attr]
        if self.labels is not None:
            q.labels = self.labels.ctypes.data
            q.n_labels = len(self.labels)
            q.label_logprobs = self.label_logprobs.ctypes.data  # type: ignore[union-attr]
        if self.embedding is not None:
            q.pooling = self.pooling
            q.normalize = self.normalize
            q.embedding = self.embedding.ctypes.data

    def sum(self) -> tuple[float, bool]:
        """score_rec.c seq_sum: the log-probs from score_from added in order in double, and
        whether every scored token was the top one."""
        s, g = 0.0, True
        start = self.score_from or 1
        lp = self.token_logprob.tolist()  # type: ignore[union-attr]
        rk = self.token_rank.tolist()  # type: ignore[union-attr]
        for i in range(start, len(lp)):
            s += lp[i]
            g = g and rk[i] == 1
        return s, g


@dataclass
class Record:
    """One record: its sequences and the function that makes its result from them."""

    seqs: list[SeqSpec]
    result: Callable[["Record"], object]
    n_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_tokens = sum(len(q.ids) for q in self.seqs)


def _bytes(s: TextLike, what: str) -> bytes:
    if isinstance(s, str):
        return s.encode("utf-8")
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    raise RecordError(f"{what} is not a string")


def _argmax(v: Sequence[float]) -> int:
    b = 0
    for i in range(1, len(v)):
        if v[i] > v[b]:  # strict: ties go to the lowest index
            b = i
    return b


class Builder:
    """Makes records for one model (the rules of score_rec.c and embed_rec.c)."""

    def __init__(self, model: Model) -> None:
        self.m = model
        self.bos = -1 if model.bos is None else model.bos
        self.eos = -1 if model.eos is None else model.eos

    # ---- shared checks (records.c) -------------------------------------------------------------
    def tok(self, data: bytes) -> np.ndarray:
        """Plain text: no BOS/EOS from the tokenizer, special-token text not parsed."""
        try:
            return self.m.tokenize_bytes(data, add_special=False, parse_special=False)
        except Exception as e:  # an estream.Error: the record's "cannot tokenize: ..."
            raise RecordError(f"cannot tokenize: {e}") from None

    def check_ids(self, ids: np.ndarray, what: str) -> None:
        """records.c rec_check_ids: 1..n_ctx tokens, ids in the vocabulary."""
        n, nv, nc = len(ids), self.m.n_vocab, self.m.n_ctx
        if n == 0:
            raise RecordError(f"{what} has no tokens")
        if n > nc:
            raise RecordError(f"{what} has {n} tokens, more than the model's context of {nc}")
        bad = np.flatnonzero((ids < 0) | (ids >= nv))
        if len(bad):
            i = int(bad[0])
            raise RecordError(f"{what}: id {int(ids[i])} at {i} is outside the vocabulary "
                              f"(0..{nv - 1})")

    def given_ids(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """records.c rec_ids: a non-empty list of vocabulary ids, used as given."""
        nv = self.m.n_vocab
        if len(ids) == 0:
            raise RecordError('"ids" is empty')
        if isinstance(ids, np.ndarray) and ids.ndim == 1 and np.issubdtype(ids.dtype, np.integer):
            if ((ids >= 0) & (ids < nv)).all():
                return np.ascontiguousarray(ids, dtype=np.int32)
        v = np.empty(len(ids), dtype=np.int32)
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < nv:
                raise RecordError(f'"ids"[{i}] is not an id of the vocabulary (0..{nv - 1})')
            v[i] = t
        return v

    # ---- sequences (score_rec.c text_seq, pair_seq) --------------------------------------------
    def text_seq(self, data: bytes) -> SeqSpec:
        """BOS (when the model adds one) + the text's tokens."""
        if not data:
            raise RecordError('"text" is empty')
        t = self.tok(data)
        bos = self.m.add_bos and self.bos >= 0
        ids = np.concatenate([np.array([self.bos], np.int32), t]) if bos else t
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        self.check_ids(ids, "the text")
        return SeqSpec(ids=ids)

    def pair_seq(self, ctx: bytes, cont: bytes, what: str) -> SeqSpec:
        """lm-evaluation-harness's _encode_pair of (ctx, cont): ids and score_from."""
        c = len(ctx)
        while c > 0 and ctx[c - 1] in _SPACE:
            c -= 1  # the whitespace goes to the continuation
        whole = ctx + cont
        w = self.tok(whole) if whole else np.empty(0, np.int32)
        nc = len(self.tok(ctx[:c])) if c else 0  # only its length counts, as in the harness
        nw = len(w)
        # the prefix: BOS when the model adds one; an empty context gets the harness's prefix
        # token (BOS, or EOS for a model without one)
        prefix = (self.bos if self.bos >= 0 else self.eos) if nc == 0 else self.bos
        add_bos = (self.m.add_bos or nc == 0) and prefix >= 0
        if nc == 0 and prefix < 0:
            raise RecordError(f"{what}: the context is empty and the model has neither BOS "
                              "nor EOS")
        if nw <= nc:
            raise RecordError(f"{what}: the continuation has no tokens")
        ids = np.concatenate([np.array([prefix], np.int32), w]) if add_bos else w
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        q = SeqSpec(ids=ids, score_from=nc + int(add_bos))
        self.check_ids(ids, what)
        return q

    @staticmethod
    def _capped(n: int) -> None:
        """records.c rec_finish: a record has at most ES_MAX_BATCH_SEQS sequences."""
        n = min(n, _capi.ES_MAX_BATCH_SEQS + 1)  # score_rec.c capped()
        if n > _capi.ES_MAX_BATCH_SEQS:
            raise RecordError(f"{n} sequences, more than {_capi.ES_MAX_BATCH_SEQS}")

    # ---- record kinds --------------------------------------------------------------------------
    def text(self, item: TextOrIds, top: int) -> Record:
        """{"text": S} or {"ids": [..]}: every token given the ones before it."""
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            q = self.text_seq(_bytes(item, '"text"'))
        else:
            v = self.given_ids(item)
            self.check_ids(v, '"ids"')
            q = SeqSpec(ids=v)
        q.score_from = 1
        q.alloc_scores(top)
        return Record([q], _text_result)

    def pair(self, ctx: TextLike, cont: TextLike) -> Record:
        """{"context": C, "continuation": X}."""
        q = self.pair_seq(_bytes(ctx, '"context"'), _bytes(cont, '"continuation"'),
                          "the continuation")
        q.alloc_scores()
        return Record([q], _pair_result)

    def choices(self, ctx: TextLike, choices: Sequence[TextLike], gold: Optional[int]) -> Record:
        """{"context": C, "choices": [X1, ..], "gold": G}: one continuation per choice."""
        cs = _bytes(ctx, '"context"')
        if isinstance(choices, (str, bytes)) or len(choices) == 0:
            raise RecordError('"choices" must be a non-empty array of strings')
        xs = [_bytes(x, f'"choices"[{i}]') for i, x in enumerate(choices)]
        n = min(len(xs), _capi.ES_MAX_BATCH_SEQS + 1)
        if gold is not None and (isinstance(gold, bool) or not isinstance(gold, int)
                                 or not 0 <= gold < n):
            raise RecordError(f'"gold" must be an index into "choices" (0..{n - 1})')
        seqs = []
        for i, x in enumerate(xs[:n]):
            q = self.pair_seq(cs, x, f"choice {i}")
            q.alloc_scores()
            seqs.append(q)
        self._capped(len(seqs))
        n_bytes = [len(x) for x in xs[:n]]
        return Record(seqs, lambda r: _choice_result(r, n_bytes, gold))

    def labels(self, text: TextLike, labels: Sequence[TextLike]) -> Record:
        """{"text": T, "labels": [L1, ..]}: the labels' next-token log-probs when every label is
        one token, else each label scored as a continuation."""
        ts = _bytes(text, '"text"')
        if isinstance(labels, (str, bytes)) or len(labels) == 0:
            raise RecordError('"labels" must be a non-empty array of strings')
        ls = [_bytes(x, f'"labels"[{i}]') for i, x in enumerate(labels)]
        if not ts:
            raise RecordError('"text" is empty')
        n = min(len(ls), _capi.ES_MAX_BATCH_SEQS + 1)
        one = np.empty(n, dtype=np.int32)
        one_token = True
        for i in range(n):  # stops at the first label that is not one token, as the C loop
            t = self.tok(ls[i]) if ls[i] else np.empty(0, np.int32)
            one_token = len(ls[i]) > 0 and len(t) == 1
            if not one_token:
                break
            one[i] = t[0]
        names = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                 for x in labels[:n]]
        if one_token:
            q = self.text_seq(ts)
            q.labels = one
            q.label_logprobs = np.empty(n, dtype=np.float32)
            self._capped(1)
            return Record([q], lambda r: _label_result(r, True, names))
        seqs = []
        for i in range(n):
            q = self.pair_seq(ts, ls[i], f"label {i}")
            q.alloc_scores()
            seqs.append(q)
        self._capped(len(seqs))
        return Record(seqs, lambda r: _label_result(r, False, names))

    def embedding(self, item: TextOrIds, pooling: int, normalize: bool) -> Record:
        """embed_rec.c: text tokenized as llama-embedding does (BOS/EOS as the tokenizer asks,
        special-token text recognised), or ids as given; one pooled row (a row per token with
        pooling none)."""
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            data = _bytes(item, '"text"')
            if not data:
                raise RecordError('"text" is empty')
            try:
                ids = self.m.tokenize_bytes(data, add_special=True, parse_special=True)
            except Exception as e:
                raise RecordError(f"cannot tokenize: {e}") from None
            what = "the text"
        else:
            ids = self.given_ids(item)
            what = '"ids"'
        self.check_ids(ids, what)
        rows = len(ids) if pooling == _capi.POOLING["none"] else 1
        q = SeqSpec(ids=np.ascontiguousarray(ids, dtype=np.int32), pooling=pooling,
                    normalize=int(bool(normalize)),
                    embedding=np.empty((rows, self.m.n_embd), dtype=np.float32))
        return Record([q], _embedding_result)


# ---- results (score_rec.c emit_*) ------------------------------------------------------------
def _text_result(r: Record) -> TextScore:
    q = r.seqs[0]
    s, _ = q.sum()
    rank = q.token_rank.copy()  # type: ignore[union-attr]
    rank[0] = 0
    return TextScore(ids=q.ids, logprobs=q.token_logprob, ranks=rank, sum=s,  # type: ignore[arg-type]
                     top_ids=q.top_ids, top_logprobs=q.top_logprobs)


def _pair_result(r: Record) -> tuple[float, bool]:
    return r.seqs[0].sum()


def _choice_result(r: Record, n_bytes: list[int], gold: Optional[int]) -> Choice:
    n = len(r.seqs)
    sums, ntok = [], []
    v: list[list[float]] = [[], [], []]  # [rule][choice]
    for i, q in enumerate(r.seqs):
        s, _ = q.sum()
        k = len(q.ids) - q.score_from
        sums.append(s)
        ntok.append(k)
        v[0].append(s)
        v[1].append(s / k)
        v[2].append(s / n_bytes[i] if n_bytes[i] else s)
    best = [_argmax(v[k]) for k in range(3)]
    correct = None if gold is None else {RULES[k]: best[k] == gold for k in range(3)}
    assert n == len(sums)
    return Choice(logprobs=sums, n_tokens=ntok, n_bytes=list(n_bytes), chosen=best[0],
                  chosen_norm_tokens=best[1], chosen_norm_bytes=best[2], gold=gold,
                  correct=correct)


def _label_result(r: Record, one_token: bool, names: list[str]) -> Classification:
    if one_token:
        raw = r.seqs[0].label_logprobs.tolist()  # type: ignore[union-attr]
    else:
        raw = [q.sum()[0] for q in r.seqs]
    mx = raw[0]
    for x in raw[1:]:
        mx = x if x > mx else mx
    z = 0.0
    for x in raw:
        z += math.exp(x - mx)
    probs = [math.exp(x - mx) / z for x in raw]
    return Classification(label_logprobs=raw, probs=probs, label=_argmax(raw), labels=names)


def _embedding_result(r: Record) -> np.ndarray:
    return r.seqs[0].embedding  # type: ignore[return-value]
