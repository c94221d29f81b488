#!/usr/bin/env python3
"""tree_crf_supar.py - tree CRF arc marginals: biaffine against SuPar's own
structures on the same scores, one thread.

    /usr/bin/python3 bench/tree_crf_supar.py --lengths-from $EWT/en_ewt-ud-train.conllu
    /usr/bin/python3 bench/tree_crf_supar.py --tokens 20000 --reps 5

A document of --tokens tokens (sentence lengths cycled from the CoNLL-U
files of --lengths-from, else log-normal around 18 tokens clipped to
[1, 100]), float32 arc scores drawn once per sentence (normal, --scale
standard deviation, the sentence's "gold" heads +--gold-bump: a peaked,
trained-looking distribution), then the arc marginals of every sentence,
non-projective and projective, two ways:

  * biaffine: biaffine.tree_marginals(list of [n, n] arrays) (Matrix-Tree
    with the single-root constraint; Eisner's inside-outside with
    projective=True), one call for the document;
  * SuPar (PyPI `supar`, its modules imported without its package
    __init__, which needs transformers and more; torch from Debian's
    python3-torch): MatrixTree (single root) and DependencyCRF on padded
    batches fed as SuPar feeds them - sentences clustered by length with
    its own kmeans into --buckets buckets (8: its prediction default), each
    bucket cut into chunks of about --batch-size tokens (5000) by its
    Sampler's rule - marginals by autograd of the log partition (its
    `.marginals`). The padded score tensors are built outside the clock,
    as a model would hand them over.

Conventions: ours scores(m, h) is head h of dependent m, the diagonal the
root; SuPar's s[b, i, j] is head j of token i with the root at position 0.
--check compares the marginals of every sentence (max |difference|).
Prints the fastest of --reps repetitions of each, and the ratios; issue
50's target: biaffine >= 5x faster than SuPar's structures, both kinds.
"""
import argparse
import importlib.util
import os
import sys
import time
import types

import numpy as np


def read_lengths(paths):
    lengths = []
    for path in paths:
        n = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    if n:
                        lengths.append(n)
                    n = 0
                elif not line.startswith("#"):
                    first = line.split("\t", 1)[0]
                    if first.isdigit():  # not a multiword range (1-2) nor an empty node (1.1)
                        n += 1
        if n:
            lengths.append(n)
    if not lengths:
        sys.exit(f"tree_crf_supar: no sentences in {', '.join(paths)}")
    return lengths


def document_lengths(tokens, source, rng):
    out, total, i = [], 0, 0
    while total < tokens:
        if source is not None:
            n = source[i % len(source)]
            i += 1
        else:
            n = int(np.clip(round(rng.lognormal(np.log(18.0), 0.6)), 1, 100))
        n = min(n, tokens - total)
        out.append(n)
        total += n
    return out


def import_supar():
    """SuPar's structures without its package __init__ (which imports its
    parsers, transformers among their needs): stub packages whose path is
    the installed one, so that only supar.structs.tree and what it imports
    load."""
    spec = importlib.util.find_spec("supar")
    if spec is None or not spec.submodule_search_locations:
        return None, "supar is not installed (pip install --no-deps supar)"
    root = list(spec.submodule_search_locations)[0]
    for name, sub in (("supar", ""), ("supar.structs", "structs"), ("supar.utils", "utils")):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [os.path.join(root, sub) if sub else root]
            sys.modules[name] = pkg
    try:
        from supar.structs.tree import DependencyCRF, MatrixTree
        from supar.utils.fn import kmeans
    except Exception as e:  # torch missing, or a SuPar whose modules moved
        return None, f"cannot import SuPar's structures: {e!r}"
    return (MatrixTree, DependencyCRF, kmeans), None


