"""Records, batches and results through the library's job layer (include/estream.h "records,
batches and a session sized for a job"): what a record means (its sequences, tokenization, sums
and rules) is the C library's, the same code ``estream score``, ``estream embed`` and ``estream
serve`` run, so every number equals theirs by construction. This module only turns Python
values into es_record_spec, runs records in batches es_batch_pick forms, and copies the
es_record_result of each into the dataclasses of results.py.

DESIGN
- A Job owns the es_record handles it made and destroys them (close(), or when collected);
  results are copied out into numpy arrays and Python values first.
- Type checks of the Python arguments (a choice that is not a string) raise RecordError with
  the CLI's message for the same JSON; everything else is the library's message (es_record_create
  fails with ES_E_INVAL and es_last_error()).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64
from ctypes import c_size_t, c_void_p
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _capi
from .errors import Error
from .results import Choice, Classification, NextTokens, Rerank, TextScore

TextLike = Union[str, bytes]
TextOrIds = Union[str, bytes, Sequence[int], np.ndarray]
Messages = Sequence[dict]  # OpenAI's chat messages: [{"role": R, "content": C}, ...]

# es_record_kind
TEXT, IDS, PAIR, CHOICES, LABELS, EMBED, PROMPT, RERANK = range(8)
# es_bos_rule
BOS_IMPLICIT, BOS_AS_SENT = 0, 1
RULES = ("chosen", "chosen_norm_tokens", "chosen_norm_bytes")


class RecordError(ValueError):
    """A record that estream score or embed would refuse (the CLI's message)."""


class Str(Structure):
    """es_str."""

    _fields_ = [("ptr", c_char_p), ("len", c_size_t)]


class RecordSpec(Structure):
    """es_record_spec, field for field."""

    _fields_ = [
        ("kind", c_int),
        ("text", Str),
        ("context", Str),
        ("continuation", Str),
        ("items", c_void_p),  # const es_str *
        ("n_items", c_int),
        ("gold", c_int),
        ("ids", c_void_p),  # const int32_t *
        ("n_ids", c_size_t),
        ("top", c_int),
        ("next_top", c_int),
        ("bos", c_int),  # es_bos_rule
        ("messages", c_void_p),  # const es_chat_message *
        ("n_messages", c_int),
        ("template_text", c_char_p),
        ("query", Str),
        ("instruction", Str),
        ("rerank_labels", Str * 2),
        ("pooling", c_int),
        ("normalize", c_int),
    ]


class RecordResult(Structure):
    """es_record_result, field for field."""

    _fields_ = [
        ("kind", c_int),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_size_t),
        ("first_scored", c_size_t),
        ("logprobs", POINTER(c_float)),
        ("ranks", POINTER(c_int32)),
        ("top", c_int),
        ("top_ids", POINTER(c_int32)),
        ("top_logprobs", POINTER(c_float)),
        ("next_top", c_int),
        ("next_ids", POINTER(c_int32)),
        ("next_logprobs", POINTER(c_float)),
        ("sum", c_double),
        ("greedy", c_int),
        ("n_tokens", c_int64),
        ("n_items", c_int),
        ("item_logprobs", POINTER(c_double)),
        ("item_tokens", POINTER(c_int64)),
        ("item_bytes", POINTER(c_int64)),
        ("chosen", c_int * 3),
        ("gold", c_int),
        ("probs", POINTER(c_double)),
        ("label", c_int),
        ("ranking", POINTER(c_int)),
        ("embedding", POINTER(c_float)),
        ("n_embd", c_int),
    ]


class ChatMessage(Structure):
    """es_chat_message."""

    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class JobShape(Structure):
    """es_job_shape."""

    _fields_ = [
        ("longest", c_int64),
        ("most_seqs", c_int),
        ("total_tokens", c_int64),
        ("batch_tokens", c_int),
        ("head_outputs", c_int),
    ]


class JobSize(Structure):
    """es_job_size."""

    _fields_ = [("batch_tokens", c_int), ("max_seqs", c_int), ("max_tokens", c_int)]


