# The golden cases of tests/data/golden (PyTorch reference, float64) through
# the Python module: float64 to 1e-10 (elementwise, relative to max(1, |ref|)),
# float32 to 1e-5 (relative to max(1, max |ref|)), forward and backward.
import pathlib

import numpy as np
import pytest

import biaffine

PARAMS = ("head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight")
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"


def cases(prefix):
    found = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name.startswith(prefix))
    assert found, f"no golden cases {prefix}* in {GOLDEN}"
    return found


def load(case, name):
    return np.load(GOLDEN / case / f"{name}.npy")


def close(got, ref, dtype):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all()
    if dtype == np.float64:
        allowed = 1e-10 * np.maximum(1.0, np.abs(ref))
    else:
        allowed = 1e-5 * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    worst = float((np.abs(got - ref) / allowed).max()) if ref.size else 0.0
    assert worst <= 1.0, f"worst |diff| / allowed = {worst}"


def scorer_from(case, dtype, labels):
    wh = load(case, "head_weight")
    w = load(case, "bilinear_weight")
    h, n_in = wh.shape
    s = biaffine.biaffine_scorer(n_in, h, labels, bias_u=w.shape[1] == h + 1, bias_v=w.shape[2] == h + 1,
                                 dtype=dtype)
    s.load_npy(str(GOLDEN / case))
    return s


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", cases("model_"))
def test_model_padded(case, dtype):
    x = load(case, "x").astype(dtype)
    lengths = [int(n) for n in load(case, "lengths")]
    train = bool(load(case, "train"))
    y_ref = load(case, "y")
    labels = 1 if y_ref.ndim == 3 else y_ref.shape[3]
    s = scorer_from(case, dtype, labels)
    y, bp = s.forward_padded(x, lengths, train=train)
    for b, n in enumerate(lengths):  # padded cells are unspecified
        close(y[b, :n, :n], y_ref[b, :n, :n], dtype)
    dx = bp(load(case, "dy").astype(dtype))
    for b, n in enumerate(lengths):
        close(dx[b, :n], load(case, "dx")[b, :n], dtype)
    for name, _, grad in s.parameters():
        close(grad, load(case, "d" + name), dtype)


def derived_budget(s, split_lengths, train=False):
    # A byte budget derived from the case, so batching still splits it however
    # many splits it has: a third of one batch of every split, at least the
    # longest split alone, plus what the call holds whatever its batching
    # (what a forward keeps until backprop, the parameter-gradient snapshot,
    # and 512 bytes a split of room for the batcher's and with_splits'
    # bookkeeping and the score tensors' headers).
    n, longest = len(split_lengths), max(split_lengths)
    held = 512 * n
    if train:
        held += s.cost(n, 0, True)["saved"] + sum(g.nbytes for _, _, g in s.parameters())
    batch = max(s.cost(1, longest, train)["total"], s.cost(n, longest, train)["total"] // 3)
    return biaffine.budget.bytes(held + batch)


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", cases("model_"))
def test_model_through_pipeline(case, dtype, pad):
    # Each padded sequence as one document with one split: the per-document
    # pipeline (with_splits + batcher under a small byte budget) must give the
    # same scores, dX and parameter gradients.
    x = load(case, "x")
    lengths = [int(n) for n in load(case, "lengths")]
    train = bool(load(case, "train"))
    y_ref, dy = load(case, "y"), load(case, "dy")
    labels = 1 if y_ref.ndim == 3 else y_ref.shape[3]
    s = scorer_from(case, dtype, labels)
    docs = [np.ascontiguousarray(x[b, :n], dtype=dtype) for b, n in enumerate(lengths)]
    Y, bp = s.forward(docs, [[n] for n in lengths], train=train, budget=derived_budget(s, lengths, train),
                      pad_seq_unpad_matrix=pad)
    assert len(Y) == len(lengths)
    for b, n in enumerate(lengths):
        close(Y[b], y_ref[b, :n, :n], dtype)
    dX = bp([np.ascontiguousarray(dy[b, :n, :n], dtype=dtype) for b, n in enumerate(lengths)])
    for b, n in enumerate(lengths):
        close(dX[b], load(case, "dx")[b, :n], dtype)
    for name, _, grad in s.parameters():
        close(grad, load(case, "d" + name), dtype)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", cases("pipeline"))
def test_pipeline(case, dtype, threads):
    n_docs = load(case, "n_docs").item()
    docs = [load(case, f"doc{d}").astype(dtype) for d in range(n_docs)]
    lengths = [load(case, f"doc{d}_split_lengths") for d in range(n_docs)]
    ref = [load(case, f"split{k}_y") for k in range(load(case, "n_splits").item())]
    labels = 1 if ref[0].ndim == 2 else ref[0].shape[2]
    s = scorer_from(case, dtype, labels)
    flat = [int(n) for ls in lengths for n in ls]
    for budget in (derived_budget(s, flat), biaffine.budget.items(16), None):
        Y = s.predict(docs, lengths, budget=budget, threads=threads)
        assert len(Y) == len(ref)
        for y, r in zip(Y, ref):
            close(y, r, dtype)
    got = {}
    s.predict_stream(docs, lengths, lambda k, d, v: got.__setitem__(k, v.copy()), threads=threads,
                     budget=derived_budget(s, flat))
    assert sorted(got) == list(range(len(ref)))
    for k, r in enumerate(ref):
        close(got[k], r, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", cases("bilinear_"))
def test_bilinear_kernel(case, dtype):
    u, v, w = (load(case, n).astype(dtype) for n in ("u", "v", "weight"))
    bias_u, bias_v = (bool(b) for b in load(case, "bias"))
    close(biaffine.pairwise_bilinear(u, v, w, bias_u, bias_v), load(case, "y"), dtype)
    dw = np.zeros_like(w)
    du, dv = biaffine.pairwise_bilinear_backward(u, v, w, bias_u, bias_v, load(case, "dy").astype(dtype), dw)
    close(du, load(case, "du"), dtype)
    close(dv, load(case, "dv"), dtype)
    close(dw, load(case, "dweight"), dtype)