def supar_batches(lengths, kmeans, n_buckets, batch_size):
    """Sentence indices per batch, by SuPar's rule: kmeans buckets, each cut
    into min(len, max(round(centroid * len / batch_size), 1)) chunks of
    near-equal size, in order."""
    centroids, clusters = kmeans(list(lengths), n_buckets)
    batches = []
    for size, bucket in zip(centroids, clusters):
        chunks = min(len(bucket), max(round(size * len(bucket) / batch_size), 1))
        sizes = [(len(bucket) - j - 1) // chunks + 1 for j in range(chunks)]
        at = 0
        for s in sizes:
            batches.append(bucket[at:at + s])
            at += s
    return batches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--lengths-from", nargs="*", default=None, metavar="CONLLU")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--scale", type=float, default=3.0)
    ap.add_argument("--gold-bump", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    import biaffine

    found, why = import_supar()
    if found is None:
        print(f"SKIPPED: {why}")
        return 0
    MatrixTree, DependencyCRF, kmeans = found
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    source = read_lengths(args.lengths_from) if args.lengths_from else None
    lengths = document_lengths(args.tokens, source, rng)
    scores = []
    for n in lengths:
        s = rng.normal(0.0, args.scale, size=(n, n)).astype(np.float32)
        gold = rng.integers(0, n, size=n)  # a head per token (the diagonal: the root)
        s[np.arange(n), gold] += args.gold_bump
        scores.append(s)

    batches = supar_batches(lengths, kmeans, args.buckets, args.batch_size)
    padded = []  # (tensor [B, L + 1, L + 1], lens [B], sentence ids)
    biggest = 0
    for ids in batches:
        L = max(lengths[i] for i in ids)
        t = np.zeros((len(ids), L + 1, L + 1), dtype=np.float32)
        for b, i in enumerate(ids):
            n = lengths[i]
            s = scores[i]
            t[b, 1:n + 1, 1:n + 1] = s
            t[b, 1:n + 1, 0] = np.diagonal(s)  # the root arcs
            t[b, np.arange(1, n + 1), np.arange(1, n + 1)] = 0.0  # no self loops (SuPar ignores them)
        biggest = max(biggest, t.size)
        padded.append((torch.from_numpy(t), torch.tensor([lengths[i] for i in ids]), ids))

    print(f"tree_crf_supar: {sum(lengths)} tokens, {len(lengths)} sentences (max {max(lengths)}), "
          f"{'lengths from ' + ', '.join(args.lengths_from) if args.lengths_from else 'log-normal lengths'}; "
          f"SuPar batches: {len(padded)} (--buckets {args.buckets}, --batch-size {args.batch_size}), "
          f"the largest [B, L+1, L+1] = {biggest} cells; torch {torch.__version__}, 1 thread; biaffine {biaffine.__version__}")

    def run_ours(projective):
        return biaffine.tree_marginals(scores, projective=projective)

    def run_supar(cls):
        out = []
        for t, lens, _ in padded:
            s = t.clone().requires_grad_()
            out.append(cls(s, lens).marginals.detach())
        return out

    rows = []
    for name, projective, cls in (("non-projective", False, MatrixTree), ("projective", True, DependencyCRF)):
        best_ours = best_supar = float("inf")
        ours = theirs = None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            ours = run_ours(projective)
            t1 = time.perf_counter()
            theirs = run_supar(cls)
            t2 = time.perf_counter()
            best_ours = min(best_ours, t1 - t0)
            best_supar = min(best_supar, t2 - t1)
        worst_row = max(abs(float(m.sum(axis=1).max()) - 1.0) for m in ours)
        diff = None
        if args.check:
            diff = 0.0
            for (t, lens, ids), m in zip(padded, theirs):
                for b, i in enumerate(ids):
                    n = lengths[i]
                    mine = ours[i].astype(np.float64)
                    sp = m[b].double().numpy()
                    theirs_ours = sp[1:n + 1, 1:n + 1].copy()
                    theirs_ours[np.arange(n), np.arange(n)] = sp[1:n + 1, 0]
                    diff = max(diff, float(np.abs(mine - theirs_ours).max()))
        rows.append((name, best_ours, best_supar, worst_row, diff))

    print()
    print("| kind | biaffine s | SuPar s | SuPar / biaffine | biaffine rows: max |sum - 1| | max |ours - SuPar| |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, a, b, w, d in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.1f}x | {w:.1e} | {'-' if d is None else f'{d:.1e}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
