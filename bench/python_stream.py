#!/usr/bin/env python3
"""python_stream.py - a Python stream's time, for comparing two builds of the module.

Two cases, one thread, a callback that keeps nothing (it reads one score, so
the block is touched):

  * sentences: 100k tokens of log-normal sentences (as python_vs_cpp.py),
    n_in = 256, h = 128, one label, budget 16 MiB;
  * long: 24 splits of 1500 tokens, one label, budget 64 MiB (each split's
    [n, n] block is 9 MB);
  * long_h16: the same with h = 16, where writing the blocks is a larger
    part of the work.

Each case also times predict (the same work, its outputs kept) in the same
process, so stream / predict is a ratio the machine's load disturbs less.

    PYTHONPATH=build/python python3 bench/python_stream.py [--reps R]
    python3 bench/python_stream.py --compare DIR_A DIR_B [--rounds K]

--compare runs the script alternately with PYTHONPATH=DIR_A and DIR_B (e.g.
a build of the module before and after a change), K rounds each, and prints
the medians of each side and their ratio (B / A).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def measure(reps):
    import biaffine

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from python_vs_cpp import workload  # 100k tokens of sentences, as there

    rng = np.random.default_rng(0)
    long_doc = [rng.standard_normal((24 * 1500, 256)).astype(np.float32)]
    cases = {
        "sentences": (*workload(rng, 100_000, 256), biaffine.budget.megabytes(16), 128),
        "long": (long_doc, [[1500] * 24], biaffine.budget.megabytes(64), 128),
        "long_h16": (long_doc, [[1500] * 24], biaffine.budget.megabytes(64), 16),
    }
    out = {}
    for name, (docs, lengths, budget, hidden) in cases.items():
        scorer = biaffine.biaffine_scorer(256, hidden, seed=1)
        kw = dict(budget=budget, threads=1)
        seen = []

        def stream():
            seen.clear()
            scorer.predict_stream(docs, lengths, lambda k, d, s: seen.append(float(s[-1, -1]) if s.size else 0.0),
                                  **kw)

        def predict():
            scorer.predict(docs, lengths, **kw)

        stream(), predict()  # warm-up
        t = {"stream": [], "predict": []}
        for _ in range(reps):  # interleaved
            for what, fn in (("stream", stream), ("predict", predict)):
                t0 = time.perf_counter()
                fn()
                t[what].append(time.perf_counter() - t0)
        out[name] = {k: statistics.median(v) for k, v in t.items()}
        out[name]["splits"] = len(seen)
    return out


def compare(a, b, rounds, reps):
    runs = {a: [], b: []}
    for _ in range(rounds):
        for d in (a, b):
            env = dict(os.environ, PYTHONPATH=d)
            r = subprocess.run([sys.executable, __file__, "--reps", str(reps), "--json"], env=env, check=True,
                               capture_output=True, text=True)
            runs[d].append(json.loads(r.stdout))
    for case in runs[a][0]:
        print(f"{case}:")
        for what in ("stream", "predict"):
            ma = statistics.median(r[case][what] for r in runs[a])
            mb = statistics.median(r[case][what] for r in runs[b])
            print(f"  {what:8s} A {ma * 1e3:9.1f} ms   B {mb * 1e3:9.1f} ms   B/A {mb / ma:.3f}")
        ra = statistics.median(r[case]["stream"] / r[case]["predict"] for r in runs[a])
        rb = statistics.median(r[case]["stream"] / r[case]["predict"] for r in runs[b])
        print(f"  stream/predict  A {ra:.3f}   B {rb:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("DIR_A", "DIR_B"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare, args.rounds, args.reps)
        return
    res = measure(args.reps)
    if args.json:
        print(json.dumps(res))
        return
    for case, r in res.items():
        print(f"{case}: stream {r['stream'] * 1e3:.1f} ms, predict {r['predict'] * 1e3:.1f} ms, "
              f"{r['splits']} splits")


if __name__ == "__main__":
    main()
