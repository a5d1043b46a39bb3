"""estream.ray.Scorer under Ray Data (run by tools/ray-check.sh).

On a local Ray cluster (2 CPUs, no dashboard), ``ds.map_batches(estream.ray.Scorer, ...)`` with
two actors scores a dataset of mixed estream score records (texts, ids, pairs, choices with and
without gold, labels, chats, chats with labels, reranks, and records the CLI refuses), in the
"numpy" and the "pandas" batch formats; every output row must equal the line ``estream score
--on-error skip`` writes for the same record: the same fields (and no others), float32 values
bit for bit, doubles as the CLI prints them (9 significant digits), ints and bools as such, the
CLI's message in "error". Both actors must have served batches. Then, without Ray, the Scorer
called on batches Arrow could not hold (members of the wrong type, nulls, numpy's float
"gold"), its refusals (an input column named like an output, an unknown batch type, a bad
top), and that ``import estream`` does not import ray.

usage: ray_check.py --estream BIN --model MODEL.gguf --workdir DIR
Prints "ray: N checks passed", or every failed check and exits 1.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
from checks import Checks  # noqa: E402  (tests/checks.py, beside this script)

TOP = 3


def records():
    """About 40 records of every kind, each with an "id" (the rows come back in any order)."""
    chat = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
    recs = [
        {"text": "The cat sat on the mat."},
        {"text": "Café au lait, naïve résumé — déjà vu."},
        {"text": "中文文本和日本語のテキスト"},
        {"text": "emoji 🙂🚀 and symbols ∑∫√"},
        {"text": "A" * 200},
        {"text": "Line one\nLine two\n\tTabbed line"},
        {"ids": [1, 450, 6635, 338]},
        {"ids": [450, 6635, 338, 7254]},  # conditioned on an implicit BOS
        {"ids": [31999, 0, 3]},
        {"context": "The capital of France is", "continuation": " Paris"},
        {"context": "Q: 2+2= ", "continuation": "4"},
        {"context": "", "continuation": "An empty context has BOS as its prefix"},
        {"context": "Unicode: café\n\n", "continuation": "naïve"},
        {"context": "The sky is", "choices": [" blue", " green", " a very long choice"],
         "gold": 0},
        {"context": "Q: Which is a fruit?\nA:", "choices": [" apple", " chair", " café"],
         "gold": 2},
        {"context": "No gold here:", "choices": [" one", " two"]},
        {"context": "Pick:", "choices": [" x", " y", " z", " w"], "gold": 3},
        {"text": "Great film! Sentiment:", "labels": [" positive", " negative"]},
        {"text": "The weather today is", "labels": [" sunny and warm", " cold", " rain"]},
        {"text": "Great film!", "labels": ["a", "b", "c"]},
        {"messages": chat},
        {"messages": [{"role": "user", "content": "Name a colour."},
                      {"role": "assistant", "content": "Red."},
                      {"role": "user", "content": "Another one?"}]},
        {"messages": chat, "labels": ["yes", "no"]},
        {"query": "what is a cat", "documents": ["A cat is a small animal.", "Paris is a city.",
                                                 "Cats purr."]},
        {"query": "capital of France", "documents": ["Paris is a city.", "Berlin"],
         "instruction": "Judge relevance"},
        {"text": "hello world", "meta": "passes through"},
        {"text": "1234567890 3.14159 2+2=4 (a, b) [c; d] {e: f}"},
        {"context": "tabs\t", "continuation": "\tand more"},
        {"ids": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"text": "<s> special </s> tokens"},
        # refused by the CLI: each must give its message in "error"
        {"context": "no continuation"},
        {"text": "both", "ids": [1, 2]},
        {"ids": [32000]},
        {"context": "c", "choices": [" a", " b"], "gold": 5},
        {"ids": [1, 2], "labels": [" a", " b"]},
        {"text": "", "labels": [" a", " b"]},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"continuation": "x"},
        {"query": "q"},
        {"text": "too long " * 300},
        {"meta": "no record members"},
        {"messages": [{"role": "system", "content": "Be brief."},  # Mixtral's template
                      {"role": "user", "content": "Name a colour."}]},  # refuses system
    ]
    for i, r in enumerate(recs):
        r["id"] = i
    return recs


def run_cli(args, recs):
    src = os.path.join(args.workdir, "in.jsonl")
    dst = os.path.join(args.workdir, "out.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    for p in (dst, dst + ".meta"):
        if os.path.exists(p):
            os.unlink(p)
    p = subprocess.run([args.estream, "score", "-m", args.model, "-f", src, "-o", dst,
                        "--on-error", "skip", "--top", str(TOP), "-t", "2"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("estream score failed (%d): %s" % (p.returncode, p.stderr))
    with open(dst, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ---- comparing a row with the CLI's line ------------------------------------------------------

OUTPUT_FIELDS = ("ids", "logprobs", "sum", "greedy", "top", "logprob", "n_tokens", "n_bytes",
                 "chosen", "chosen_norm_tokens", "chosen_norm_bytes", "correct",
                 "label_logprobs", "probs", "label", "next", "scores", "ranking", "error")


def plain(v):
    """A value Ray gave back, as Python lists, dicts and scalars."""
    if isinstance(v, np.ndarray):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def same(got, want, f32):
    """got (from the Scorer) equals want (the CLI's JSON): floats that are float32 results
    (f32) bit for bit and really float32, doubles as %.9g prints them; ints as ints, bools as
    bools."""
    if want is None or isinstance(want, bool):
        return got is want
    if isinstance(want, int):
        return type(got) is int and got == want
    if isinstance(want, float):
        if type(got) is not float:
            return False
        if f32:
            a, b = np.float32(got), np.float32(want)
            return float(a) == got and a.view(np.uint32) == b.view(np.uint32)
        return float("%.9g" % got) == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and \
            all(same(g, w, f32) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and \
            all(same(got[k], want[k], f32) for k in want)
    return got == want


def check_row(ck, label, row, want, rec):
    """One output row against the CLI's line for its record."""
    row = {k: plain(v) for k, v in row.items()}
    text_kind = isinstance(want.get("greedy"), list)  # a text's logprobs are float32
    for f in OUTPUT_FIELDS:
        got = row.get(f)
        if f in want:
            f32 = f in ("top", "next") or (f == "logprobs" and text_kind)
            w = want[f]
            if f in ("top", "next"):  # the CLI's [id, logprob] is {"id", "logprob"} (Arrow)
                pair = lambda p: {"id": p[0], "logprob": p[1]}  # noqa: E731
                w = [pair(p) for p in w] if f == "next" else \
                    [None if row is None else [pair(p) for p in row] for row in w]
            ck.ok(same(got, w, f32), "%s: %s is %r, estream score wrote %r"
                  % (label, f, got, want[f]))
        elif f == "ids" and "ids" in rec:  # a refused ids record keeps its input
            ck.ok(got == rec["ids"], "%s: ids %r, the input's %r" % (label, got, rec["ids"]))
        else:
            ck.ok(got is None, "%s: %s is %r where estream score writes none" % (label, f, got))
    for k, v in rec.items():  # the input's columns pass through
        if k != "ids":
            ck.ok(row.get(k) == v, "%s: input column %s is %r, not %r" % (label, k, row.get(k), v))


# ---- Ray ---------------------------------------------------------------------------------------

def ray_part(ck, args, recs, want):
    import ray
    import estream.ray

    class PidScorer(estream.ray.Scorer):
        """The Scorer, and which actor (process) served each row."""

        def __call__(self, batch):
            out = super().__call__(batch)
            out["pid"] = np.full(len(out["error"]), os.getpid())
            return out

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=os.path.join(args.workdir, "ray"),
             logging_level="WARNING", configure_logging=True, log_to_driver=True)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        ds = ray.data.from_items(recs)
        for fmt in ("numpy", "pandas"):
            out = ds.map_batches(PidScorer, fn_constructor_kwargs={"model": args.model,
                                                                   "threads": 1, "top": TOP},
                                 compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1,
                                 batch_size=4, batch_format=fmt).take_all()
            ck.ok(len(out) == len(recs), "%s: %d rows for %d records" % (fmt, len(out), len(recs)))
            by_id = {}
            for row in out:
                by_id.setdefault(plain(row.get("id")), []).append(row)
            ck.ok(sorted(by_id) == list(range(len(recs))) and
                  all(len(v) == 1 for v in by_id.values()),
                  "%s: the rows' ids %r" % (fmt, sorted(by_id)))
            pids = {plain(r["pid"]) for r in out}
            ck.ok(len(pids) == 2, "%s: %d actors served batches, not 2" % (fmt, len(pids)))
            for i, rec in enumerate(recs):
                if i in by_id:
                    check_row(ck, "%s record %d" % (fmt, i), by_id[i][0], want[i], rec)
        # one kind per dataset: every column a plain Arrow type (none pickled by Ray)
        one = [r for r in recs if "choices" in r and "error" not in want[r["id"]]]
        for fmt in ("numpy", "pandas"):
            out = ray.data.from_items(one).map_batches(
                estream.ray.Scorer, fn_constructor_kwargs={"model": args.model, "threads": 1},
                compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1, batch_size=2,
                batch_format=fmt).materialize()
            types = dict(zip(out.schema().names, map(str, out.schema().types)))
            ck.ok(not any("pickled" in t or "object" in t for t in types.values()) and
                  types.get("choices") == "list<item: string>" and
                  types.get("logprobs") == "list<item: double>",
                  "%s: the columns of a choices dataset are %r" % (fmt, types))
        # without threads, an actor's session runs OMP_NUM_THREADS of them, which Ray sets to the
        # actor's num_cpus: 1 here, below the 2 cores a default would take on CI's machines
        @ray.remote(num_cpus=1)
        class Threads:
            def count(self, model):
                import estream
                s = estream.Session(model)
                n = s.stats()["n_threads"]
                s.close()
                return n, os.environ.get("OMP_NUM_THREADS")

        n, omp = ray.get(Threads.remote().count.remote(args.model))
        ck.ok(omp == "1" and n == 1, "an actor of num_cpus=1: OMP_NUM_THREADS %r, %d threads, "
              "not 1 and 1" % (omp, n))
    finally:
        ray.shutdown()


