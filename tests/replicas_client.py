"""Two estream serve replicas behind nginx, under the official OpenAI client (run by
tools/replicas-check.sh).

Every answer through the load balancer must equal the single reference server's answer to the
same request (the whole reply as the client parses it, but "id" and "created"):
/v1/completions (echo, logprobs 5, max_tokens 1), /v1/embeddings (base64, the client's default,
and float) and /v1/chat/completions (max_tokens 1, logprobs, top_logprobs 5).

1. Concurrent requests through nginx: each answer equals the reference's; the replicas'
   /metrics count exactly the requests sent, and each replica served some.
2. Failover: the same requests again, concurrently, and the first replica is sent SIGTERM once a
   few have been answered. Every request must still succeed with the reference's answer, with
   the client's retries off (max_retries=0): whatever the stopping replica does not answer
   (a refused connection, a 503 "stopping" on a kept-alive connection) nginx passes to the
   other one (proxy_next_upstream error timeout http_503 non_idempotent: estream's POSTs only
   read the model, so sending one twice is safe). nginx's access log must show at least one
   request passed on that way.
3. Once the first replica has exited: more requests, all answered by the second (its counter
   grows by exactly their number), equal to the reference's.

usage: replicas_client.py --lb URL --ref URL --replica URL --replica URL --stop-pid PID
                          --access-log NGINX_ACCESS_LOG
Prints "replicas: N checks passed", or every failed check and exits 1.
"""
import argparse
import os
import re
import signal
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed

import openai
from checks import Checks  # noqa: E402  (tests/checks.py, beside this script)

MODEL_ENDPOINTS = ("/v1/completions", "/v1/embeddings", "/v1/chat/completions")


