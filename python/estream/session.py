"""estream.Session: runs scoring, embeddings and perplexity on a model through the library's job
layer, as ``estream score`` and ``estream embed`` do.

DESIGN
- Records, batches and sizing are the library's (include/estream.h "records, batches and a
  session sized for a job"; _job.py binds them): es_record_create makes each record (what it
  means, its tokenization and its numbers are the C code the CLI and the server run),
  es_batch_pick forms the batches from the pending records in the caller's order, and
  es_session_create_for_job sizes the es_session: the given batch_tokens, or under a memory
  budget the largest batch that fits, stepping down to the smallest that works. The outputs do
  not depend on the batches (es_session_run's batch invariance), so they equal the CLI's for any
  batching.
- The es_session is made when the Session is (so an impossible budget fails at once) and made
  again, larger, when a call needs more (a longer record, a record with more sequences, a
  perplexity context, which under a budget also counts its ctx rows of logits); the old one is
  destroyed first, so a budget is never held twice; sizes only grow.
- Ctrl-C: a call made from the main thread installs, for its duration, a SIGINT handler that
  only sets a flag; the abort callback (es_session_params.abort_cb, called before each layer
  and each chunk of the head, on the calling thread) returns 1 once it is set, es_session_run
  stops with ES_E_CANCELLED within about one layer's time, and after the previous handler is
  restored the call raises KeyboardInterrupt (or calls the caller's own handler). Nothing is
  raised inside the callback (ctypes would print and swallow it). Calls from other threads
  leave signals alone; Session.cancel() stops them from anywhere.
- ctypes releases the GIL for every library call, so other Python threads run during a
  prefill; the abort callback takes the GIL back briefly once per layer.
- A session is used by one thread at a time: calls are serialised by a lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from . import _capi, _job
from ._job import Job, Messages, RecordError, TextLike, TextOrIds
from .errors import Cancelled, Error, check
from .model import Model, PathLike
from .results import Choice, Classification, NextTokens, Perplexity, Rerank, TextScore


def parse_size(v: Union[str, int], model_path: Optional[str] = None) -> int:
    """A memory budget in bytes, as ``--mem`` reads it (es_mem_budget_parse, one reading for
    both): an int is bytes; a string is a number with an optional unit K, M, G, T (powers of
    1024; KiB.. and B too) or % (of the model file, model_path), e.g. "600M", "1.5G", "25%",
    or "auto": 80 % of the memory this process may use (estream.memory_limit()) where the model
    file is larger than that, else 0 (no budget: resident). ValueError for anything else;
    OSError when the model file's size cannot be read."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"mem: expected a size such as 600M, 1.5G, 25% or auto, got {v!r}")
    if isinstance(v, int):
        if v < 1 or v > 10**18:
            raise ValueError(f"mem: {v} is out of range")
        return v
    out = ctypes.c_uint64(0)
    path = None if model_path is None else os.fsencode(model_path)
    try:
        spec = v.encode()
    except UnicodeEncodeError:
        raise ValueError(f"mem: expected a size such as 600M, 1.5G, 25% or auto, got {v!r}") \
            from None
    if "\0" in v:
        raise ValueError(f"mem: expected a size such as 600M, 1.5G, 25% or auto, got {v!r}")
    st = _capi.load().es_mem_budget_parse(spec, path, ctypes.byref(out))
    if st == _capi.ES_E_IO:
        raise OSError(f"mem: {_capi.last_error()}")
    if st != _capi.ES_OK:
        raise ValueError(f"mem: {_capi.last_error()}")
    return out.value


def memory_limit() -> tuple[int, str]:
    """(bytes, source): the memory this process may use (es_memory_limit: MemTotal, or a
    cgroup's lower limit as docker --memory, Kubernetes and Slurm set, or ESTREAM_MEM_LIMIT),
    and which of "MemTotal", "cgroup", "ESTREAM_MEM_LIMIT" set it; (0, "") if unknown."""
    src = ctypes.c_char_p()
    n = _capi.load().es_memory_limit(ctypes.byref(src))
    return int(n), (src.value or b"").decode()


