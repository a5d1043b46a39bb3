"""Threads and signals: the GIL is released during a prefill (another Python thread runs), a
SIGINT (Ctrl-C) stops a long score within about one layer's time with KeyboardInterrupt and
leaves the session usable, and Session.cancel() does the same from another thread.

The long runs stream the experts of the small preset at an emulated 5 MB/s (io_limit), so a
layer takes about half a second and a score of 16 records of ~1,000 tokens some 8 seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import estream

LONG = ["The quick brown fox jumps over the lazy dog. " * 30] * 16  # ~1,000 tokens each
SLOW = {"threads": 2, "io_limit": 5.0, "direct_io": False}  # buffered: works on tmpfs too

CHILD = r"""
import json, signal, sys, time
import numpy as np
import estream
signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
LONG = ["The quick brown fox jumps over the lazy dog. " * 30] * 16
s = estream.Session(sys.argv[1], **json.loads(sys.argv[2]))
t = time.monotonic()
ref = s.score(LONG[:2])  # one batch: its time gives the time of a layer
batch = time.monotonic() - t
print(json.dumps({"batch_seconds": batch, "n_layer": s.model.n_layer}), flush=True)
t = time.monotonic()
try:
    s.score(LONG)
    print(json.dumps({"finished": time.monotonic() - t}), flush=True)
except KeyboardInterrupt:
    print(json.dumps({"interrupted": time.monotonic() - t}), flush=True)
restored = signal.getsignal(signal.SIGINT) is signal.default_int_handler
again = s.score(LONG[:2])
same = all((a.logprobs.view(np.uint32) == b.logprobs.view(np.uint32)).all() and a.sum == b.sum
           for a, b in zip(ref, again))
print(json.dumps({"restored": restored, "same": same}), flush=True)
"""


def test_sigint_stops_a_long_score(small: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(small), json.dumps(SLOW)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline())  # type: ignore[union-attr]
        layer = first["batch_seconds"] / (first["n_layer"] + 1)  # layers and the head
        time.sleep(1.5)  # well inside the ~8 s score
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        second = json.loads(p.stdout.readline())  # type: ignore[union-attr]
        latency = time.monotonic() - t
        third = json.loads(p.stdout.readline())  # type: ignore[union-attr]
        assert p.wait(timeout=60) == 0, p.stderr.read()  # type: ignore[union-attr]
    finally:
        p.kill()
    assert "interrupted" in second, second
    assert latency < layer + 1.0, (latency, layer)  # one layer, plus a process's slack
    assert third == {"restored": True, "same": True}


def test_gil_released_during_a_prefill(small: Path) -> None:
    """A pure-Python counting thread keeps its pace while the main thread scores (it would
    stop dead but for a few milliseconds per layer if the call held the GIL). The score streams
    its experts at 5 MB/s, so its compute threads mostly wait and leave the CPU to the counter
    whatever else the machine runs."""
    with estream.Session(small, **SLOW) as s:
        s.score(LONG[:1])  # warm up (buffers, pages)
        count, stop = [0], threading.Event()

        def counter() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                if n % 1000 == 0:
                    count[0] = n

        th = threading.Thread(target=counter)
        th.start()
        time.sleep(0.3)
        c0, t0 = count[0], time.monotonic()
        time.sleep(0.5)
        solo = (count[0] - c0) / (time.monotonic() - t0)
        c1, t1 = count[0], time.monotonic()
        s.score(LONG[:2])  # one batch of ~2,000 tokens: about a second
        busy = (count[0] - c1) / (time.monotonic() - t1)
        elapsed = time.monotonic() - t1
        stop.set()
        th.join()
    assert elapsed > 0.5, "the score was too short to tell"
    assert busy > 0.3 * solo, (busy, solo, busy / solo)


def test_cancel_from_another_thread(small: Path) -> None:
    with estream.Session(small, **SLOW) as s:
        ref = s.score(LONG[:2])
        out: dict = {}

        def work() -> None:
            t = time.monotonic()
            try:
                s.score(LONG)
                out["finished"] = True
            except estream.Cancelled as e:
                out["cancelled"] = e
            out["seconds"] = time.monotonic() - t

        th = threading.Thread(target=work)
        th.start()
        time.sleep(1.0)
        # a call in another thread leaves the main thread's SIGINT handler alone
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        t = time.monotonic()
        s.cancel()
        th.join(timeout=60)
        latency = time.monotonic() - t
        assert "cancelled" in out and out["cancelled"].status == estream.E_CANCELLED
        assert latency < 2.0 and out["seconds"] < 5.0
        again = s.score(LONG[:2])
        for a, b in zip(ref, again):
            assert (a.logprobs.view(np.uint32) == b.logprobs.view(np.uint32)).all()


def test_sessions_in_threads_share_a_model(tiny: Path) -> None:
    """One model, a session per thread, all at once: each gives the single-threaded numbers."""
    m = estream.Model(tiny)
    texts = ["thread %d says hello" % i for i in range(8)]
    with estream.Session(m, threads=1) as s:
        want = [r.sum for r in s.score(texts)]
    results: dict[int, list[float]] = {}

    def work(k: int) -> None:
        with estream.Session(m, threads=1) as s:
            results[k] = [r.sum for r in s.score(texts)]

    ths = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert all(results[k] == want for k in range(3))


def test_sigint_with_the_callers_handler(small: Path) -> None:
    """A SIGINT handler of the caller's own is called once the run has stopped, then the call
    raises estream.Cancelled; the handler is back in place afterwards."""
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGINT, mine)
    try:
        with estream.Session(small, **SLOW) as s:
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
            t = time.monotonic()
            try:
                s.score(LONG)
                raise AssertionError("the score was not stopped")
            except estream.Cancelled:
                pass
            assert time.monotonic() - t < 4.0
            assert seen == [signal.SIGINT]
            assert signal.getsignal(signal.SIGINT) is mine
            assert len(s.score(LONG[:1])) == 1
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_dropped_session_is_destroyed_at_once(tiny: Path) -> None:
    """No reference cycle: the last reference gone, the es_session goes (before its model)."""
    import weakref

    s = estream.Session(tiny)
    s.score(["x y z"])
    w = weakref.ref(s)
    del s
    assert w() is None


def test_cancel_a_long_perplexity(small: Path) -> None:
    """es_session_perplexity checks the abort callback before each layer of each chunk too, so
    cancel() stops a perplexity run within about a layer; the session then gives the same
    perplexity as before."""
    text = LONG[0] * 8  # ~8,000 tokens: 15 chunks of 512
    with estream.Session(small, **SLOW) as s:
        ref = s.perplexity(text, ctx=512, chunks=1)
        out: dict = {}

        def work() -> None:
            try:
                s.perplexity(text, ctx=512)
                out["finished"] = True
            except estream.Cancelled as e:
                out["cancelled"] = e

        th = threading.Thread(target=work)
        th.start()
        time.sleep(1.0)
        t = time.monotonic()
        s.cancel()
        th.join(timeout=60)
        latency = time.monotonic() - t
        assert "cancelled" in out, out
        assert latency < 2.0, latency
        again = s.perplexity(text, ctx=512, chunks=1)
        assert again.ppl == ref.ppl and again.n_scored == ref.n_scored