FUNCTIONS = [
    ("es_record_create", c_int, [c_void_p, POINTER(RecordSpec), POINTER(c_void_p)]),
    ("es_record_destroy", None, [c_void_p]),
    ("es_record_n_seqs", c_int, [c_void_p]),
    ("es_record_n_tokens", c_int64, [c_void_p]),
    ("es_record_result_get", c_int, [c_void_p, POINTER(RecordResult)]),
    ("es_session_run_records", c_int, [c_void_p, POINTER(c_void_p), c_int]),
    ("es_batch_pick", c_int, [POINTER(c_int64), POINTER(c_int), c_int, c_int64, c_int,
                              POINTER(c_int)]),
    ("es_session_create_for_job", c_int, [c_void_p, POINTER(_capi.SessionParams),
                                          POINTER(JobShape), POINTER(c_void_p),
                                          POINTER(JobSize)]),
]


def _bytes(s: Any, what: str) -> bytes:
    if isinstance(s, str):
        return s.encode("utf-8")
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    raise RecordError(f"{what} is not a string")


def _strs(items: Any, name: str) -> list[bytes]:
    """A non-empty sequence of strings (the CLI's JSON check of "choices" / "labels")."""
    if isinstance(items, (str, bytes)) or len(items) == 0:
        raise RecordError(f'"{name}" must be a non-empty array of strings')
    return [_bytes(x, f'"{name}"[{i}]') for i, x in enumerate(items)]


ROLES = ("system", "developer", "user", "assistant", "tool")


def _content(c: Any, i: int) -> Optional[bytes]:
    """A message's content: a string, None, or text parts joined with a newline (the CLI's
    rule, records/chat_rec.c)."""
    if c is None:
        return None
    if isinstance(c, str):
        if "\0" in c:
            raise RecordError(f"messages[{i}].content holds a NUL character")
        return c.encode("utf-8")
    if not isinstance(c, (list, tuple)):
        raise RecordError(f"messages[{i}].content must be a string, null or a list of text "
                          "parts")
    texts = []
    for k, p in enumerate(c):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str):
            raise RecordError(f'messages[{i}].content[{k}] is not a content part with a "type"')
        if p["type"] != "text" or not isinstance(p.get("text"), str):
            raise RecordError(f'messages[{i}].content[{k}]: only text parts are supported '
                              f'("{p["type"]}")')
        if "\0" in p["text"]:
            raise RecordError(f"messages[{i}].content[{k}] holds a NUL character")
        texts.append(p["text"])
    return "\n".join(texts).encode("utf-8")


def chat_messages(messages: Any) -> tuple[Any, list[bytes]]:
    """OpenAI's messages as an es_chat_message array (and the bytes it points into)."""
    if isinstance(messages, (str, bytes, dict)) or not hasattr(messages, "__len__") or \
            len(messages) == 0:
        raise RecordError('"messages" must be a non-empty list of {"role", "content"}')
    arr = (ChatMessage * len(messages))()
    keep: list[bytes] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RecordError(f"messages[{i}] is not an object")
        role = m.get("role")
        if not isinstance(role, str):
            raise RecordError(f"messages[{i}].role must be a string")
        if role not in ROLES:
            raise RecordError(f'messages[{i}].role "{role[:40]}" is not one of system, '
                              "developer, user, assistant, tool")
        content = _content(m.get("content"), i)
        r = role.encode()
        keep += [r] + ([content] if content is not None else [])
        arr[i] = ChatMessage(r, content)
    return arr, keep


def given_ids(ids: Union[Sequence[int], np.ndarray], n_vocab: int) -> np.ndarray:
    """A non-empty list of vocabulary ids as int32 (the CLI's check of "ids")."""
    if len(ids) == 0:
        raise RecordError('"ids" is empty')
    if isinstance(ids, np.ndarray) and ids.ndim == 1 and np.issubdtype(ids.dtype, np.integer):
        if ((ids >= 0) & (ids < n_vocab)).all():
            return np.ascontiguousarray(ids, dtype=np.int32)
    v = np.empty(len(ids), dtype=np.int32)
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < n_vocab:
            raise RecordError(f'"ids"[{i}] is not an id of the vocabulary (0..{n_vocab - 1})')
        v[i] = t
    return v


