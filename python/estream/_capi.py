"""ctypes declarations of libestream (include/estream.h) and how the library is found.

DESIGN
- ctypes, not a compiled extension: the package builds nothing but the C library itself, and
  ctypes.CDLL releases the GIL around every foreign call, so a prefill lets other Python threads
  run. Callbacks (the abort callback) take the GIL back for the few instructions they run.
- The structures mirror estream.h field by field, in order, with the same C types (enums are
  C ints), so that ctypes computes the same layout as the C compiler; tests/test_capi.py
  compares sizes and offsets with a C program where a compiler exists.
- Only the functions the package calls are declared, each with its argtypes and restype, so a
  wrong call fails in Python instead of corrupting memory.
- The library is loaded once, on first use (not at import), from the first of: $ESTREAM_LIBRARY
  (a path), the copy bundled in the package (estream/_lib/libestream.so.2, put there when the
  package was built from the estream source tree), and the system's (an installed
  libestream.so.2: `make install`). Its major version must be this module's (2).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Optional

#: The library major version (soname libestream.so.MAJOR) these declarations follow.
ABI_MAJOR = 2
SONAME = f"libestream.so.{ABI_MAJOR}"

# ---- status codes (es_status) -------------------------------------------------------------------
ES_OK = 0
ES_E_INVAL = -1
ES_E_NOMEM = -2
ES_E_BUDGET = -3
ES_E_IO = -4
ES_E_FORMAT = -5
ES_E_UNSUPPORTED = -6
ES_E_CANCELLED = -7
ES_E_SHORT_BUFFER = -8

ES_OPEN_VOCAB_ONLY = 1 << 0

ES_MAX_THREADS = 256
ES_MAX_BATCH_TOKENS = 1 << 22
ES_MAX_BATCH_SEQS = 4096
ES_MAX_TOP = 100

# es_pooling
POOLING = {"none": 0, "mean": 1, "first": 2, "last": 3}
# es_policy
POLICY = {"early": 0, "after-routing": 1, "on-demand": 2}
# es_io_backend
IO_BACKEND = {"auto": 0, "io_uring": 1, "pread": 2}

# ---- callbacks ----------------------------------------------------------------------------------
#: int (*abort_cb)(void *user)
ABORT_FN = CFUNCTYPE(c_int, c_void_p)
#: void (*progress_cb)(void *user, int steps_done, int n_steps, int64_t tokens)
PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_int, c_int, c_int64)


# ---- structures ---------------------------------------------------------------------------------
class SessionParams(Structure):
    """es_session_params, field for field (see include/estream.h for each field's meaning)."""

    _fields_ = [
        ("n_threads", c_int),
        ("reference", c_int),
        ("max_tokens", c_int),
        ("max_seqs", c_int),
        ("plan_capacity", c_int),
        ("kernels", c_char_p),
        ("stream", c_int),
        ("mem_budget_bytes", c_uint64),
        ("groups", c_int),
        ("banks", c_int),
        ("queue_depth", c_int),
        ("policy", c_int),  # es_policy
        ("io_limit_bytes_per_s", c_double),
        ("io_backend", c_int),  # es_io_backend
        ("direct_io", c_int),
        ("verify_checksums", c_int),
        ("max_logits_rows", c_int),
        ("head_outputs", c_int),
        ("reserve_bytes", c_uint64),
        ("trace_path", c_char_p),
        ("tune", c_void_p),  # const es_tune *
        ("abort_cb", ABORT_FN),
        ("progress_cb", PROGRESS_FN),
        ("cb_user", c_void_p),
    ]


class Seq(Structure):
    """es_seq: one sequence of a batch and the outputs asked of it. Array fields are raw
    addresses (of numpy arrays the caller keeps alive during es_session_run)."""

    _fields_ = [
        ("ids", c_void_p),  # const int32_t *
        ("n_ids", c_size_t),
        ("score_from", c_size_t),
        ("token_logprob", c_void_p),  # float *
        ("token_rank", c_void_p),  # int32_t *
        ("top_n", c_int),
        ("top_ids", c_void_p),  # int32_t *
        ("top_logprobs", c_void_p),  # float *
        ("next_top_k", c_int),
        ("next_ids", c_void_p),  # int32_t *
        ("next_logprobs", c_void_p),  # float *
        ("labels", c_void_p),  # const int32_t *
        ("n_labels", c_int),
        ("renormalize", c_int),
        ("label_logprobs", c_void_p),  # float *
        ("pooling", c_int),  # es_pooling
        ("normalize", c_int),
        ("embedding", c_void_p),  # float *
        ("all_logits", c_int),
        ("logits", c_void_p),  # float *
    ]


class PplResult(Structure):
    """es_ppl_result."""

    _fields_ = [
        ("ppl", c_double),
        ("nll", c_double),
        ("n_scored", c_int64),
        ("chunks", c_int),
    ]


class RunStats(Structure):
    """es_run_stats: what the last request did."""

    _fields_ = [
        ("seconds", c_double),
        ("peak_rss_bytes", c_uint64),
        ("kernels", c_char_p),
        ("n_threads", c_int),
        ("streaming", c_int),
        ("budget_bytes", c_uint64),
        ("other_bytes", c_uint64),
        ("min_budget_bytes", c_uint64),
        ("arena_bytes", c_uint64),
        ("groups", c_int),
        ("banks", c_int),
        ("queue_depth", c_int),
        ("policy", c_char_p),
        ("io_backend", c_char_p),
        ("direct", c_int),
        ("bytes_read", c_uint64),
        ("read_seconds", c_double),
        ("read_bytes_per_second", c_double),
        ("wait_seconds", c_double),
        ("bubble_rate", c_double),
        ("groups_read", c_int64),
        ("groups_skipped", c_int64),
        ("tuned", c_int),
        ("predicted_seconds", c_double),
        ("tune_select_seconds", c_double),
    ]


# (name, restype, argtypes) of every function the package calls.
_p = c_void_p  # opaque handles (es_model *, es_session *, es_tune *)
_FUNCTIONS = [
    ("es_version", c_char_p, []),
    ("es_status_name", c_char_p, [c_int]),
    ("es_last_error", c_char_p, []),
    ("es_model_open", c_int, [c_char_p, c_uint, POINTER(c_void_p)]),
    ("es_model_close", None, [_p]),
    ("es_model_arch", c_char_p, [_p]),
    ("es_model_n_vocab", c_int, [_p]),
    ("es_model_n_ctx", c_int, [_p]),
    ("es_model_n_embd", c_int, [_p]),
    ("es_model_n_layer", c_int, [_p]),
    ("es_model_n_expert", c_int, [_p]),
    ("es_model_add_bos", c_int, [_p]),
    ("es_model_bos", c_int32, [_p]),
    ("es_model_eos", c_int32, [_p]),
    ("es_tokenize", c_int, [_p, c_char_p, c_size_t, c_int, c_int, c_void_p, c_size_t,
                            POINTER(c_size_t)]),
    ("es_token_piece", POINTER(c_char), [_p, c_int32, POINTER(c_size_t)]),
    ("es_kernels_name", c_char_p, []),
    ("es_session_default_params", SessionParams, []),
    ("es_session_create", c_int, [_p, POINTER(SessionParams), POINTER(c_void_p)]),
    ("es_session_destroy", None, [_p]),
    ("es_session_run", c_int, [_p, POINTER(Seq), c_int]),
    ("es_session_perplexity", c_int, [_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p,
                                      POINTER(PplResult)]),
    ("es_session_stats", None, [_p, POINTER(RunStats)]),
    ("es_tune_default_path", c_void_p, []),  # argtypes set below (returns malloc'd char *)
    ("es_tune_load", c_int, [_p, c_char_p, POINTER(c_void_p)]),
    ("es_tune_destroy", None, [_p]),
    ("es_tune_applies", c_int, [_p, c_int, c_char_p]),
    ("es_mem_budget_parse", c_int, [c_char_p, c_char_p, POINTER(c_uint64)]),
    ("es_memory_limit", c_uint64, [POINTER(c_char_p)]),
]

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _candidates() -> list[tuple[str, str]]:
    """(how it was found, what to pass to CDLL), in the order they are tried."""
    env = os.environ.get("ESTREAM_LIBRARY")
    if env:
        return [("ESTREAM_LIBRARY", env)]  # an explicit choice is never second-guessed
    out = []
    bundled = Path(__file__).resolve().parent / "_lib" / SONAME
    if bundled.is_file():
        out.append(("bundled", str(bundled)))
    found = ctypes.util.find_library("estream")
    if found:
        out.append(("system", found))
    out.append(("system", SONAME))  # the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache)
    return out


def _declare(lib: ctypes.CDLL) -> None:
    for name, restype, argtypes in _FUNCTIONS:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    lib.es_tune_default_path.argtypes = [c_char_p]


def load() -> ctypes.CDLL:
    """The library, loaded and declared on first call. Raises OSError when it cannot be found
    (the message names ESTREAM_LIBRARY) or is of another major version."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, what in _candidates():
            try:
                lib = ctypes.CDLL(what)
            except OSError as e:
                tried.append(f"{what} ({how}): {e}")
                continue
            if not hasattr(lib, "es_session_run"):
                tried.append(f"{what} ({how}): not libestream")
                continue
            _declare(lib)
            version = lib.es_version().decode()
            if version.split(".")[0] != str(ABI_MAJOR):
                raise OSError(f"estream: {what} is libestream {version}; this package needs "
                              f"major version {ABI_MAJOR} (set ESTREAM_LIBRARY to a matching "
                              f"{SONAME})")
            _lib, _lib_path = lib, what
            return lib
        raise OSError("estream: cannot load the estream library (" + "; ".join(tried) + "). "
                      f"Set ESTREAM_LIBRARY to the path of {SONAME}, install it (make install "
                      "in the estream source tree), or reinstall this package from the estream "
                      "source tree (pip install ./python), which bundles it")


def library_path() -> str:
    """Where the loaded library came from (a path or a soname)."""
    load()
    assert _lib_path is not None
    return _lib_path


def last_error() -> str:
    """es_last_error() of this thread, decoded (invalid UTF-8 replaced)."""
    msg = load().es_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def status_str(status: int) -> str:
    """es_status_name(): the status' short English name."""
    return load().es_status_name(status).decode()


def free(ptr: int) -> None:
    """free() from the C library, for strings the library malloc'd for us."""
    _libc().free(ctypes.c_void_p(ptr))


_libc_handle: Optional[ctypes.CDLL] = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        libc = ctypes.CDLL(None)  # the process' own symbols: libc's malloc/free
        libc.free.argtypes = [c_void_p]
        libc.free.restype = None
        _libc_handle = libc
    return _libc_handle


__all__ = [
    "ABI_MAJOR", "SONAME", "SessionParams", "Seq", "PplResult", "RunStats", "ABORT_FN",
    "PROGRESS_FN", "load", "library_path", "last_error", "status_str", "free",
]
