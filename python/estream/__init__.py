"""estream: prefill of Mixture-of-Experts models from GGUF files on CPUs, from Python.

A ctypes binding of libestream (the same library as the ``estream`` command line tool, so the
numbers are the CLI's bit for bit)::

    import estream
    with estream.Session("model.gguf", mem="1G", threads=8) as s:
        print(s.score(["The cat sat on the mat."])[0].sum)
        print(s.choose("The sky is", [" blue", " green"]).chosen)
        vectors = s.embed(["first text", "second text"])      # float32 [2, n_embd]

Model(path) opens a model (tokenize/detokenize); Session(model, mem=..., threads=...) runs
score, loglikelihood, choose, classify, chat (the next token after a chat), rerank, embed and
perplexity. Library failures raise estream.Error carrying the library's one-line message; Ctrl-C
stops a long call within about one layer and raises KeyboardInterrupt, leaving the session
usable.
"""

from __future__ import annotations

from . import _capi
from ._capi import (
    ES_E_BUDGET as E_BUDGET,
    ES_E_CANCELLED as E_CANCELLED,
    ES_E_FORMAT as E_FORMAT,
    ES_E_INVAL as E_INVAL,
    ES_E_IO as E_IO,
    ES_E_NOMEM as E_NOMEM,
    ES_E_UNSUPPORTED as E_UNSUPPORTED,
)
from ._job import RecordError
from .errors import Cancelled, Error
from .model import Model
from .results import Choice, Classification, NextTokens, Perplexity, Rerank, TextScore
from .session import Session, memory_limit, parse_size

try:  # the version pip installed (the library's, read from estream.h when the package was built)
    from importlib.metadata import PackageNotFoundError, version as _dist_version

    __version__ = _dist_version("estream")
except PackageNotFoundError:  # run from the source tree, not installed
    __version__ = "0+unknown"


def library_version() -> str:
    """es_version(): the version of the libestream in use ("2.0.0")."""
    return _capi.load().es_version().decode()


def library_path() -> str:
    """Where libestream was loaded from ($ESTREAM_LIBRARY, the bundled copy or the system's)."""
    return _capi.library_path()


def kernels() -> str:
    """es_kernels_name(): the kernel table a session uses by default ("avx2", ...)."""
    return _capi.load().es_kernels_name().decode()


__all__ = [
    "Model", "Session", "Error", "Cancelled", "RecordError", "TextScore", "Choice",
    "Classification", "NextTokens", "Rerank", "Perplexity", "parse_size", "memory_limit",
    "library_version", "library_path", "kernels",
    "E_INVAL", "E_NOMEM", "E_BUDGET", "E_IO", "E_FORMAT", "E_UNSUPPORTED", "E_CANCELLED",
]