class Job:
    """The records of one call: made from Python values, run in batches, read back."""

    def __init__(self, lib: ctypes.CDLL, model: Any, bos: int = BOS_IMPLICIT) -> None:
        self.lib = lib
        self.model = model
        self.bos = bos  # the BOS rule of ids records
        self.handles: list[int] = []
        self.makers: list[Any] = []  # per record: a function making its result

    # ---- records ---------------------------------------------------------------------------
    def _make(self, spec: RecordSpec, keep: Any, result: Any) -> None:
        """es_record_create(spec) (keep: the Python objects spec points into)."""
        h = c_void_p()
        st = self.lib.es_record_create(self.model.handle, ctypes.byref(spec), ctypes.byref(h))
        del keep
        if st == _capi.ES_E_INVAL:
            raise RecordError(_capi.last_error())
        if st != _capi.ES_OK:
            raise Error(st, _capi.last_error() or _capi.status_str(st))
        self.handles.append(h.value)
        self.makers.append(result)

    def text(self, item: TextOrIds, top: int) -> None:
        """{"text": S} or {"ids": [..]}: every token given the ones before it."""
        spec = RecordSpec(top=top, gold=-1)
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            data = _bytes(item, '"text"')
            spec.kind, spec.text = TEXT, Str(data, len(data))
            keep: Any = data
        else:
            keep = given_ids(item, self.model.n_vocab)
            spec.kind, spec.ids, spec.n_ids = IDS, keep.ctypes.data, len(keep)
            spec.bos = self.bos
        self._make(spec, keep, _text_result)

    def pair(self, ctx: TextLike, cont: TextLike, n_tokens: bool = False) -> None:
        """{"context": C, "continuation": X}: (logprob, greedy), lm-eval's, or with n_tokens
        (logprob, greedy, the continuation's tokens), estream score's fields."""
        c, x = _bytes(ctx, '"context"'), _bytes(cont, '"continuation"')
        spec = RecordSpec(kind=PAIR, context=Str(c, len(c)), continuation=Str(x, len(x)),
                          gold=-1)
        if n_tokens:
            self._make(spec, (c, x), lambda r: (r.sum, bool(r.greedy), r.n_tokens))
        else:
            self._make(spec, (c, x), lambda r: (r.sum, bool(r.greedy)))

    def choices(self, ctx: TextLike, choices: Sequence[TextLike], gold: Optional[int]) -> None:
        """{"context": C, "choices": [X1, ..], "gold": G}: one continuation per choice."""
        c = _bytes(ctx, '"context"')
        xs = _strs(choices, "choices")
        n = min(len(xs), _capi.ES_MAX_BATCH_SEQS + 1)
        if gold is not None and (isinstance(gold, bool) or not isinstance(gold, int)
                                 or not 0 <= gold < n):
            raise RecordError(f'"gold" must be an index into "choices" (0..{n - 1})')
        items = (Str * n)(*[Str(x, len(x)) for x in xs[:n]])
        spec = RecordSpec(kind=CHOICES, context=Str(c, len(c)), items=ctypes.addressof(items),
                          n_items=n, gold=-1 if gold is None else gold)
        self._make(spec, (c, xs, items), _choice_result)

    def labels(self, text: TextLike, labels: Sequence[TextLike]) -> None:
        """{"text": T, "labels": [L1, ..]}."""
        t = _bytes(text, '"text"')
        ls = _strs(labels, "labels")
        n = min(len(ls), _capi.ES_MAX_BATCH_SEQS + 1)
        names = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                 for x in labels[:n]]
        items = (Str * n)(*[Str(x, len(x)) for x in ls[:n]])
        spec = RecordSpec(kind=LABELS, text=Str(t, len(t)), items=ctypes.addressof(items),
                          n_items=n, gold=-1)
        self._make(spec, (t, ls, items), lambda r: _label_result(r, names))

    def chat(self, messages: Messages, top: int, template: Optional[bytes]) -> None:
        """{"messages": [..]}: the best next tokens after the rendered chat."""
        arr, keep = chat_messages(messages)
        spec = RecordSpec(kind=PROMPT, messages=ctypes.addressof(arr), n_messages=len(arr),
                          template_text=template, next_top=top, gold=-1, bos=self.bos)
        self._make(spec, (arr, keep), _next_result)

    def chat_labels(self, messages: Messages, labels: Sequence[TextLike],
                    template: Optional[bytes]) -> None:
        """{"messages": [..], "labels": [L1, ..]}: which label follows the rendered chat."""
        arr, keep = chat_messages(messages)
        ls = _strs(labels, "labels")
        n = min(len(ls), _capi.ES_MAX_BATCH_SEQS + 1)
        names = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                 for x in labels[:n]]
        items = (Str * n)(*[Str(x, len(x)) for x in ls[:n]])
        spec = RecordSpec(kind=LABELS, messages=ctypes.addressof(arr), n_messages=len(arr),
                          template_text=template, items=ctypes.addressof(items), n_items=n,
                          gold=-1)
        self._make(spec, (arr, keep, ls, items), lambda r: _label_result(r, names))

    def rerank(self, query: TextLike, documents: Sequence[TextLike],
               instruction: Optional[TextLike], template: Optional[bytes]) -> None:
        """{"query": Q, "documents": [D1, ..], "instruction": I}: each document's relevance."""
        if not isinstance(query, (str, bytes)):
            raise RecordError('"query" is not a string')
        q = _bytes(query, '"query"')
        ds = _strs(documents, "documents")
        n = min(len(ds), _capi.ES_MAX_BATCH_SEQS + 1)
        items = (Str * n)(*[Str(x, len(x)) for x in ds[:n]])
        ins = b"" if instruction is None else _bytes(instruction, '"instruction"')
        spec = RecordSpec(kind=RERANK, query=Str(q, len(q)), items=ctypes.addressof(items),
                          n_items=n, instruction=Str(ins, len(ins)), template_text=template,
                          gold=-1)
        self._make(spec, (q, ds, items, ins), _rerank_result)

    def embedding(self, item: TextOrIds, pooling: int, normalize: bool) -> None:
        """A pooled embedding of a text or of ids."""
        spec = RecordSpec(kind=EMBED, pooling=pooling, normalize=int(bool(normalize)), gold=-1)
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            data = _bytes(item, '"text"')
            spec.text = Str(data, len(data))
            keep: Any = data
        else:
            keep = given_ids(item, self.model.n_vocab)
            spec.ids, spec.n_ids = keep.ctypes.data, len(keep)
        none = pooling == _capi.POOLING["none"]
        self._make(spec, keep, lambda r: _embedding_result(r, none))

    # ---- running ---------------------------------------------------------------------------
    def shape(self) -> tuple[int, int, int]:
        """(longest record's tokens, most sequences of one, all tokens)."""
        toks = [self.lib.es_record_n_tokens(h) for h in self.handles]
        seqs = [self.lib.es_record_n_seqs(h) for h in self.handles]
        return max(toks, default=1), max(seqs, default=1), sum(toks)

    def run(self, run_batch: Any, batch_tokens: int, max_seqs: int, stop: Any) -> None:
        """Runs every record in batches es_batch_pick forms from the pending ones in order
        (run_batch(handles) runs one; stop() is checked between batches)."""
        pending = list(range(len(self.handles)))
        window = 4 * max_seqs
        while pending:
            stop()
            cand = pending[:window]
            n = len(cand)
            toks = (c_int64 * n)(*[self.lib.es_record_n_tokens(self.handles[i]) for i in cand])
            seqs = (c_int * n)(*[self.lib.es_record_n_seqs(self.handles[i]) for i in cand])
            pick = (c_int * n)()
            k = self.lib.es_batch_pick(toks, seqs, n, batch_tokens, max_seqs, pick)
            chosen = [cand[pick[j]] for j in range(k)]
            run_batch([self.handles[i] for i in chosen])
            taken = set(chosen)
            pending = [i for i in pending if i not in taken]

    def results(self) -> list[Any]:
        out = []
        for h, make in zip(self.handles, self.makers):
            r = RecordResult()
            st = self.lib.es_record_result_get(h, ctypes.byref(r))
            if st != _capi.ES_OK:
                raise Error(st, _capi.last_error())
            out.append(make(r))
        return out

    def close(self) -> None:
        for h in self.handles:
            self.lib.es_record_destroy(h)
        self.handles = []
        self.makers = []

    def __del__(self) -> None:
        if getattr(self, "handles", None):
            self.close()


