"""estream in Ray Data: ``ds.map_batches(estream.ray.Scorer, ...)`` scores a dataset whose rows
are ``estream score`` records, with one estream.Session per actor::

    import ray, estream.ray
    ds = ray.data.read_json("records.jsonl")
    out = ds.map_batches(estream.ray.Scorer, fn_constructor_kwargs={"model": "olmoe.gguf",
                         "mem": "2G"}, compute=ray.data.ActorPoolStrategy(size=2),
                         num_cpus=4, batch_size=64, batch_format="numpy")

Each actor runs 4 threads there: without ``threads``, a Session runs OMP_NUM_THREADS of them,
which Ray sets to the actor's num_cpus (and to 1 where none is given).

This module does not import ray (``import estream`` never does): a Scorer is a callable class
that takes a batch (a dict of numpy arrays, or a pandas DataFrame) and returns it with columns
added, which is all map_batches asks.

DESIGN
- A row is a record of estream score. The record's kind and the checks of its members are
  score_rec_parse's (src/records/score_rec.c): "messages" makes a chat, else "query" a rerank,
  else "context" a pair or a multiple choice, else a text ({"text"}, {"ids"}, with "labels" a
  classification), with the CLI's messages for members that do not go together or have the
  wrong type. The record itself is the library's (es_record_create through the Session's Job,
  as Session.score and the other methods make it), so its tokenization, its checks (ids outside
  the vocabulary, a record longer than the context, a chat the template refuses) and every
  number are the C code's that estream score runs.
- The output columns are the fields estream score writes for each record (score_rec_emit),
  under the same names, made in one place (the _*_fields functions). A record the CLI refuses
  gets the CLI's message in the "error" column, as ``estream score --on-error skip`` writes it,
  and None in the others; a good record has error None. "error" is always added; the other
  columns are those the batch's records write (a column has None in rows of another kind).
- The records of a batch run as one job: es_batch_pick forms its batches in the rows' order, as
  the CLI's, so a batch of mixed kinds is one pass over the experts under a memory budget, and
  a refused record is left out without stopping the others.
- A column has a value in every row, so a null cell (None, NaN, pandas' NA) is an absent member:
  {"text": T, "ids": None} is a text. numpy gives an integer column with nulls as float64, so
  an integral float "gold" is that index. Strings must be text the CLI can read: a NUL or a lone
  surrogate is a record error.
- Values are JSON's, as in the CLI's line: lists, ints, bools, floats, None where the CLI writes
  null. float32 results (a text's logprobs, "top", "next") are the float32 values exactly (as
  Python floats), double results (sums, probabilities) in full; the CLI prints both with 9
  significant digits. One shape differs: the CLI's [id, logprob] pairs of "top" and "next" are
  {"id": id, "logprob": logprob}, because Arrow, which holds Ray's blocks, makes a list of one
  type and would turn the ids into floats.
- Columns of one kind have one Arrow type. A batch that mixes kinds writes "greedy" as a list (a
  text) and a bool (a pair), "n_tokens" as an int (a pair, a chat) and a list (choices): Ray keeps
  such a column as Python objects (its fallback, with a warning). In the numpy format, the
  record's list members ("choices", "messages", ...) come back as lists, not numpy's arrays of
  arrays, which Ray could only pickle.
- An input column named like an output field would be overwritten, so it is refused (rename
  it, or give prefix=), except "ids": an ids record's output "ids" is its input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import numpy as np

from . import _capi, _job
from ._job import Job, RecordError
from .session import Session, _template

#: every field estream score may write, and "error"
OUTPUT_FIELDS = ("ids", "logprobs", "sum", "greedy", "top", "logprob", "n_tokens", "n_bytes",
                 "chosen", "chosen_norm_tokens", "chosen_norm_bytes", "correct",
                 "label_logprobs", "probs", "label", "next", "scores", "ranking", "error")
#: the members of a record this module reads; other columns (an "id", metadata) pass through
RECORD_KEYS = ("text", "ids", "context", "continuation", "choices", "gold", "labels",
               "messages", "query", "documents", "instruction")

Fields = Callable[[Any], dict]  # a record's result -> its output fields


class Scorer:
    """A callable class for ``ray.data.Dataset.map_batches``: one Session per instance (per
    actor), records in, the fields of ``estream score`` out.

    model, mem, threads and **session_kwargs: as estream.Session (implicit_bos=False is
    --no-implicit-bos; batch_tokens, the streaming options). top: alternatives per position
    of text records ("top", --top N) and the next tokens of chat records (N, or 10).
    chat_template, rerank_template: Jinja text for chat and rerank records (--chat-template,
    --rerank-template take a file). prefix: put before every output column's name.
    """

    def __init__(self, model: Any, mem: Union[None, str, int] = None,
                 threads: Optional[int] = None, *, top: int = 0,
                 chat_template: Optional[str] = None, rerank_template: Optional[str] = None,
                 prefix: str = "", **session_kwargs: Any) -> None:
        if isinstance(top, bool) or not isinstance(top, int) or \
                not 0 <= top <= _capi.ES_MAX_TOP:
            raise ValueError(f"top must be 0..{_capi.ES_MAX_TOP}, not {top!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a string, not {prefix!r}")
        self.top = top
        self.chat_template = _template(chat_template)
        self.rerank_template = _template(rerank_template)
        self.prefix = prefix
        self.session = Session(model, mem, threads, **session_kwargs)

    def __call__(self, batch: Any) -> Any:
        """The batch with the output columns added (a dict of numpy arrays in, one out; a
        DataFrame in, a copy out)."""
        names, columns, n = _read(batch)
        taken = set(names) & {self.prefix + f for f in OUTPUT_FIELDS if f != "ids" or
                              self.prefix}
        if taken:
            raise ValueError(f"the batch has columns named like estream score's output "
                             f"({', '.join(sorted(taken))}); rename them, or give "
                             f"Scorer(prefix=...) a prefix for the output columns")
        job = self.session._job()
        makers: list[Optional[Fields]] = [None] * n
        errors: list[Optional[str]] = [None] * n
        for i in range(n):
            try:
                rec = {}
                for k in RECORD_KEYS:
                    v = _plain(columns[k][i], k) if k in columns else None
                    if v is not None:
                        rec[k] = v
                makers[i] = self._add(job, rec)
            except RecordError as e:
                errors[i] = str(e)
        results = iter(self.session._run(job))  # the good records, in order
        out = [{"error": e} if m is None else {**m(next(results)), "error": None}
               for m, e in zip(makers, errors)]
        return _write(batch, columns, out, self.prefix)

    def close(self) -> None:
        """Destroys the session (an actor's ends with its process anyway)."""
        self.session.close()

    # ---- a record: score_rec_parse's rules, then the Job's record ---------------------------
    def _add(self, job: Job, r: dict) -> Fields:
        """Adds the record r (its members that are not null) to job; returns what makes its
        output fields from its result. RecordError with the CLI's message for a bad one."""
        if "messages" in r:
            return self._chat(job, r)
        if "query" in r:
            return self._rerank(job, r)
        if "context" in r:
            return _context(job, r)
        return self._text(job, r)

    def _chat(self, job: Job, r: dict) -> Fields:
        if any(k in r for k in ("text", "ids", "context", "query")):
            raise RecordError('"messages" goes alone or with "labels", not with "text", "ids", '
                              '"context" or "query"')
        _job.chat_messages(r["messages"])  # the messages are checked before the labels
        if "labels" in r:
            labels = _strings(r, "labels")
            job.chat_labels(r["messages"], labels, self.chat_template)
            return _labels_fields
        job.chat(r["messages"], self.top or 10, self.chat_template)
        return _next_fields

    def _rerank(self, job: Job, r: dict) -> Fields:
        if not isinstance(r["query"], str):
            raise RecordError('"query" is not a string')
        if "documents" not in r:
            raise RecordError('"query" needs "documents"')
        docs = _strings(r, "documents")
        ins = r.get("instruction")
        if ins is not None and not isinstance(ins, str):
            raise RecordError('"instruction" is not a string')
        job.rerank(r["query"], docs, ins, self.rerank_template)
        return _rerank_fields

    def _text(self, job: Job, r: dict) -> Fields:
        if "continuation" in r or "choices" in r:
            raise RecordError('"%s" needs a "context"'
                              % ("continuation" if "continuation" in r else "choices"))
        text, ids = r.get("text"), r.get("ids")
        if text is not None and ids is not None:
            raise RecordError('give "text" or "ids", not both')
        if text is None and ids is None:
            raise RecordError('no "text", "ids" or "context" member')
        if text is not None and not isinstance(text, str):
            raise RecordError('"text" is not a string')
        if "labels" in r:
            if text is None:
                raise RecordError('"labels" go with "text"')
            labels = _strings(r, "labels")
            if text == "":
                raise RecordError('"text" is empty')
            job.labels(text, labels)
            return _labels_fields
        if text is None and not isinstance(ids, list):
            raise RecordError('"ids" is not an array')
        job.text(text if text is not None else ids, self.top)
        return _text_fields


def _context(job: Job, r: dict) -> Fields:
    """{"context", "continuation"} or {"context", "choices", "gold"}."""
    if any(k in r for k in ("text", "ids", "labels")):
        raise RecordError('"context" goes with "continuation" or "choices", not with "text", '
                          '"ids" or "labels"')
    if not isinstance(r["context"], str):
        raise RecordError('"context" is not a string')
    if ("continuation" in r) == ("choices" in r):
        raise RecordError('"context" needs "continuation" or "choices" (one of them)')
    if "continuation" in r:
        if not isinstance(r["continuation"], str):
            raise RecordError('"continuation" is not a string')
        job.pair(r["context"], r["continuation"], n_tokens=True)
        return _pair_fields
    choices = _strings(r, "choices")
    gold = r.get("gold")
    if isinstance(gold, float) and gold.is_integer():  # numpy's integers with nulls
        gold = int(gold)
    job.choices(r["context"], choices, gold)
    return _choices_fields


def _strings(r: dict, name: str) -> list[str]:
    """A member that must be a non-empty list of strings (the CLI's string_list)."""
    v = r[name]
    if not isinstance(v, list) or not v:
        raise RecordError(f'"{name}" must be a non-empty array of strings')
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise RecordError(f'"{name}"[{i}] is not a string')
    return v


# ---- the output fields: score_rec_emit's, one function per kind ------------------------------
def _num(v: Any) -> Optional[float]:
    """A float result as the CLI writes it: the number, or None (null) when not finite."""
    v = float(v)
    return v if math.isfinite(v) else None


def _pairs(ids: np.ndarray, lps: np.ndarray) -> list:
    """A "top" row or "next": the CLI's [id, logprob] pairs as {"id", "logprob"} (an Arrow list
    holds one type: [id, logprob] would make the ids floats)."""
    return [{"id": int(i), "logprob": _num(v)} for i, v in zip(ids.tolist(), lps.tolist())]


def _text_fields(x: Any) -> dict:  # TextScore
    scored = (x.ranks != 0).tolist()  # rank 0: a first token with nothing before it
    out = {"ids": x.ids.tolist(),
           "logprobs": [_num(v) if s else None for v, s in zip(x.logprobs.tolist(), scored)],
           "sum": _num(x.sum),
           "greedy": [r == 1 if s else None for r, s in zip(x.ranks.tolist(), scored)]}
    if x.top_ids is not None:
        out["top"] = [_pairs(i, v) if s else None
                      for i, v, s in zip(x.top_ids, x.top_logprobs, scored)]
    return out


def _pair_fields(x: Any) -> dict:  # (logprob, greedy, n_tokens)
    return {"logprob": _num(x[0]), "greedy": x[1], "n_tokens": int(x[2])}


def _choices_fields(x: Any) -> dict:  # Choice
    out = {"logprobs": [_num(v) for v in x.logprobs], "n_tokens": list(x.n_tokens),
           "n_bytes": list(x.n_bytes), "chosen": x.chosen,
           "chosen_norm_tokens": x.chosen_norm_tokens, "chosen_norm_bytes": x.chosen_norm_bytes}
    if x.correct is not None:
        out["correct"] = dict(x.correct)
    return out


def _labels_fields(x: Any) -> dict:  # Classification
    return {"label_logprobs": [_num(v) for v in x.label_logprobs],
            "probs": [_num(v) for v in x.probs], "label": x.label}


def _next_fields(x: Any) -> dict:  # NextTokens
    return {"n_tokens": int(x.n_tokens), "next": _pairs(x.ids, x.logprobs)}


def _rerank_fields(x: Any) -> dict:  # Rerank
    return {"scores": [_num(v) for v in x.scores], "ranking": list(x.ranking)}


# ---- batches ---------------------------------------------------------------------------------
def _read(batch: Any) -> tuple[list[str], dict[str, list], int]:
    """The batch's column names, its record members' columns as lists, and its rows."""
    if isinstance(batch, Mapping):  # batch_format="numpy": a dict of arrays
        names = list(batch)
        n = len(batch[names[0]]) if names else 0
        return names, {k: list(batch[k]) for k in names if k in RECORD_KEYS}, n
    _pandas(batch)
    names = [str(k) for k in batch.columns]
    return names, {k: batch[k].tolist() for k in names if k in RECORD_KEYS}, len(batch)


def _pandas(batch: Any) -> Any:
    """pandas, when batch is a DataFrame; TypeError otherwise."""
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is None or not isinstance(batch, pd.DataFrame):
        raise TypeError('estream.ray.Scorer takes batch_format="numpy" (a dict of arrays) or '
                        f'"pandas" (a DataFrame), not {type(batch).__name__}')
    return pd


def _write(batch: Any, given: dict[str, list], out: list[dict], prefix: str) -> Any:
    """batch with a column for each output field of out's records, and "error" last."""
    names = {k: None for o in out for k in o if k != "error"}
    names["error"] = None
    cols = {}
    for name in names:
        col = np.empty(len(out), dtype=object)
        # a row that does not write "ids" keeps its own (a bad ids record's)
        keep = given.get("ids") if name == "ids" and not prefix else None
        for i, o in enumerate(out):
            col[i] = o[name] if name in o else (_plain(keep[i], None) if keep else None)
        cols[prefix + name] = col
    if isinstance(batch, Mapping):
        # numpy's arrays of arrays (a list column such as "choices" or "messages") do not go
        # back into Arrow (Ray would pickle them): the record members go back as lists
        lists = {}
        for k, v in given.items():
            if getattr(batch[k], "dtype", None) == object:
                lists[k] = np.empty(len(v), dtype=object)
                lists[k][:] = [_plain(x, None) for x in v]
        return {**batch, **lists, **cols}
    pd = _pandas(batch)
    res = batch.copy()
    for k, col in cols.items():
        res[k] = pd.Series(col, index=res.index, dtype=object)
    return res


def _plain(v: Any, key: Optional[str]) -> Any:
    """A cell as the JSON value it stands for: numpy arrays and scalars, tuples, pandas' NA as
    lists, Python numbers and None; a string a JSON record cannot hold is a RecordError."""
    if v is None:
        return None
    if isinstance(v, str):
        if key is not None:
            if "\0" in v:
                raise RecordError(f'"{key}" holds a NUL character')
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordError(f'invalid UTF-8 in "{key}" (a lone surrogate)') from None
        return str(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (np.ndarray, list, tuple)):
        return [_plain(x, key) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x, key) for k, x in v.items()}
    if type(v).__name__ in ("NAType", "NaTType"):  # pandas' missing values
        return None
    return v
