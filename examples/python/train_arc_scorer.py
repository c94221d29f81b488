#!/usr/bin/env python3
"""train_arc_scorer.py - train a Thinc model ending in the biaffine scorer.

What to copy into your parser (the Python counterpart of
examples/train_arc_scorer.cpp):

  * the model: a small encoder (Thinc's Relu over every token) chained into
    with_splits(with_minibatch_by_padded_size(BiaffineScorer, budget)), the
    layers of biaffine.thinc. Input: (documents [n_tokens, n_in], split
    lengths per document); output: one [n, n] score matrix per split.
  * the training step: in training the arc scorer's output is the softmax
    over head candidates (each row sums to 1), and backprop wants the
    gradient w.r.t. that output: for the mean negative log-likelihood of the
    gold heads over `count` tokens, -1 / (p * count) at each token's gold
    cell, 0 elsewhere. Then model.finish_update(optimizer) (Thinc's Adam)
    updates the encoder's and the scorer's weights, which are Thinc params
    that the C++ scorer reads in place.
  * evaluation: model.predict gives logits; biaffine.mst_heads decodes a tree.

The data is generated: sentences of 4..24 tokens with random trees; each
token's vector holds a code of its position and a noisy code of its head's
position, mixed by a fixed random matrix, so the head is learnable from the
two tokens' features but not trivially.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_arc_scorer.py [--epochs E] [--quick]

Exit status 0 when the loss fell below 70% of the first step's and the
held-out MST accuracy is at least 50% (chance, a uniform guess, is about 6%), else 1.
"""
import argparse
import sys
import time

import numpy as np
from thinc.api import Adam, Relu, chain, fix_random_seed, with_array, with_getitem

import biaffine
from biaffine.thinc import BiaffineScorer, with_minibatch_by_padded_size, with_splits

N_FREQ = 8
N_IN = 48


def position_code(pos):
    f = np.arange(1, N_FREQ + 1) * 0.35
    return np.concatenate([np.sin(pos[:, None] * f), np.cos(pos[:, None] * f)], axis=1)


def random_tree(rng, n):
    """Heads of a random tree over n tokens (the root points to itself), mostly short arcs."""
    root = int(rng.integers(n))
    heads = np.empty(n, dtype=np.int64)
    heads[root] = root
    for t in range(n):
        if t == root:
            continue
        # attach towards the root, a short hop away
        step = int(rng.integers(1, 3))
        h = t + step if t < root else t - step
        heads[t] = min(max(h, 0), n - 1) if abs(t - root) > step else root
    return heads


def make_data(rng, n_docs, mix, sents_per_doc=(2, 6), noise=0.6):
    """Documents [n_tokens, N_IN] float32, split lengths, and gold heads per split."""
    docs, lengths, heads = [], [], []
    for _ in range(n_docs):
        ls = [int(rng.integers(4, 25)) for _ in range(int(rng.integers(*sents_per_doc)))]
        rows = []
        for n in ls:
            h = random_tree(rng, n)
            pos = np.arange(n, dtype=np.float64)
            raw = np.concatenate([
                position_code(pos),
                position_code(h + rng.normal(0.0, noise, n)),
                rng.normal(0.0, 1.0, (n, N_IN - 4 * N_FREQ)),
            ], axis=1)
            rows.append(raw @ mix)
            heads.append(h)
        docs.append(np.ascontiguousarray(np.concatenate(rows), dtype=np.float32))
        lengths.append(np.asarray(ls, dtype=np.int32))
    return docs, lengths, heads


def build_model(hidden=64, budget_mb=4):
    scorer = BiaffineScorer(nO=1, hidden_width=hidden, seed=1)
    return chain(
        with_getitem(0, with_array(Relu(nO=hidden, nI=N_IN))),
        with_splits(with_minibatch_by_padded_size(scorer, size=biaffine.budget.megabytes(budget_mb))),
    )


def loss_and_grad(probs, heads):
    count = sum(len(h) for h in heads)
    loss, grads = 0.0, []
    for p, h in zip(probs, heads):
        rows = np.arange(len(h))
        gold = np.maximum(p[rows, h], 1e-12)
        loss -= float(np.log(gold).sum())
        g = np.zeros_like(p)
        g[rows, h] = -1.0 / (gold * count)
        grads.append(g)
    return loss / count, grads


def mst_accuracy(model, docs, lengths, heads):
    scores = model.predict((docs, lengths))
    right = sum(int((biaffine.mst_heads(s) == h).sum()) for s, h in zip(scores, heads))
    return right / sum(len(h) for h in heads)


def batches(n, size, rng):
    order = rng.permutation(n)
    return [order[i: i + size] for i in range(0, n, size)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.005)
    args = ap.parse_args(argv)
    n_train, epochs = (120, 6) if args.quick else (400, args.epochs)

    fix_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    mix = rng.normal(0.0, 1.0 / np.sqrt(N_IN), (N_IN, N_IN))
    train = make_data(rng, n_train, mix)
    held = make_data(rng, 40, mix)
    log = biaffine.memory_log()
    log.checkpoint("data generated")

    model = build_model()
    model.initialize(X=(train[0][:2], train[1][:2]))
    optimizer = Adam(args.lr)
    log.checkpoint("model initialized")

    split_heads = []  # gold heads per split, per training document
    k = 0
    for ls in train[1]:
        split_heads.append(train[2][k: k + len(ls)])
        k += len(ls)

    acc0 = mst_accuracy(model, *held)
    first_loss = None
    print(f"train: {n_train} documents, {sum(len(h) for h in train[2])} tokens; "
          f"held-out: {len(held[0])} documents, {sum(len(h) for h in held[2])} tokens")
    print(f"before training: held-out MST accuracy {acc0:.3f}")
    t0 = time.perf_counter()
    last = 0.0
    for epoch in range(epochs):
        total, steps = 0.0, 0
        for idx in batches(n_train, 16, rng):
            docs = [train[0][i] for i in idx]
            lens = [train[1][i] for i in idx]
            gold = [h for i in idx for h in split_heads[i]]
            probs, backprop = model.begin_update((docs, lens))
            loss, d_probs = loss_and_grad(probs, gold)
            if first_loss is None:
                first_loss = loss
            backprop(d_probs)
            model.finish_update(optimizer)
            total += loss
            steps += 1
        last = total / steps
        print(f"epoch {epoch + 1:2d}: mean loss {last:.4f}")
    seconds = time.perf_counter() - t0
    log.checkpoint("trained")
    acc1 = mst_accuracy(model, *held)
    log.checkpoint("evaluated")
    print(f"first step loss {first_loss:.4f}, last epoch mean loss {last:.4f} ({seconds:.1f} s)")
    print(f"after training: held-out MST accuracy {acc1:.3f} (before {acc0:.3f})")
    print("memory log (bytes tracked by the C++ library):")
    print(log.summary(), end="")
    ok = last < 0.7 * first_loss and acc1 >= 0.5
    print("OK" if ok else "FAILED: the loss did not fall enough or the accuracy stayed low")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
