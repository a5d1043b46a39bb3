"""estream.Model: a GGUF model (or vocabulary-only file) opened with es_model_open.

The model is read-only once open and may be shared by threads and sessions; it stays open until
close() (or the end of a ``with`` block, or garbage collection). Tokenization follows
``estream tokenize``: nothing is added unless asked (``bos=True``), special-token text such as
``<|endoftext|>`` is recognised unless ``parse_special=False``.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Iterable, Optional, Union

import numpy as np

from . import _capi
from .errors import check

PathLike = Union[str, "os.PathLike[str]"]


class Model:
    """A model file opened by libestream.

    ``Model(path)`` validates the file and reads its hyperparameters and tokenizer; errors raise
    estream.Error with the library's message (a missing file: ``"PATH: cannot open: No such file
    or directory"``). ``vocab_only=True`` reads only the tokenizer (the file may have no
    weights; sessions cannot run on it).
    """

    def __init__(self, path: PathLike, *, vocab_only: bool = False) -> None:
        self._lib = _capi.load()
        self._handle: Optional[int] = None
        self._lock = threading.Lock()
        #: the open Sessions made from it (close() refuses while one is open)
        self._sessions: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.path: str = os.fspath(path)
        self.vocab_only = vocab_only
        out = ctypes.c_void_p()
        flags = _capi.ES_OPEN_VOCAB_ONLY if vocab_only else 0
        check(self._lib.es_model_open(os.fsencode(self.path), flags, ctypes.byref(out)))
        self._handle = out.value
        lib, h = self._lib, self._handle
        self.arch: str = lib.es_model_arch(h).decode()
        self.n_vocab: int = lib.es_model_n_vocab(h)
        self.n_ctx: int = lib.es_model_n_ctx(h)
        self.n_embd: int = lib.es_model_n_embd(h)
        self.n_layer: int = lib.es_model_n_layer(h)
        self.n_expert: int = lib.es_model_n_expert(h)
        self.add_bos: bool = bool(lib.es_model_add_bos(h))
        #: the BOS and EOS ids, None when the model has none
        self.bos: Optional[int] = _id_or_none(lib.es_model_bos(h))
        self.eos: Optional[int] = _id_or_none(lib.es_model_eos(h))

    # ---- lifetime ------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The es_model pointer; raises ValueError once closed."""
        if self._handle is None:
            raise ValueError("estream.Model: the model is closed")
        return self._handle

    def close(self) -> None:
        """Releases the model. Sessions made from it use its memory: while one is open this
        raises RuntimeError (close the sessions first, or use them in with blocks)."""
        with self._lock:
            live = [s for s in list(self._sessions) if not s.closed]
            if live:
                raise RuntimeError(
                    f"estream.Model.close(): {len(live)} session{'s' if len(live) > 1 else ''} "
                    "made from this model still open; close them first (Session.close(), or a "
                    "with block), since they use the model's memory")
            if self._handle is not None:
                self._lib.es_model_close(self._handle)
                self._handle = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # collected: no Session refers to it any more (a Session holds its model)
        if getattr(self, "_handle", None) is not None:
            self._lib.es_model_close(self._handle)
            self._handle = None

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"{self.arch}, {self.n_vocab} tokens"
        return f"estream.Model({self.path!r}: {state})"

    # ---- tokens --------------------------------------------------------------------------------
    def tokenize_bytes(self, data: bytes, *, add_special: bool = False,
                       parse_special: bool = True) -> np.ndarray:
        """es_tokenize() of raw bytes: an int32 array. add_special adds BOS/EOS as the model's
        tokenizer asks (and only then); no BOS is forced. The building block of tokenize()."""
        cap = len(data) + 16  # every token covers at least one byte, plus BOS/EOS
        for _ in range(2):
            ids = np.empty(cap, dtype=np.int32)
            n = ctypes.c_size_t()
            st = self._lib.es_tokenize(self.handle, data, len(data), int(add_special),
                                       int(parse_special), ids.ctypes.data, cap, ctypes.byref(n))
            if st == _capi.ES_E_SHORT_BUFFER:
                cap = n.value  # the buffer was too small: the size needed is in n
                continue
            check(st)
            return ids[: n.value].copy()
        raise AssertionError("es_tokenize asked for a larger buffer twice")

    def tokenize(self, text: Union[str, bytes], *, bos: bool = False,
                 parse_special: bool = True) -> list[int]:
        """Token ids of text, exactly what ``estream tokenize -m MODEL -p TEXT`` prints (with
        ``bos=True``, what ``--bos`` prints: the BOS token first even where the tokenizer would
        not add one, and EOS last where its metadata asks for one). str is encoded as UTF-8."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = self.tokenize_bytes(data, add_special=bos, parse_special=parse_special).tolist()
        if bos and self.bos is not None and (not ids or ids[0] != self.bos):
            ids.insert(0, self.bos)
        return ids

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token as detokenization produces them. IndexError if out of range."""
        n = ctypes.c_size_t()
        p = self._lib.es_token_piece(self.handle, int(token), ctypes.byref(n))
        if not p:
            raise IndexError(f"token {token} is outside the vocabulary (0..{self.n_vocab - 1})")
        return ctypes.string_at(p, n.value)

    def detokenize_bytes(self, ids: Iterable[int]) -> bytes:
        """The tokens' bytes, concatenated (possibly not valid UTF-8: a token may hold part of
        a character)."""
        return b"".join(self.token_bytes(t) for t in ids)

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of the tokens: their bytes concatenated and decoded as UTF-8 (an invalid
        sequence becomes U+FFFD: Python's errors="replace")."""
        return self.detokenize_bytes(ids).decode("utf-8", "replace")


def _id_or_none(v: int) -> Optional[int]:
    return None if v < 0 else int(v)
