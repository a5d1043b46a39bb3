#!/usr/bin/env python3
"""Hostile clients against `estream serve` (the targets of bench/serve_soak.sh, which runs this).

usage: serve_soak.py ESTREAM MODEL
environment: MAX_CONN (20), IO_TIMEOUT (5), TIMEOUT (10), SLOW (4 x MAX_CONN slow senders),
  ATTACK_SECONDS (30: each phase under attack), CLIENTS (4 normal clients), THREADS (1)

Phases, each against a fresh server `estream serve -m MODEL -t THREADS --max-connections MAX_CONN
--io-timeout IO_TIMEOUT --timeout TIMEOUT --quiet`:
  sequential   one client, one kept-alive connection, completions one after the other for 5 s:
               requests/s and latency (a lone request must not wait for --batch-wait)
  attack-same  SLOW slow header senders from 127.0.0.1 (a byte of a request head every second
               per socket, reconnecting at once when closed) and CLIENTS normal clients from the
               same address, each alternating GET /health and a completion on a new connection,
               for ATTACK_SECONDS: statuses and latency (target: every request answered within
               IO_TIMEOUT + 1 s)
  attack-other the same with the slow senders on 127.0.0.2 (another client address)
  sigterm      the slow senders, a client trickling a body (Content-Length 80, a byte a second),
               SIGTERM after 3 s: seconds to exit, exit status, the trickled client's status
               (target: exit 0 within TIMEOUT + 2 s)
  fifo         a FIFO given as the model to estream info, prefill and serve: seconds to refuse
               (target: under a second)
Prints one JSON object per phase and a markdown table at the end. Standard library only.
"""
import errno
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ESTREAM, MODEL = sys.argv[1], sys.argv[2]
MAX_CONN = int(os.environ.get("MAX_CONN", "20"))
IO = float(os.environ.get("IO_TIMEOUT", "5"))
TIMEOUT = float(os.environ.get("TIMEOUT", "10"))
SLOW = int(os.environ.get("SLOW", str(4 * MAX_CONN)))
SECONDS = float(os.environ.get("ATTACK_SECONDS", "30"))
CLIENTS = int(os.environ.get("CLIENTS", "4"))
THREADS = os.environ.get("THREADS", "1")
BODY = json.dumps({"prompt": "The capital of France is", "max_tokens": 1, "logprobs": 1})


class Server:
    def __init__(self, model=MODEL, extra=()):
        args = [ESTREAM, "serve", "-m", model, "--port", "0", "--quiet", "-t", THREADS,
                "--max-connections", str(MAX_CONN), "--io-timeout", str(IO), "--timeout",
                str(TIMEOUT), *extra]
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log, self.port = [], None
        threading.Thread(target=self._drain, daemon=True).start()
        t0 = time.monotonic()
        while self.port is None:
            if self.p.poll() is not None or time.monotonic() - t0 > 60:
                raise SystemExit("the server did not start: " + "".join(self.log))
            time.sleep(0.01)
        while request("127.0.0.1", self.port, "GET", "/health")[0] != 200:
            time.sleep(0.05)

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)
            if "listening on http://127.0.0.1:" in line:
                self.port = int(line.split("127.0.0.1:")[1].split("/")[0])

    def stop(self):
        self.p.terminate()
        try:
            return self.p.wait(timeout=TIMEOUT + 30)
        except subprocess.TimeoutExpired:  # a second signal ends it
            self.p.terminate()
            return f"still running after {TIMEOUT + 30:g} s: {self.p.wait()}"