# ---- the Scorer without Ray --------------------------------------------------------------------

def direct_part(ck, args):
    """Batches a Ray dataset could not hold in Arrow (mixed types), nulls, and refusals."""
    import pandas as pd
    import estream
    import estream.ray

    odd = [
        {"text": 5},
        {"text": ["a"]},
        {"ids": "1 2 3"},
        {"ids": [1, 2.5]},
        {"ids": [True]},
        {"context": 3, "continuation": "x"},
        {"context": "c", "continuation": 4},
        {"context": "c", "choices": " a"},
        {"context": "c", "choices": [" a", 7]},
        {"context": "c", "choices": [" a", " b"], "gold": "1"},
        {"context": "c", "choices": [" a", " b"], "gold": 1.5},
        {"context": "c", "choices": [" a", " b"], "gold": True},
        {"text": "t", "labels": "yes"},
        {"messages": "hi"},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": "x"}], "text": "t"},
        {"query": 1, "documents": ["a"]},
        {"query": "q", "documents": ["a"], "instruction": 3},
        {"query": "q", "documents": []},
        {"text": "fine", "ids": None, "labels": None},  # nulls are absent members
        {"context": "The sky is", "choices": [" blue", " green"], "gold": 1},
    ]
    for i, r in enumerate(odd):
        r["id"] = i
    # a null member is an absent one (a column has a cell in every row): the CLI gets none
    want = run_cli(args, [{k: v for k, v in r.items() if v is not None} for r in odd])
    keys = sorted({k for r in odd for k in r})

    def column(k):
        a = np.empty(len(odd), dtype=object)
        for i, r in enumerate(odd):
            a[i] = r.get(k)
        return a

    batch = {k: column(k) for k in keys}
    batch["gold"] = np.array([np.nan if r.get("gold") is None else r["gold"] for r in odd],
                             dtype=object)
    s = estream.ray.Scorer(args.model, threads=2, top=TOP)
    try:
        out = s(batch)
        for i, rec in enumerate(odd):
            row = {k: v[i] for k, v in out.items()}
            check_row(ck, "numpy odd record %d" % i, row,
                      want[i], {k: v for k, v in rec.items() if v is not None})
        df = pd.DataFrame({k: column(k) for k in keys})
        df["gold"] = pd.array([r.get("gold") for r in odd], dtype=object)
        out = s(df)
        ck.ok(isinstance(out, pd.DataFrame) and list(out.index) == list(df.index),
              "pandas: the output is not the batch's DataFrame")
        for i, rec in enumerate(odd):
            check_row(ck, "pandas odd record %d" % i, out.iloc[i].to_dict(), want[i],
                      {k: v for k, v in rec.items() if v is not None})
        # numpy's view of an integer column with nulls: a float64 "gold"
        fl = s({"context": np.array(["The sky is"] * 2, dtype=object),
                "choices": np.array([[" blue", " green"]] * 2, dtype=object),
                "gold": np.array([1.0, np.nan])})
        ck.ok(fl["correct"][0] == want[-1]["correct"] and fl["correct"][1] is None and
              fl["error"][1] is None, "a float64 gold: %r" % (fl["correct"],))
        # an empty batch
        e = s({"text": np.array([], dtype=object)})
        ck.ok(len(e["error"]) == 0, "an empty batch: %r" % (e,))
        # a column named like an output field is refused; a prefix avoids it
        clash = {"text": np.array(["x"], dtype=object), "label": np.array([1])}
        try:
            s(clash)
            ck.ok(False, "a 'label' column was overwritten")
        except ValueError as err:
            ck.ok("label" in str(err) and "prefix" in str(err), "the clash message: %s" % err)
        p = estream.ray.Scorer(args.model, threads=2, prefix="es_")
        try:
            po = p(clash)
            ck.ok(po["label"][0] == 1 and po["es_ids"][0][0] == 1 and po["es_error"][0] is None,
                  "prefix: %r" % (po,))
        finally:
            p.close()
        try:
            s([{"text": "x"}])
            ck.ok(False, "a list was taken as a batch")
        except TypeError as err:
            ck.ok("numpy" in str(err) and "pandas" in str(err), "the batch type message: %s" % err)
    finally:
        s.close()
    for bad in ({"top": -1}, {"top": 101}, {"top": True}):
        try:
            estream.ray.Scorer(args.model, **bad)
            ck.ok(False, "Scorer(%r) was accepted" % bad)
        except ValueError:
            ck.ok(True, "")
    try:
        estream.ray.Scorer(os.path.join(args.workdir, "missing.gguf"))
        ck.ok(False, "a missing model was accepted")
    except estream.Error as err:
        ck.ok("missing.gguf" in str(err), "a missing model: %s" % err)
    p = subprocess.run([sys.executable, "-c", "import estream, sys; "
                        "sys.exit('ray' in sys.modules)"])
    ck.ok(p.returncode == 0, "import estream imported ray")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--estream", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--no-ray", action="store_true", help="only the checks without Ray")
    args = ap.parse_args()
    ck = Checks()
    recs = records()
    want = run_cli(args, recs)
    ck.ok(len(want) == len(recs), "estream score wrote %d lines for %d records"
          % (len(want), len(recs)))
    n_err = sum("error" in w for w in want)
    ck.ok(n_err == 12, "estream score refused %d records, the dataset has 12 bad ones" % n_err)
    direct_part(ck, args)
    if not args.no_ray:
        ray_part(ck, args, recs, want)
    if ck.failed:
        print("ray: %d checks passed, %d failed" % (ck.passed, len(ck.failed)))
        return 1
    print("ray: %d checks passed" % ck.passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
