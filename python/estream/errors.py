"""The exceptions the package raises for failures of the library."""

from __future__ import annotations

from . import _capi


class Error(RuntimeError):
    """A call into libestream failed. ``str(e)`` is the library's one-line message
    (es_last_error(), the same line the estream CLI prints after "estream: "), ``e.status`` the
    es_status (a negative int: ``estream.E_BUDGET``, ...) and ``e.status_name`` its name."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = _capi.status_str(status)
        self.message = message


class Cancelled(Error):
    """The call was stopped by Session.cancel() (es_status ES_E_CANCELLED); the session stays
    usable. A Ctrl-C raises KeyboardInterrupt instead."""


def check(status: int) -> None:
    """Raises Error (Cancelled for ES_E_CANCELLED) carrying es_last_error() unless status is
    ES_OK. Call it right after the failing call, on the same thread: the message is
    thread-local and valid until the next failure."""
    if status == _capi.ES_OK:
        return
    msg = _capi.last_error() or _capi.status_str(status)
    cls = Cancelled if status == _capi.ES_E_CANCELLED else Error
    raise cls(status, msg)