def connect(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def request(src, port, method, path, body=None):
    """One request on a new connection from src: (status or an error name, seconds)."""
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120, source_address=(src, 0))
        c.request(method, path, body, {"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        r.read()
        status = r.status
        c.close()
    except (OSError, http.client.HTTPException) as e:
        status = type(e).__name__
    return status, time.monotonic() - t0


class Slow(threading.Thread):
    """n sockets from src sending a request head a byte a second, reconnecting when closed."""
    HEAD = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nX-Pad: " +
            b"a" * 200)

    def __init__(self, port, n, src):
        super().__init__(daemon=True)
        self.port, self.n, self.src = port, n, src
        self.stop = threading.Event()
        self.closed = self.replies_408 = self.refused = 0

    def run(self):
        socks = [None] * self.n
        at = [0] * self.n
        while not self.stop.is_set():
            for i in range(self.n):
                if self.stop.is_set():
                    break
                s = socks[i]
                try:
                    if s is None:
                        s = socks[i] = connect(self.src, self.port)
                        s.setblocking(False)
                        at[i] = 0
                    try:
                        data = s.recv(4096)
                        if data.startswith(b"HTTP/1.1 408"):
                            self.replies_408 += 1
                        raise ConnectionError  # answered or closed: come back at once
                    except BlockingIOError:
                        pass
                    s.send(self.HEAD[at[i] % len(self.HEAD):][:1])
                    at[i] += 1
                except OSError as e:
                    if s is None and e.errno in (errno.ECONNREFUSED, errno.ECONNRESET):
                        self.refused += 1
                    if s is not None:
                        s.close()
                        self.closed += 1
                    socks[i] = None
            self.stop.wait(1.0)
        for s in socks:
            if s is not None:
                s.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def sequential():
    sv = Server()
    c = http.client.HTTPConnection("127.0.0.1", sv.port, timeout=60)
    lat, t_end = [], time.monotonic() + 5
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        c.request("POST", "/v1/completions", BODY, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
        lat.append(time.monotonic() - t0)
    c.close()
    m = http.client.HTTPConnection("127.0.0.1", sv.port)
    m.request("GET", "/metrics")
    held = [l for l in m.getresponse().read().decode().splitlines()
            if l.startswith("estream_batch_gather_seconds_total ")]
    rc = sv.stop()
    return {"phase": "sequential", "requests": len(lat), "per_s": round(len(lat) / 5, 1),
            "p50_ms": round(pct(lat, 0.5) * 1e3, 2), "p99_ms": round(pct(lat, 0.99) * 1e3, 2),
            "held_s": float(held[0].split()[1]) if held else None, "exit": rc}


def attack(slow_src):
    sv = Server()
    slow = Slow(sv.port, SLOW, slow_src)
    slow.start()
    time.sleep(2)  # the senders hold their share of the connections and queue for more
    results, lock = [], threading.Lock()
    t_end = time.monotonic() + SECONDS

    def client(k):
        i = 0
        while time.monotonic() < t_end:
            path, body = ("/health", None) if (i + k) % 2 == 0 else ("/v1/completions", BODY)
            st, sec = request("127.0.0.1", sv.port, "GET" if body is None else "POST", path, body)
            with lock:
                results.append((path, st, sec))
            i += 1

    ts = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    slow.stop.set()
    slow.join()
    rc = sv.stop()
    codes = {}
    for _, st, _ in results:
        codes[str(st)] = codes.get(str(st), 0) + 1
    lat = [sec for _, _, sec in results]
    return {"phase": "attack-" + ("same" if slow_src == "127.0.0.1" else "other"),
            "slow_senders": SLOW, "slow_from": slow_src, "requests": len(results), "codes": codes,
            "p50_s": round(pct(lat, 0.5), 3), "max_s": round(max(lat), 3),
            "slow_closed": slow.closed, "slow_408": slow.replies_408, "exit": rc}


def sigterm():
    sv = Server()
    slow = Slow(sv.port, SLOW, "127.0.0.1")
    slow.start()
    t = connect("127.0.0.2", sv.port)
    t.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 80\r\n\r\n{")
    for _ in range(3):
        time.sleep(1)
        t.sendall(b" ")
    t0 = time.monotonic()
    sv.p.terminate()
    t.settimeout(TIMEOUT + 10)
    reply = b""
    try:
        while not reply.endswith(b"\n") or b"\r\n\r\n" not in reply:
            try:
                t.send(b" ")
            except OSError:
                pass
            t.settimeout(1.0)
            try:
                d = t.recv(4096)
            except socket.timeout:
                continue
            if not d:
                break
            reply += d
    except OSError:
        pass
    try:
        rc = sv.p.wait(timeout=TIMEOUT + 30)
    except subprocess.TimeoutExpired:  # a second signal ends it
        rc = f"still running after {TIMEOUT + 30:g} s"
        sv.p.terminate()
        sv.p.wait()
    took = time.monotonic() - t0
    slow.stop.set()
    slow.join()
    status = reply.split(b" ")[1].decode() if reply.startswith(b"HTTP/1.1 ") else "none"
    return {"phase": "sigterm", "exit": rc, "seconds": round(took, 3), "trickled_status": status,
            "limit_s": TIMEOUT + 2}


def fifo():
    d = tempfile.mkdtemp()
    f = os.path.join(d, "model.gguf")
    os.mkfifo(f)
    ids = os.path.join(d, "ids.txt")
    open(ids, "w").write("1 2 3\n")
    out = {"phase": "fifo"}
    for name, args in (("info", ["info", "-m", f]), ("prefill", ["prefill", "-m", f, "--ids", ids]),
                       ("serve", ["serve", "-m", f, "--port", "0"])):
        t0 = time.monotonic()
        try:
            p = subprocess.run([ESTREAM, *args], capture_output=True, text=True, timeout=30)
            rc, err = p.returncode, p.stderr.strip().splitlines()[-1]
        except subprocess.TimeoutExpired:
            rc, err = "killed after 30 s", ""
        out[name] = {"exit": rc, "seconds": round(time.monotonic() - t0, 3), "error": err}
    os.unlink(f)
    os.unlink(ids)
    os.rmdir(d)
    return out


def main():
    rs = []
    for ph in (sequential, lambda: attack("127.0.0.1"), lambda: attack("127.0.0.2"), sigterm, fifo):
        r = ph()
        print(json.dumps(r), flush=True)
        rs.append(r)
    seq, same, other, term, ff = rs
    ok_same = all(k == "200" for k in same["codes"]) and same["max_s"] <= IO + 1
    ok_other = all(k == "200" for k in other["codes"]) and other["max_s"] <= IO + 1
    ok_term = term["exit"] == 0 and term["seconds"] <= TIMEOUT + 2
    ok_fifo = all(ff[k]["exit"] == 1 and ff[k]["seconds"] < 1 for k in ("info", "prefill", "serve"))
    print()
    print("| case | result | target | met |")
    print("|---|---|---|---|")
    print(f"| sequential client, one kept-alive connection (`--batch-wait` 50) | {seq['per_s']} "
          f"requests/s, p50 {seq['p50_ms']} ms, p99 {seq['p99_ms']} ms, batches held "
          f"{seq['held_s']} s | no wait for arrivals | {'yes' if seq['held_s'] == 0 else 'no'} |")
    for r, ok in ((same, ok_same), (other, ok_other)):
        print(f"| {r['slow_senders']} slow header senders from {r['slow_from']} "
              f"({r['slow_senders'] // MAX_CONN}x `--max-connections` {MAX_CONN}), {CLIENTS} "
              f"clients from 127.0.0.1, {SECONDS:g} s | {r['requests']} requests "
              f"{r['codes']}, p50 {r['p50_s']} s, max {r['max_s']} s; senders closed "
              f"{r['slow_closed']} times ({r['slow_408']} with 408) | every request answered "
              f"within `--io-timeout` {IO:g} + 1 s | {'yes' if ok else 'no'} |")
    print(f"| SIGTERM during the attack and a trickled body | exit {term['exit']} after "
          f"{term['seconds']} s; the trickled body got {term['trickled_status']} | exit 0 within "
          f"`--timeout` {TIMEOUT:g} + 2 s | {'yes' if ok_term else 'no'} |")
    print(f"| a FIFO as the model | info {ff['info']['seconds']} s, prefill "
          f"{ff['prefill']['seconds']} s, serve {ff['serve']['seconds']} s (exit "
          f"{ff['info']['exit']}/{ff['prefill']['exit']}/{ff['serve']['exit']}: "
          f"\"{ff['info']['error']}\") | refused in under a second | {'yes' if ok_fifo else 'no'} |")
    sys.exit(0 if ok_same and ok_other and ok_term and ok_fifo else 1)


main()
