#!/usr/bin/env python3
"""python_vs_cpp.py - the Python module's overhead, and the PyTorch reference.

100k tokens (n_in = 256, h = 128, float32, sentences log-normal around 18
tokens, clipped to [1, 100], as bench_vs_reference), three operations, each
timed two ways in one process, interleaved:

  * predict: scorer.predict(docs, split_lengths, budget=16 MiB), one label;
  * forward+backward: Y, bp = scorer.forward(..., train=True); bp(dY) (dY
    arrays made once, outside the clock), one label;
  * heads: label_scorer.predict_heads(docs, split_lengths, heads), 50
    labels, one head per token inside its split;

  * Python: the method above, numpy in, numpy out;
  * C++: the same call on the same arrays run inside C++ (no Python between
    repetitions; scorer._time_cpp(kind, ...));
  * PyTorch (only when python3-torch is installed): the reference model (the
    seed's PairwiseBilinear: Linear + ReLU projections, bilinear with bias
    columns, mask) on spaCy-rule padded batches of 4096 items, torch threads
    set to the same count, weights copied from our scorer.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_vs_cpp.py [--tokens N] [--reps R] [--threads T]

(A build with the tests compiles the module at -O1, as the tests; for
figures configure build/ with -DBIAFFINE_TEST_OPTIMIZATION= or use a wheel.)

Prints medians; the Python overhead is (Python - C++) / C++. Exit 1 when
any exceeds 5% (on a quiet machine; rerun on a loaded one).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import biaffine


def workload(rng, tokens, n_in):
    lengths = []
    total = 0
    while total < tokens:
        n = int(np.clip(round(rng.lognormal(np.log(18), 0.6)), 1, 100))
        n = min(n, tokens - total)
        lengths.append(n)
        total += n
    doc = rng.standard_normal((tokens, n_in)).astype(np.float32)
    return [doc], [lengths]


def torch_reference(scorer, docs, lengths, threads, reps, ours):
    try:
        import torch
    except ImportError:
        return None, "not run: python3-torch is not installed (sudo apt-get install python3-torch)"
    torch.set_num_threads(threads)
    p = {n: torch.from_numpy(v.copy()) for n, v, _ in scorer.parameters()}
    x = torch.from_numpy(docs[0])
    lens = lengths[0]
    offsets = np.concatenate([[0], np.cumsum(lens)])
    batches = biaffine.minibatch_by_padded_size(lens, 4096)

    def run():
        out = [None] * len(lens)
        with torch.no_grad():
            for batch in batches:
                L = max(lens[i] for i in batch)
                xp = torch.zeros(len(batch), L, x.shape[1])
                for j, i in enumerate(batch):
                    xp[j, : lens[i]] = x[offsets[i]: offsets[i + 1]]
                u = torch.relu(xp @ p["head_weight"].T + p["head_bias"])
                v = torch.relu(xp @ p["dependent_weight"].T + p["dependent_bias"])
                ones = torch.ones(len(batch), L, 1)
                u = torch.cat([u, ones], -1)
                v = torch.cat([v, ones], -1)
                # S[b, m, l] = v[b, m] . W . u[b, l]  (rows dependents, columns heads)
                w = p["bilinear_weight"][0]
                s = torch.einsum("bmj,ij,bli->bml", v, w, u)
                mask = torch.arange(L)[None, :] >= torch.tensor([lens[i] for i in batch])[:, None]
                s = s + mask[:, None, :] * -10000.0
                for j, i in enumerate(batch):
                    out[i] = s[j, : lens[i], : lens[i]].numpy()
        return out

    times = []
    res = run()
    for _ in range(reps):
        t0 = time.perf_counter()
        res = run()
        times.append(time.perf_counter() - t0)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(res, ours) if a.size)
    return (statistics.median(times), min(times), diff, torch.__version__), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--ops", default="predict,train,heads",
                    help="comma-separated subset of predict, train (forward+backward), heads")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    docs, lengths = workload(rng, args.tokens, 256)
    scorer = biaffine.biaffine_scorer(256, 128, seed=1)
    budget = biaffine.budget.megabytes(16)
    kw = dict(budget=budget, threads=args.threads)

    ours = scorer.predict(docs, lengths, **kw)  # warm-up
    label_scorer = biaffine.biaffine_scorer(256, 128, 50, seed=2)
    heads = [np.concatenate([rng.integers(0, n, size=n) for n in lengths[0]])]
    dY = [np.full_like(y, 1e-3) for y in ours]

    def py_predict():
        return scorer.predict(docs, lengths, **kw)

    def py_train():
        Y, bp = scorer.forward(docs, lengths, train=True, **kw)
        return bp(dY)

    def py_heads():
        return label_scorer.predict_heads(docs, lengths, heads, **kw)

    cases = [
        ("predict", "scorer.predict", py_predict, lambda: scorer._time_cpp("predict", docs, lengths, **kw)),
        ("forward+backward", "scorer.forward + backprop", py_train,
         lambda: scorer._time_cpp("forward_backward", docs, lengths, dY=dY, **kw)),
        ("heads (50 labels)", "label_scorer.predict_heads", py_heads,
         lambda: label_scorer._time_cpp("predict_heads", docs, lengths, heads=heads, **kw)),
    ]
    keys = dict(zip(("predict", "train", "heads"), cases))
    wanted = [op.strip() for op in args.ops.split(",")]
    if "predict" not in wanted:
        wanted.insert(0, "predict")  # the PyTorch comparison and the summary are relative to it
    results = []
    for name, call, py, cpp in (keys[op] for op in wanted):
        py(); cpp()  # warm-up
        py_times, cpp_times = [], []
        for _ in range(args.reps):  # interleaved
            t0 = time.perf_counter()
            out = py()
            py_times.append(time.perf_counter() - t0)
            del out
            cpp_times.extend(cpp())
        results.append((name, call, py_times, cpp_times))

    print(f"CPU: {biaffine.info()['cpu']['model']} ({os.cpu_count()} hardware threads; load average {os.getloadavg()[0]:.2f}); "
          f"numpy {np.__version__}; biaffine {biaffine.__version__}; {sys.executable}")
    print(f"workload: {args.tokens} tokens, {len(lengths[0])} splits (max length {max(lengths[0])}), "
          f"n_in 256, h 128, float32, budget 16 MiB, threads {args.threads}; "
          f"{args.reps} interleaved repetitions, medians")
    print()
    print("| operation | implementation | median s | min s | time / C++ |")
    print("|---|---|---:|---:|---:|")
    worst = -1.0
    for name, call, py_times, cpp_times in results:
        py_med, cpp_med = statistics.median(py_times), statistics.median(cpp_times)
        print(f"| {name} | C++ (same call, timed inside C++) | {cpp_med:.4f} | {min(cpp_times):.4f} | 1.00x |")
        print(f"| {name} | Python: {call} (numpy in, numpy out) | {py_med:.4f} | {min(py_times):.4f} | "
              f"{py_med / cpp_med:.3f}x |")
        worst = max(worst, (py_med - cpp_med) / cpp_med)
    py_med = statistics.median(results[0][2])
    cpp_med = statistics.median(results[0][3])
    if args.no_torch:
        torch_res, why = None, "not run: --no-torch"
    else:
        torch_res, why = torch_reference(scorer, docs, lengths, args.threads, max(3, args.reps // 2), ours)
    if torch_res is not None:
        med, mn, diff, ver = torch_res
        print(f"| predict | PyTorch {ver} reference, spaCy rule (4096 padded items) | {med:.4f} | {mn:.4f} | "
              f"{med / cpp_med:.2f}x |")
    print()
    for name, _, py_times, cpp_times in results:
        py_m, cpp_m = statistics.median(py_times), statistics.median(cpp_times)
        print(f"Python overhead, {name}: {100 * (py_m - cpp_m) / cpp_m:+.2f}% of the C++ time (target within 5%)")
    if torch_res is not None:
        print(f"PyTorch reference: {torch_res[0] / py_med:.2f}x the Python call's time; "
              f"max abs diff vs ours {torch_res[2]:.1e}")
    else:
        print(f"PyTorch reference: {why}")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