# ---- results (copied out of the record before it is destroyed) ---------------------------------
def _arr(p: Any, n: int, dtype: Any) -> np.ndarray:
    return np.ctypeslib.as_array(p, shape=(n,)).astype(dtype, copy=True) if n else \
        np.empty(0, dtype=dtype)


def _text_result(r: RecordResult) -> TextScore:
    n, first = r.n_ids, r.first_scored
    ids = _arr(r.ids, n, np.int32)
    lp = _arr(r.logprobs, n, np.float32)
    rank = _arr(r.ranks, n, np.int32)
    rank[:first] = 0  # a first token with nothing before it
    lp[:first] = np.nan
    top_ids = top_lp = None
    if r.top > 0:
        top_ids = _arr(r.top_ids, n * r.top, np.int32).reshape(n, r.top)
        top_lp = _arr(r.top_logprobs, n * r.top, np.float32).reshape(n, r.top)
        top_ids[:first] = -1
        top_lp[:first] = np.nan
    return TextScore(ids=ids, logprobs=lp, ranks=rank, sum=r.sum, top_ids=top_ids,
                     top_logprobs=top_lp)


def _choice_result(r: RecordResult) -> Choice:
    n = r.n_items
    chosen = [r.chosen[k] for k in range(3)]
    gold = None if r.gold < 0 else r.gold
    correct = None if gold is None else {RULES[k]: chosen[k] == gold for k in range(3)}
    return Choice(logprobs=[r.item_logprobs[i] for i in range(n)],
                  n_tokens=[r.item_tokens[i] for i in range(n)],
                  n_bytes=[r.item_bytes[i] for i in range(n)], chosen=chosen[0],
                  chosen_norm_tokens=chosen[1], chosen_norm_bytes=chosen[2], gold=gold,
                  correct=correct)


def _label_result(r: RecordResult, names: list[str]) -> Classification:
    n = r.n_items
    return Classification(label_logprobs=[r.item_logprobs[i] for i in range(n)],
                          probs=[r.probs[i] for i in range(n)], label=r.label, labels=names)


def _next_result(r: RecordResult) -> NextTokens:
    return NextTokens(ids=_arr(r.next_ids, r.next_top, np.int32),
                      logprobs=_arr(r.next_logprobs, r.next_top, np.float32),
                      n_tokens=r.n_ids)


def _rerank_result(r: RecordResult) -> Rerank:
    n = r.n_items
    return Rerank(scores=[r.probs[i] for i in range(n)], ranking=[r.ranking[i] for i in range(n)])


def _embedding_result(r: RecordResult, none: bool) -> np.ndarray:
    rows = r.n_tokens if none else 1
    return _arr(r.embedding, rows * r.n_embd, np.float32).reshape(rows, r.n_embd)


_declared: set[int] = set()


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declares the job layer's functions on lib (once); returns lib."""
    if id(lib) not in _declared:
        for name, restype, argtypes in FUNCTIONS:
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _declared.add(id(lib))
    return lib
