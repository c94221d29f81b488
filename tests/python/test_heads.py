# Labels at given heads, the training output mode, the fused losses and the
# decoders from Python: against the golden data (tests/data/golden/heads_*,
# PyTorch reference, float64) and independent numpy computations (brute-force
# trees, softmax by hand).
import itertools
import pathlib

import numpy as np
import pytest

import biaffine

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
PARAMS = ("head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight")
HEADS_CASES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name.startswith("heads_"))


def load(case, name):
    return np.load(GOLDEN / case / f"{name}.npy")


def close(got, ref, dtype):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    tol = 1e-10 if dtype == np.float64 else 1e-5
    allowed = tol * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    assert (np.abs(got - ref) <= allowed).all(), float(np.abs(got - ref).max())


def case_data(case, dtype, **kw):
    wh, w = load(case, "head_weight"), load(case, "bilinear_weight")
    h, n_in = wh.shape
    s = biaffine.biaffine_scorer(n_in, h, w.shape[0], bias_u=w.shape[1] == h + 1, bias_v=w.shape[2] == h + 1,
                                 dtype=dtype, **kw)
    s.load_npy(str(GOLDEN / case))
    n_docs = load(case, "n_docs").item()
    docs = [load(case, f"doc{d}").astype(dtype) for d in range(n_docs)]
    lengths = [load(case, f"doc{d}_split_lengths") for d in range(n_docs)]
    heads = [load(case, f"doc{d}_heads") for d in range(n_docs)]
    n_splits = load(case, "n_splits").item()
    return s, docs, lengths, heads, n_splits


def test_golden_cases_present():
    assert set(HEADS_CASES) >= {"heads_eval", "heads_train"}