class _Stop(Exception):
    """Raised inside a call to leave it after a cancel or a Ctrl-C."""


class _Flag:
    """The abort request, shared by the session and its abort callback (a separate object, so
    that the callback does not hold the session: no cycle, and a session dropped is destroyed
    at once, before its model)."""

    __slots__ = ("abort", "sigint")

    def __init__(self) -> None:
        self.abort = False  # set by cancel() or the SIGINT handler; read by the callback
        self.sigint = False  # the SIGINT handler fired


def _abort_callback(flag: _Flag) -> Any:
    def cb(user: Optional[int]) -> int:
        return 1 if flag.abort else 0  # never raises: ctypes would print and swallow it

    return _capi.ABORT_FN(cb)


class Session:
    """A run state on a model: thread pool, buffers and, under a memory budget, the expert
    streamer (es_session_create).

    model:        an estream.Model, or a path (then the session opens and owns the model)
    mem:          memory budget: None (resident), bytes, or "600M" / "1.5G" / "25%" / "auto" as
                  --mem (parse_size)
    threads:      compute threads (None: the library's default, as the CLI's -t: OMP_NUM_THREADS,
                  else one per physical core this process may use, within its cgroup CPU quota)
    batch_tokens: tokens per batch (None: 2048, or under mem the largest of 4096..512 that fits)
    reference:    the single-threaded reference path (no budget or streaming)
    kernels:      force a kernel table ("scalar", "avx2", ...; None: the best available)
    tune:         "auto" (with mem and no groups/banks/queue_depth, MODEL.tune when it exists
                  and applies, as the CLI does), None (the default rule) or a tune file's path
    streaming:    stream, groups, banks, queue_depth, policy ("early", "after-routing",
                  "on-demand"), io_limit (MB/s: emulated slower storage), io_backend ("auto",
                  "io_uring", "pread"), direct_io, verify_checksums, trace (a Chrome trace
                  path): as the CLI's streaming options (io_limit, io_backend other than auto,
                  direct_io=False and a policy imply streaming, as there)
    reserve_bytes: memory the caller will allocate during the session, counted under the budget
    implicit_bos: ids that do not start with BOS are conditioned on one that is not theirs (the
                  model's tokenizer adding BOS; docs/prompts.md), as ``estream score``; False:
                  scored exactly as given (``--no-implicit-bos``)

    Errors raise estream.Error with the library's message (an impossible budget: ES_E_BUDGET
    with the smallest budget that works). Use as a context manager, or call close().
    """

    def __init__(self, model: Union[Model, PathLike], mem: Union[None, str, int] = None,
                 threads: Optional[int] = None, batch_tokens: Optional[int] = None, *,
                 reference: bool = False, kernels: Optional[str] = None,
                 tune: Optional[str] = "auto", stream: bool = False, groups: int = 0,
                 banks: int = 0, queue_depth: int = 0, policy: Optional[str] = None,
                 io_limit: Optional[float] = None, io_backend: str = "auto",
                 direct_io: bool = True, verify_checksums: bool = True,
                 trace: Optional[str] = None, reserve_bytes: int = 0,
                 implicit_bos: bool = True) -> None:
        self._lib = _job.declare(_capi.load())
        self._handle: Optional[int] = None
        self._owns_model = not isinstance(model, Model)
        self.model: Model = Model(model) if self._owns_model else model  # type: ignore[arg-type]
        self._lock = threading.Lock()
        self._closed = False
        self.model.handle  # a closed model raises ValueError here
        self.model._sessions.add(self)
        self._flag = _Flag()
        self._abort_fn = _abort_callback(self._flag)  # kept: the library holds its address
        if threads is not None and not 1 <= threads <= _capi.ES_MAX_THREADS:
            raise ValueError(f"threads must be 1..{_capi.ES_MAX_THREADS}, not {threads}")
        if batch_tokens is not None and not 1 <= batch_tokens <= _capi.ES_MAX_BATCH_TOKENS:
            raise ValueError(f"batch_tokens must be 1..{_capi.ES_MAX_BATCH_TOKENS}")
        if policy is not None and policy not in _capi.POLICY:
            raise ValueError("policy: expected early, after-routing or on-demand, got "
                             f"{policy!r}")
        if io_backend not in _capi.IO_BACKEND:
            raise ValueError(f"io_backend: expected auto, io_uring or pread, got {io_backend!r}")
        if io_limit is not None and not 0 < io_limit <= 1e7:
            raise ValueError(f"io_limit: expected megabytes per second (> 0), got {io_limit}")
        self.mem_bytes = None if mem is None else (parse_size(mem, self.model.path) or None)
        streaming = (stream or policy is not None or io_limit is not None
                     or io_backend != "auto" or not direct_io)
        if reference and (mem is not None or groups or banks or queue_depth or streaming):
            raise ValueError("mem and the streaming options need the fast path, not reference")
        self._opts: dict[str, Any] = dict(
            threads=threads, reference=reference, kernels=kernels, tune=tune, stream=streaming,
            groups=groups, banks=banks, queue_depth=queue_depth, policy=policy or "early",
            io_limit=io_limit, io_backend=io_backend, direct_io=direct_io,
            verify_checksums=verify_checksums, trace=trace, reserve_bytes=reserve_bytes)
        self._cap = (0, 0, 0)  # (max_tokens, max_seqs, max_logits_rows) of the live es_session
        self._fixed_batch = batch_tokens or 0
        self._bos = _job.BOS_IMPLICIT if implicit_bos else _job.BOS_AS_SENT
        self.batch_tokens = 0
        self._max_seqs = 0
        try:
            self._create_for_job(1, 1)
        except BaseException:
            self.close()
            raise

    # ---- the es_session ------------------------------------------------------------------------
    def _params(self, max_tokens: int, max_seqs: int, rows: int) -> _capi.SessionParams:
        o = self._opts
        sp = self._lib.es_session_default_params()
        if o["threads"]:
            sp.n_threads = o["threads"]
        sp.reference = int(o["reference"])
        sp.max_tokens, sp.max_seqs, sp.max_logits_rows = max_tokens, max_seqs, rows
        if o["kernels"]:
            sp.kernels = o["kernels"].encode()
        if self.mem_bytes is not None:
            sp.mem_budget_bytes = self.mem_bytes
        sp.stream = int(o["stream"])
        sp.groups, sp.banks, sp.queue_depth = o["groups"], o["banks"], o["queue_depth"]
        sp.policy = _capi.POLICY[o["policy"]]
        sp.io_limit_bytes_per_s = (o["io_limit"] or 0.0) * 1e6
        sp.io_backend = _capi.IO_BACKEND[o["io_backend"]]
        sp.direct_io = int(o["direct_io"])
        sp.verify_checksums = int(o["verify_checksums"])
        sp.reserve_bytes = o["reserve_bytes"]
        if o["trace"]:
            sp.trace_path = os.fsencode(o["trace"])
        sp.abort_cb = self._abort_fn
        return sp

    def _load_tune(self, sp: _capi.SessionParams) -> Optional[int]:
        """The tuning to choose the arena from (cli_stream_tune), or None."""
        o, lib = self._opts, self._lib
        t = o["tune"]
        if (t is None or t == "none" or not sp.mem_budget_bytes or sp.groups or sp.banks
                or sp.queue_depth or sp.reference):
            if t not in (None, "none", "auto") and not sp.mem_budget_bytes:
                raise ValueError("tune needs mem and no groups, banks or queue_depth")
            return None
        if t == "auto":
            raw = lib.es_tune_default_path(os.fsencode(self.model.path))
            if not raw:
                raise MemoryError("es_tune_default_path")
            path = ctypes.string_at(raw)
            _capi.free(raw)
            if not os.path.exists(path):
                return None
        else:
            path = os.fsencode(t)
        h = ctypes.c_void_p()
        st = lib.es_tune_load(self.model.handle, path, ctypes.byref(h))
        if st == _capi.ES_OK:
            st = lib.es_tune_applies(h, sp.n_threads, sp.kernels)
            if st != _capi.ES_OK:
                lib.es_tune_destroy(h)
        if st != _capi.ES_OK:
            if t != "auto":
                check(st)
            return None  # as the CLI: a tuning that does not apply leaves the default rule
        return h.value

    def _create(self, max_tokens: int, max_seqs: int, rows: int) -> None:
        """(Re)creates the es_session with these sizes for a perplexity (as estream ppl's: no
        head outputs); the old one is destroyed first."""
        self._destroy()
        sp = self._params(max_tokens, max_seqs, rows)
        sp.head_outputs = 0
        tune = self._load_tune(sp)
        sp.tune = tune
        out = ctypes.c_void_p()
        try:
            check(self._lib.es_session_create(self.model.handle, ctypes.byref(sp),
                                              ctypes.byref(out)))
        finally:
            if tune:
                self._lib.es_tune_destroy(tune)  # only the choice needed it
        self._handle = out.value
        self._cap = (max_tokens, max_seqs, rows)

    def _create_for_job(self, longest: int, most_seqs: int) -> None:
        """The es_session for records of up to longest tokens and most_seqs sequences
        (es_session_create_for_job: the batch budget given, or the largest that fits); the old
        one is destroyed first."""
        self._destroy()
        sp = self._params(0, 0, 1)
        tune = self._load_tune(sp)
        sp.tune = tune
        shape = _job.JobShape(longest=longest, most_seqs=most_seqs,
                              batch_tokens=self._fixed_batch, head_outputs=1)
        size = _job.JobSize()
        out = ctypes.c_void_p()
        try:
            check(self._lib.es_session_create_for_job(self.model.handle, ctypes.byref(sp),
                                                      ctypes.byref(shape), ctypes.byref(out),
                                                      ctypes.byref(size)))
        finally:
            if tune:
                self._lib.es_tune_destroy(tune)  # only the choice needed it
        self._handle = out.value
        self._cap = (size.max_tokens, size.max_seqs, 1)
        self.batch_tokens, self._max_seqs = size.batch_tokens, size.max_seqs

    def _ensure_for_job(self, longest: int, most_seqs: int) -> None:
        """A session that holds records this long and this many sequences in one: the live one,
        or a new one sized for them (sizes only grow)."""
        t0, s0, r0 = self._cap
        if self._handle is not None and longest <= t0 and most_seqs <= s0 and r0 == 1:
            return
        old = (max(t0, 1), max(s0, 1))
        try:
            self._create_for_job(max(longest, t0), max(most_seqs, s0))
        except Error:
            with contextlib.suppress(Error):
                self._create_for_job(*old)  # keep the session usable at its old size
            raise

    def _ensure(self, tokens: int, seqs: int, rows: int) -> None:
        """Exactly these sizes (a perplexity's session), unless the live one has them."""
        if self._handle is not None and (tokens, seqs, rows) == self._cap:
            return
        old = self._cap
        try:
            self._create(tokens, seqs, rows)
        except Error:
            with contextlib.suppress(Error):
                self._create_for_job(max(old[0], 1), max(old[1], 1))
            raise

    def _destroy(self) -> None:
        if self._handle is not None:
            self._lib.es_session_destroy(self._handle)
            self._handle = None

    @property
    def closed(self) -> bool:
        """Whether close() has been called."""
        return self._closed

    def close(self) -> None:
        """Destroys the session (and closes the model if the session opened it)."""
        with self._lock:
            self._closed = True
            self._destroy()
            if getattr(self, "model", None) is not None:
                self.model._sessions.discard(self)
                if self._owns_model:
                    self.model.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._destroy()

    # ---- cancel and Ctrl-C ---------------------------------------------------------------------
    def _on_sigint(self, signum: int, frame: object) -> None:
        self._flag.sigint = True
        self._flag.abort = True

    def cancel(self) -> None:
        """Stops the call in progress (from another thread): it raises estream.Cancelled
        within about one layer's time; the session stays usable."""
        self._flag.abort = True

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """One call: the lock, and in the main thread the SIGINT handler that cancels."""
        with self._lock:
            if self._closed:
                raise ValueError("estream.Session: the session is closed")
            if self._handle is None:  # a failed resize left none: make it again
                self._create_for_job(max(self._cap[0], 1), max(self._cap[1], 1))
            flag = self._flag
            flag.abort = flag.sigint = False
            prev: Any = None
            if threading.current_thread() is threading.main_thread():
                prev = signal.getsignal(signal.SIGINT)
                if callable(prev):  # Python's default (KeyboardInterrupt) or the caller's
                    signal.signal(signal.SIGINT, self._on_sigint)
                else:
                    prev = None  # SIG_IGN, SIG_DFL or a C handler: leave them be
            stopped = False
            try:
                yield
            except _Stop:
                stopped = True
            finally:
                if prev is not None:
                    signal.signal(signal.SIGINT, prev)
            if flag.sigint:
                if prev is signal.default_int_handler or prev is None:
                    raise KeyboardInterrupt
                prev(signal.SIGINT, None)  # the caller's handler decides
                raise Cancelled(_capi.ES_E_CANCELLED, "interrupted by SIGINT")
            if stopped:
                raise Cancelled(_capi.ES_E_CANCELLED, "cancelled by Session.cancel()")

    def _job(self) -> Job:
        if self._closed:
            raise ValueError("estream.Session: the session is closed")
        return Job(self._lib, self.model, self._bos)

    def _run_status(self, st: int) -> None:
        """es_session_run's status: _Stop for a cancel we asked for, else an Error."""
        if st == _capi.ES_E_CANCELLED and self._flag.abort:
            raise _Stop()
        check(st)

    # ---- batches -------------------------------------------------------------------------------
    def _run(self, job: Job) -> list[Any]:
        """Runs the job's records in batches and returns their results in order."""
        try:
            if not job.handles:
                return []
            longest, most_seqs, _ = job.shape()
            with self._call():
                self._ensure_for_job(longest, most_seqs)
                job.run(self._run_batch, self.batch_tokens, self._max_seqs, self._check_stop)
            return job.results()
        finally:
            job.close()

    def _check_stop(self) -> None:
        if self._flag.abort:
            raise _Stop()

    def _run_batch(self, handles: list[int]) -> None:
        arr = (ctypes.c_void_p * len(handles))(*handles)
        self._run_status(self._lib.es_session_run_records(self._handle, arr, len(handles)))

    # ---- what a caller asks --------------------------------------------------------------------
    def score(self, texts: Sequence[TextOrIds], *, top: int = 0) -> list[TextScore]:
        """Per-token log-probs of each text: ``estream score`` on ``{"text": T}`` records (BOS
        first when the model adds one, not twice; special-token text recognised), or on
        ``{"ids": [...]}`` for an item that is a sequence of ints (the ids as given; ids not
        starting with BOS are conditioned on one that is not theirs unless the session was
        made with implicit_bos=False: docs/prompts.md). top: the best ``top`` alternatives per
        position too (0..100)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("score() takes a list of texts; wrap one text in a list")
        if not 0 <= top <= _capi.ES_MAX_TOP:
            raise ValueError(f"top must be 0..{_capi.ES_MAX_TOP}, not {top}")
        job = self._job()
        for i, t in enumerate(texts):
            _at(lambda: job.text(t, top), "texts", i)
        return self._run(job)

    def loglikelihood(self, requests: Sequence[tuple[TextLike, TextLike]]
                      ) -> list[tuple[float, bool]]:
        """lm-evaluation-harness's loglikelihood: per (context, continuation), the
        continuation's log-prob sum and whether every one of its tokens is the model's greedy
        choice (``{"context", "continuation"}`` records: "logprob" and "greedy")."""
        job = self._job()
        for i, (c, x) in enumerate(requests):
            _at(lambda: job.pair(c, x), "requests", i)
        return self._run(job)

    def choose(self, context: TextLike, choices: Sequence[TextLike],
               gold: Optional[int] = None) -> Choice:
        """A multiple choice: each choice scored as a continuation of context (a
        ``{"context", "choices", "gold"}`` record)."""
        return self.choose_many([(context, choices, gold)])[0]

    def choose_many(self, items: Sequence[Union[tuple[TextLike, Sequence[TextLike]],
                                                tuple[TextLike, Sequence[TextLike],
                                                      Optional[int]]]]) -> list[Choice]:
        """choose() of many (context, choices[, gold]) items, batched together."""
        job = self._job()
        for i, it in enumerate(items):
            ctx, ch, gold = (it[0], it[1], it[2] if len(it) > 2 else None)  # type: ignore[misc]
            _at(lambda: job.choices(ctx, ch, gold), "items", i)
        return self._run(job)

    def classify(self, text: Union[TextLike, Messages], labels: Sequence[TextLike], *,
                 template: Optional[str] = None) -> Classification:
        """Which label continues text (a ``{"text", "labels"}`` record): each label's log-prob
        and the probabilities renormalised over the labels. text may be a chat (OpenAI's
        messages, a ``{"messages", "labels"}`` record): rendered with the model's chat template
        (or ``template``, Jinja text) and its generation prompt, the labels scored after it."""
        return self.classify_many([(text, labels)], template=template)[0]

    def classify_many(self, items: Sequence[tuple[Union[TextLike, Messages], Sequence[TextLike]]],
                      *, template: Optional[str] = None) -> list[Classification]:
        """classify() of many (text or messages, labels) items, batched together."""
        job = self._job()
        tmpl = _template(template)
        for i, (t, ls) in enumerate(items):
            if isinstance(t, (str, bytes)):
                _at(lambda: job.labels(t, ls), "items", i)
            else:
                _at(lambda: job.chat_labels(t, ls, tmpl), "items", i)
        return self._run(job)

    def chat(self, messages: Messages, *, top: int = 10,
             template: Optional[str] = None) -> NextTokens:
        """The next token after a chat (a ``{"messages"}`` record, ``/v1/chat/completions``
        with ``max_tokens=1``): messages (OpenAI's ``[{"role", "content"}]``) rendered with the
        model's chat template (or ``template``, Jinja text) and its generation prompt, then the
        ``top`` best next tokens and their log-probs (1..100): what an LLM judge reads."""
        return self.chat_many([messages], top=top, template=template)[0]

    def chat_many(self, chats: Sequence[Messages], *, top: int = 10,
                  template: Optional[str] = None) -> list[NextTokens]:
        """chat() of many chats, batched together."""
        if not 1 <= top <= _capi.ES_MAX_TOP:
            raise ValueError(f"top must be 1..{_capi.ES_MAX_TOP}, not {top}")
        job = self._job()
        tmpl = _template(template)
        for i, m in enumerate(chats):
            _at(lambda: job.chat(m, top, tmpl), "chats", i)
        return self._run(job)

    def rerank(self, query: TextLike, documents: Sequence[TextLike], *,
               instruction: Optional[TextLike] = None,
               template: Optional[str] = None) -> Rerank:
        """How relevant each document is to query (a ``{"query", "documents"}`` record,
        ``/v1/rerank``): each pair rendered with Qwen3-Reranker's prompt (or ``template``,
        Jinja text with query, document and instruction) and scored P(yes) / (P(yes) + P(no))
        at its last position; the pairs of one query run in one batch. ``instruction``
        defaults to "Given a web search query, retrieve relevant passages that answer the
        query"."""
        return self.rerank_many([(query, documents)], instruction=instruction,
                                template=template)[0]

    def rerank_many(self, items: Sequence[tuple[TextLike, Sequence[TextLike]]], *,
                    instruction: Optional[TextLike] = None,
                    template: Optional[str] = None) -> list[Rerank]:
        """rerank() of many (query, documents) items, batched together."""
        job = self._job()
        tmpl = _template(template)
        for i, (q, ds) in enumerate(items):
            _at(lambda: job.rerank(q, ds, instruction, tmpl), "items", i)
        return self._run(job)

    def embed(self, texts: Sequence[TextOrIds], pooling: str = "mean",
              normalize: bool = True) -> Union[np.ndarray, list[np.ndarray]]:
        """Pooled embeddings (the final hidden state after the output norm), as ``estream
        embed``: float32 [len(texts), n_embd], L2-normalised unless normalize=False. Text is
        tokenized with BOS/EOS as the tokenizer asks and special-token text recognised; an item
        that is a sequence of ints is used as given. pooling: "mean" (every token, BOS
        included), "last", "first", or "none" (then a list of [n_tokens, n_embd] arrays)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("embed() takes a list of texts; wrap one text in a list")
        if pooling not in _capi.POOLING:
            raise ValueError(f"pooling: expected mean, last, first or none, got {pooling!r}")
        p = _capi.POOLING[pooling]
        job = self._job()
        for i, t in enumerate(texts):
            _at(lambda: job.embedding(t, p, normalize), "texts", i)
        rows = self._run(job)
        if pooling == "none":
            return rows
        if not rows:
            return np.empty((0, self.model.n_embd), dtype=np.float32)
        return np.concatenate(rows, axis=0)

    def perplexity(self, text: Union[TextLike, Sequence[int]], ctx: int = 512,
                   chunks: Optional[int] = None) -> Perplexity:
        """``estream ppl -c ctx [--chunks N]``: perplexity with llama-perplexity's convention
        (text tokenized with BOS when the tokenizer adds one, special-token text not parsed;
        non-overlapping chunks of ctx tokens, the second half of each scored). A sequence of
        ints is used as the ids. Needs at least 2*ctx tokens.

        Ctrl-C (main thread) or cancel() stops it within about one layer, as for score."""
        if isinstance(text, (str, bytes, bytearray)):
            data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
            ids = self.model.tokenize_bytes(data, add_special=True, parse_special=False)
        else:
            ids = _job.given_ids(text, self.model.n_vocab)
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        if chunks is not None and chunks < 1:
            raise ValueError(f"chunks must be >= 1, not {chunks}")
        res = _capi.PplResult()
        with self._call():
            if 4 <= ctx <= self.model.n_ctx:  # else the library refuses it with its message
                if self.mem_bytes is not None:  # the CLI's ppl session: ctx tokens and rows
                    self._ensure(ctx, 64, ctx)
                else:
                    self._ensure_for_job(ctx, 1)
            st = self._lib.es_session_perplexity(self._handle, ids.ctypes.data, len(ids), ctx,
                                                 chunks or 0, None, None, ctypes.byref(res))
            self._run_status(st)
        return Perplexity(ppl=res.ppl, nll=res.nll, n_scored=res.n_scored, chunks=res.chunks,
                          ctx=ctx, n_tokens=len(ids))

    def stats(self) -> dict[str, Any]:
        """es_session_stats(): what the last request did (seconds, peak_rss_bytes, kernels,
        n_threads and, when experts were streamed, the arena, bytes read, bubble rate...)."""
        if self._handle is None:
            raise ValueError("estream.Session: the session is closed")
        rs = _capi.RunStats()
        self._lib.es_session_stats(self._handle, ctypes.byref(rs))
        out: dict[str, Any] = {}
        for name, _ in rs._fields_:
            v = getattr(rs, name)
            out[name] = v.decode() if isinstance(v, bytes) else v
        return out

    def __repr__(self) -> str:
        mem = "resident" if self.mem_bytes is None else f"mem {self.mem_bytes} bytes"
        return f"estream.Session({self.model.path!r}, {mem}, batch_tokens {self.batch_tokens})"


def _template(t: Optional[str]) -> Optional[bytes]:
    """A Jinja template given as text (None: the model's, or the default rerank prompt)."""
    if t is None:
        return None
    if not isinstance(t, str) or not t or "\0" in t:
        raise ValueError("template must be a non-empty string of Jinja (no NUL)")
    return t.encode("utf-8")


def _at(make: Any, name: str, i: int) -> None:
    """make() with a record error prefixed by where the record is ("texts[3]: ...")."""
    try:
        make()
    except RecordError as e:
        raise RecordError(f"{name}[{i}]: {e}") from None
