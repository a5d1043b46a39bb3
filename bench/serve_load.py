#!/usr/bin/env python3
"""Load on `estream serve`: CLIENTS threads on loopback, each sending scoring requests
(/v1/completions with echo, logprobs 1, max_tokens 1, the prompt as token ids) taken in turn
from a JSONL file of {"ids": [...]} records, for SECONDS; then prints one JSON line with the
counts by status, tokens answered, throughput, latency percentiles and whether every answered
record's log-probs equal the offline `estream score` output (REF, the same records).

usage: serve_load.py URL RECORDS.jsonl REF.jsonl CLIENTS SECONDS [API_KEY]
Standard library only (the machines may have no PyPI). A request that fails with anything but
200 or 429 is counted as an error; a 429 is retried after its Retry-After.
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def main():
    url, rec_path, ref_path, clients, seconds = sys.argv[1:6]
    key = sys.argv[6] if len(sys.argv) > 6 else None
    clients, seconds = int(clients), float(seconds)
    u = urllib.parse.urlparse(url)
    records = [json.loads(l)["ids"] for l in open(rec_path) if l.strip()]
    ref = [json.loads(l)["logprobs"] for l in open(ref_path) if l.strip()]
    assert len(ref) == len(records), "REF and RECORDS differ in length"
    lock = threading.Lock()
    state = {"next": 0, "codes": {}, "tokens": 0, "lat": [], "mismatch": 0, "checked": 0,
             "errors": []}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t_end = time.monotonic() + seconds

    def client():
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        while time.monotonic() < t_end:
            with lock:
                i = state["next"] % len(records)
                state["next"] += 1
            body = json.dumps({"model": "m", "prompt": records[i], "echo": True, "logprobs": 1,
                               "max_tokens": 1, "temperature": 0})
            t0 = time.monotonic()
            try:
                conn.request("POST", "/v1/completions", body, headers)
                r = conn.getresponse()
                data = r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                status = "exception"
                data = str(e).encode()
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
            dt = time.monotonic() - t0
            ok = False
            if status == 200:
                lp = json.loads(data)["choices"][0]["logprobs"]["token_logprobs"][:-1]
                ok = lp == ref[i]
            with lock:
                state["codes"][str(status)] = state["codes"].get(str(status), 0) + 1
                if status == 200:
                    state["tokens"] += len(records[i])
                    state["lat"].append(dt)
                    state["checked"] += 1
                    state["mismatch"] += not ok
                elif status != 429 and len(state["errors"]) < 5:
                    state["errors"].append(f"{status}: {data[:200]!r}")
            if status == 429:
                time.sleep(float(r.getheader("Retry-After", "1")) * 0.05)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    lat = sorted(state["lat"])

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else None

    print(json.dumps({"clients": clients, "seconds": round(wall, 1), "codes": state["codes"],
                      "tokens": state["tokens"], "tok_per_s": round(state["tokens"] / wall, 1),
                      "p50_s": pct(0.50), "p99_s": pct(0.99), "checked": state["checked"],
                      "mismatches": state["mismatch"], "errors": state["errors"]}))


if __name__ == "__main__":
    main()