def requests():
    """(label, function of a client) for each request: every endpoint, several shapes."""
    texts = ["The quick brown fox jumps over the lazy dog.", "naïve café — 東京 😀",
             "Robert <unk> is an English film , television and theatre actor .", "x",
             "1234567890 3.14159 2+2=4", "Line one\nLine two\n\tTabbed"]
    chats = [[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
             [{"role": "user", "content": "Name a colour."},
              {"role": "assistant", "content": "Red."},
              {"role": "user", "content": "Another one?"}],
             [{"role": "user", "content": "Which is larger, 7 or 9?"}]]
    out = []
    for i, t in enumerate(texts):
        out.append(("completions(text %d)" % i, lambda c, t=t: c.completions.create(
            model="m", prompt=t, echo=True, logprobs=5, max_tokens=1)))
    out.append(("completions(texts)", lambda c: c.completions.create(
        model="m", prompt=texts[:3], echo=True, logprobs=5, max_tokens=1)))
    out.append(("completions(ids)", lambda c: c.completions.create(
        model="m", prompt=[[1, 450, 4996, 17354], [306, 626, 1244]], echo=True, logprobs=5,
        max_tokens=1)))
    out.append(("completions(no echo)", lambda c: c.completions.create(
        model="m", prompt=texts[0], logprobs=3, max_tokens=1)))
    out.append(("embeddings(base64)", lambda c: c.embeddings.create(model="m", input=texts)))
    out.append(("embeddings(float)", lambda c: c.embeddings.create(
        model="m", input=texts[1], encoding_format="float")))
    for i, m in enumerate(chats):
        out.append(("chat %d" % i, lambda c, m=m: c.chat.completions.create(
            model="m", messages=m, max_tokens=1, logprobs=True, top_logprobs=5)))
    return out


def answer(resp):
    """The reply as the client parsed it, less what differs between two servers by design."""
    d = resp.model_dump()
    d.pop("id", None)
    d.pop("created", None)
    return d


def served(url):
    """Requests a replica answered with 200 on the model's endpoints (its /metrics)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    n = 0
    for ep, count in re.findall(r'^estream_requests_total\{endpoint="([^"]+)",code="200"\} '
                                r'(\d+)$', text, re.M):
        if ep in MODEL_ENDPOINTS:
            n += int(count)
    return n


def run_all(client, reqs, want, ck, label, workers=8, after=None):
    """Every request through client, concurrently; each answer must equal want's. after(k) is
    called as the k-th answer arrives (k = 1, 2, ...)."""
    done = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(fn, client): (i, name) for i, (name, fn) in enumerate(reqs)}
        for f in as_completed(futs):
            i, name = futs[f]
            try:
                got = answer(f.result())
            except Exception as e:  # an HTTP error, a dropped connection: a failed request
                ck.ok(False, "%s: %s failed: %s: %s" % (label, name, type(e).__name__, e))
            else:
                ck.ok(got == want[i], "%s: %s differs from the reference server's answer:\n"
                      "  got  %.300r\n  want %.300r" % (label, name, got, want[i]))
            done += 1
            if after:
                after(done)


def gone(pid):
    """The process has exited (no such process, or a zombie its parent has not reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lb", required=True, help="nginx's URL")
    ap.add_argument("--ref", required=True, help="the single reference server's URL")
    ap.add_argument("--replica", action="append", required=True, help="a replica's URL (2)")
    ap.add_argument("--stop-pid", type=int, required=True, help="the first replica's pid")
    ap.add_argument("--access-log", required=True, help="nginx's access log (log_format "
                    "'$request_uri $status upstream $upstream_addr $upstream_status')")
    args = ap.parse_args()
    ck = Checks()
    r1, r2 = args.replica
    # no retries in the client: a request that fails through nginx is a failure here
    mk = lambda url: openai.OpenAI(base_url=url + "/v1", api_key="unused",  # noqa: E731
                                   max_retries=0, timeout=120)
    ref, lb = mk(args.ref), mk(args.lb)
    reqs = requests()
    want = [answer(fn(ref)) for _, fn in reqs]

    # 1. concurrent requests through nginx, twice over
    base = served(r1), served(r2)
    twice = reqs + reqs
    run_all(lb, twice, want + want, ck, "balanced")
    n1, n2 = served(r1) - base[0], served(r2) - base[1]
    ck.ok(n1 + n2 == len(twice), "the replicas served %d + %d requests, %d were sent"
          % (n1, n2, len(twice)))
    ck.ok(n1 > 0 and n2 > 0, "one replica served nothing (%d, %d)" % (n1, n2))
    print("replicas: balanced %d requests: %d and %d" % (len(twice), n1, n2))

    # 2. SIGTERM to the first replica while the requests run
    stopped = []

    def stop(k):
        if k == 4 and not stopped:
            os.kill(args.stop_pid, signal.SIGTERM)
            stopped.append(time.monotonic())

    run_all(lb, twice, want + want, ck, "failover", after=stop)
    ck.ok(bool(stopped), "the first replica was not stopped")
    t0 = time.monotonic()
    while not gone(args.stop_pid) and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    ck.ok(gone(args.stop_pid), "the first replica has not exited 60 s after SIGTERM")
    # nginx's access log ("URI status upstream ADDRS STATUSES"): a request passed on from the
    # stopping replica to the other names both ("A, B" "502, 200" or "503, 200")
    with open(args.access_log) as f:
        passed_on = [line for line in f if "/health" not in line and
                     re.search(r" upstream \S+, \S+ ", line)]
    ck.ok(len(passed_on) >= 1, "no request went from the stopping replica to the other: the "
          "failover path was not exercised")
    print("replicas: failover: %d request(s) passed on (%s)"
          % (len(passed_on), "; ".join(" ".join(x.split()[-2:]) for x in passed_on[:3])))

    # 3. the first replica is gone: the second answers everything
    before = served(r2)
    run_all(lb, reqs, want, ck, "after")
    ck.ok(served(r2) - before == len(reqs), "after the first replica left, the second served "
          "%d of %d requests" % (served(r2) - before, len(reqs)))

    if ck.failed:
        print("replicas: %d checks passed, %d failed" % (ck.passed, len(ck.failed)))
        return 1
    print("replicas: %d checks passed" % ck.passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