BUDGETS = {"bytes": biaffine.budget.bytes(1 << 13), "items": biaffine.budget.items(8), "none": None}


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", HEADS_CASES)
def test_forward_heads_golden(case, dtype, budget, pad):
    s, docs, lengths, heads, n_splits = case_data(case, dtype)
    train = bool(load(case, "train"))
    Y, bp = s.forward_heads(docs, lengths, heads, train=train, budget=BUDGETS[budget], pad_seq_unpad_matrix=pad)
    assert len(Y) == n_splits
    for k, y in enumerate(Y):
        assert y.dtype == dtype
        close(y, load(case, f"split{k}_y"), dtype)
    dX = bp([load(case, f"split{k}_dy").astype(dtype) for k in range(n_splits)])
    for d, dx in enumerate(dX):
        close(dx, load(case, f"doc{d}_dx"), dtype)
    for name, _, grad in s.parameters():
        close(grad, load(case, "d" + name), dtype)
    with pytest.raises(biaffine.BackpropError):
        bp([load(case, f"split{k}_dy").astype(dtype) for k in range(n_splits)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_predict_heads_and_stream_golden(dtype, threads):
    case = "heads_eval"
    assert not bool(load(case, "train"))
    s, docs, lengths, heads, n_splits = case_data(case, dtype)
    for budget in BUDGETS.values():
        for pad in (False, True):
            Y = s.predict_heads(docs, lengths, heads, budget=budget, threads=threads, pad_seq_unpad_matrix=pad)
            assert len(Y) == n_splits
            for k, y in enumerate(Y):
                close(y, load(case, f"split{k}_y"), dtype)
    got = {}
    s.predict_heads_stream(docs, lengths, heads, lambda k, d, v: got.__setitem__(k, (d, v.copy())),
                           budget=biaffine.budget.bytes(1 << 13), threads=threads)
    assert sorted(got) == list(range(n_splits))
    first = np.cumsum([0] + [len(ls) for ls in lengths])
    for k, (d, v) in got.items():
        assert first[d] <= k < first[d + 1]
        close(v, load(case, f"split{k}_y"), dtype)
    assert not s.has_gradients()  # inference never allocates gradients


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", HEADS_CASES)
def test_heads_padded_golden(case, dtype):
    # Every split as one padded sequence: [b, L, n_in], heads [b, L].
    s, docs, lengths, heads, n_splits = case_data(case, dtype)
    train = bool(load(case, "train"))
    splits, split_heads = [], []
    for doc, ls, hs in zip(docs, lengths, heads):
        off = 0
        for n in ls:
            splits.append(doc[off:off + n])
            split_heads.append(hs[off:off + n])
            off += n
    L = max(len(x) for x in splits)
    x = np.zeros((n_splits, L, docs[0].shape[1]), dtype)
    hp = np.zeros((n_splits, L), np.int32)
    for k, (xs, hs) in enumerate(zip(splits, split_heads)):
        x[k, :len(xs)] = xs
        hp[k, :len(hs)] = hs
    lens = [len(xs) for xs in splits]
    if not train:
        y = s.predict_heads_padded(x, lens, hp)
        for k, n in enumerate(lens):
            close(y[k, :n], load(case, f"split{k}_y"), dtype)
    y, bp = s.forward_heads_padded(x, lens, hp, train=train)
    dy = np.zeros_like(y)
    for k, n in enumerate(lens):
        close(y[k, :n], load(case, f"split{k}_y"), dtype)
        dy[k, :n] = load(case, f"split{k}_dy")
    dx = bp(dy)
    off = 0
    ref = np.concatenate([load(case, f"doc{d}_dx") for d in range(len(docs))])
    got = np.concatenate([dx[k, :n] for k, n in enumerate(lens)])
    close(got, ref, dtype)
    for name, _, grad in s.parameters():
        close(grad, load(case, "d" + name), dtype)


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_train_outputs_logits_and_cross_entropy_labels():
    case = "heads_train"
    s, docs, lengths, heads, n_splits = case_data(case, np.float64, train_outputs="logits")
    assert s.train_outputs == "logits"
    Y, bp = s.forward_heads(docs, lengths, heads, train=True)
    ref = s.predict_heads(docs, lengths, heads)  # logits (dropout 0)
    rng = np.random.default_rng(3)
    gold = []
    for y, r, k in zip(Y, ref, range(n_splits)):
        close(y, r, np.float64)
        # The golden probabilities are the softmax of these logits.
        if y.size:
            close(softmax(y), load(case, f"split{k}_y"), np.float64)
        gold.append(rng.integers(0, y.shape[1], size=y.shape[0]))
    loss, dY = biaffine.cross_entropy_labels(Y, gold, scale=0.5)
    want = sum(float((np.log(np.exp(y).sum(1)) - y[np.arange(len(g)), g]).sum()) for y, g in zip(Y, gold))
    assert abs(loss - 0.5 * want) <= 1e-10 * max(1.0, abs(want))
    for y, g, d in zip(Y, gold, dY):
        onehot = np.zeros_like(y)
        onehot[np.arange(len(g)), g] = 1
        close(d, 0.5 * (softmax(y) - onehot), np.float64)
    dX = bp(dY)
    assert [dx.shape for dx in dX] == [doc.shape for doc in docs]
    assert all(np.isfinite(dx).all() for dx in dX)


def test_cross_entropy_heads_against_numpy_and_training():
    rng = np.random.default_rng(0)
    s = biaffine.biaffine_scorer(6, 4, dtype="float64", train_outputs="logits", seed=2)
    docs = [rng.standard_normal((9, 6)), rng.standard_normal((4, 6))]
    lengths = [[5, 4], [4]]
    Y, bp = s.forward(docs, lengths, train=True)
    ref = s.predict(docs, lengths)
    gold = [rng.integers(0, len(y), size=len(y)) for y in Y]
    loss, dY = biaffine.cross_entropy_heads(Y, gold)
    want = 0.0
    for y, r, g, d in zip(Y, ref, gold, dY):
        close(y, r, np.float64)  # logits in training too
        want += float((np.log(np.exp(y).sum(1)) - y[np.arange(len(g)), g]).sum())
        onehot = np.eye(len(y))[g]
        close(d, softmax(y) - onehot, np.float64)
    assert abs(loss - want) <= 1e-10 * max(1.0, want)
    # Confident mistakes stay finite (logits of 1e4 would give -1/p = -inf).
    big = [np.array([[1e4, -1e4], [-1e4, 1e4]], np.float32)]
    loss, d = biaffine.cross_entropy_heads(big, [[1, 0]])
    assert np.isfinite(loss) and np.isfinite(d[0]).all()
    # A few steps of gradient descent on these logits lower the loss.
    losses = []
    for _ in range(5):
        s.zero_grad()
        Y, bp = s.forward(docs, lengths, train=True)
        loss, dY = biaffine.cross_entropy_heads(Y, gold)
        bp(dY)
        losses.append(loss)
        for _, value, grad in s.parameters():
            value -= 0.05 * grad
    assert losses[-1] < losses[0]


def all_trees(n, projective):
    for heads in itertools.product(range(n), repeat=n):
        if not biaffine.is_tree(list(heads)):
            continue
        if projective:
            ok = True
            for d, h in enumerate(heads):
                if h == d:
                    continue
                lo, hi = min(h, d), max(h, d)
                for t in range(lo + 1, hi):  # t must descend from h
                    a = t
                    while heads[a] != a and a != h:
                        a = heads[a]
                    ok = ok and a == h
            if not ok:
                continue
        yield heads


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_decoders_against_brute_force(n):
    rng = np.random.default_rng(n)
    for trial in range(4):
        sc = rng.standard_normal((n, n))
        score = lambda hs: sum(sc[d, h] for d, h in enumerate(hs))
        best_any = max(all_trees(n, False), key=score)
        best_proj = max(all_trees(n, True), key=score)
        assert list(biaffine.mst_heads(sc)) == list(best_any)
        assert list(biaffine.eisner_heads(sc)) == list(best_proj)
        assert list(biaffine.eisner_heads(sc.astype(np.float32))) == list(best_proj)
        assert list(biaffine.argmax_heads(sc)) == list(sc.argmax(1))


def test_labels_at_heads_against_numpy():
    rng = np.random.default_rng(1)
    for n, o in ((1, 1), (4, 3), (7, 5)):
        sc = rng.standard_normal((n, n, o))
        heads = rng.integers(0, n, size=n)
        want = sc[np.arange(n), heads].argmax(-1)
        assert list(biaffine.labels_at_heads(sc, heads)) == list(want)
        assert list(biaffine.labels_at_heads(sc.astype(np.float32), list(heads))) == list(want)


def test_heads_stream_callback_raises_and_keeps_blocks():
    s = biaffine.biaffine_scorer(8, 4, labels=3)
    docs = [np.ones((60, 8), np.float32)]
    lengths = [[10] * 6]
    heads = [np.zeros(60, np.int64)]

    class Boom(Exception):
        pass

    seen = []

    def cb(k, d, v):
        seen.append(k)
        if len(seen) == 2:
            raise Boom("stop")

    s.predict_heads(docs, lengths, heads)
    base = biaffine.memory_stats()["current_bytes"]
    for threads in (1, 2, 1, 2):
        seen.clear()
        with pytest.raises(Boom) as info:
            s.predict_heads_stream(docs, lengths, heads, cb, budget=biaffine.budget.items(20), threads=threads)
        # One thread stops at the failing call; with two, the other thread's
        # batch of the same buffer may still deliver.
        assert len(seen) == 2 if threads == 1 else len(seen) >= 2
        assert info.traceback[-1].name == "cb"  # the callback's own frame
        assert biaffine.memory_stats()["current_bytes"] == base
    # A kept block stays valid (test_api.py checks the values).
    kept = []
    s.predict_heads_stream(docs, lengths, heads, lambda k, d, v: kept.append(v))
    assert [v.shape for v in kept] == [(10, 3)] * 6


def lazy_split_reference(scores, max_length):
    # The rule of docs/api.md, "Lazy splitting", written independently: a
    # piece longer than max_length is cut before its highest-scoring token
    # other than its first (ties: the earliest), recursively.
    if len(scores) <= max_length:
        return [len(scores)] if len(scores) else []
    cut = 1 + int(np.argmax(scores[1:]))
    return lazy_split_reference(scores[:cut], max_length) + lazy_split_reference(scores[cut:], max_length)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lazy_split_of_sentence_start_probabilities(dtype):
    rng = np.random.default_rng(7)
    for n, max_length in ((0, 3), (1, 1), (10, 3), (57, 8), (300, 40), (300, 1)):
        logits = rng.standard_normal((n, 2))
        probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[:, 1].astype(dtype)  # a senter's P(start)
        got = biaffine.lazy_split(probs, max_length)
        assert got == lazy_split_reference(probs, max_length)
        assert sum(got) == n and all(1 <= k <= max_length for k in got)
