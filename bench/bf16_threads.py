#!/usr/bin/env python3
"""bf16_threads.py - a bf16 scorer's predict from one and from several Python threads.

One float32 scorer with precision="bf16" (n_in, hidden, labels as given;
default 256, 128, 1 as python_vs_cpp.py), one document of --tokens tokens
(sentences log-normal around 18 tokens, clipped to [1, 100]), budget 16 MiB:

  * one call: the median time of scorer.predict (or predict_heads with
    --heads) over --reps calls on one thread, wall and CPU (the CPU time is
    less moved by other processes on a shared machine);
  * throughput: --threads threads each making --calls calls at once; calls
    per second against one thread's (the speedup), the median of --reps runs.

Also checks that every threaded call gave the single-thread call's bytes
(issue 47: the bf16 weight copy was repacked in place by every Python call).

    PYTHONPATH=build/python /usr/bin/python3 bench/bf16_threads.py [--tokens N] [--threads T] [--precision fp32]

--precision fp32 runs the same on an fp32 scorer (no bf16 state at all):
what the machine gives a second thread right now, the ceiling for bf16.

Prints JSON-ish lines; exit 1 when a threaded call differed.
"""
import argparse
import statistics
import sys
import threading
import time

import numpy as np

import biaffine


def workload(rng, tokens, n_in):
    lengths, total = [], 0
    while total < tokens:
        n = min(int(np.clip(round(rng.lognormal(np.log(18), 0.6)), 1, 100)), tokens - total)
        lengths.append(n)
        total += n
    return [rng.standard_normal((tokens, n_in)).astype(np.float32)], [lengths]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=20_000)
    ap.add_argument("--n-in", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--labels", type=int, default=1)
    ap.add_argument("--heads", action="store_true", help="time predict_heads instead of predict")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=10, help="calls per thread in a throughput run")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--precision", default="bf16", help="bf16, or fp32 for comparison")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    docs, lengths = workload(rng, args.tokens, args.n_in)
    s = biaffine.biaffine_scorer(args.n_in, args.hidden, args.labels, seed=1, precision=args.precision)
    kw = dict(budget=biaffine.budget.megabytes(16))
    heads = [np.concatenate([rng.integers(0, n, size=n) for n in lengths[0]])]

    def call():
        if args.heads:
            return s.predict_heads(docs, lengths, heads, **kw)
        return s.predict(docs, lengths, **kw)

    want = [y.tobytes() for y in call()]
    bad = [0]

    cpu = []

    def one_time():
        c, t = time.process_time(), time.perf_counter()
        call()
        t = time.perf_counter() - t
        cpu.append(time.process_time() - c)  # CPU seconds: less moved by other processes on a shared machine
        return t

    def threaded_rate(n):
        barrier = threading.Barrier(n + 1)

        def work():
            barrier.wait()
            for _ in range(args.calls):
                if [y.tobytes() for y in call()] != want:
                    bad[0] += 1

        ts = [threading.Thread(target=work) for _ in range(n)]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        return n * args.calls / (time.perf_counter() - t0)

    one_time()
    cpu.clear()
    singles, speedups = [], []
    for _ in range(args.reps):  # interleaved: the machine's load moves both alike
        singles.append(one_time())
        r1 = threaded_rate(1)
        rn = threaded_rate(args.threads)
        speedups.append(rn / r1)
    print(f"one call: median {statistics.median(singles) * 1e3:.2f} ms "
          f"(min {min(singles) * 1e3:.2f}, max {max(singles) * 1e3:.2f})")
    print(f"one call, CPU time: median {statistics.median(cpu) * 1e3:.2f} ms "
          f"(min {min(cpu) * 1e3:.2f}, max {max(cpu) * 1e3:.2f})")
    print(f"{args.threads} threads / 1 thread throughput: median {statistics.median(speedups):.2f}x "
          f"(min {min(speedups):.2f}, max {max(speedups):.2f})")
    print(f"threaded calls that differed from the single-thread bytes: {bad[0]}")
    return 1 if bad[0] else 0


if __name__ == "__main__":
    sys.exit(main())
