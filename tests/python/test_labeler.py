# The Thinc label model over given heads (biaffine.thinc.BiaffineLabeler),
# the spaCy architectures built with Thinc alone (spaCy is not needed), the
# Thinc names and the type-alias modules of spaCy's names. Against the golden
# heads cases and an independent numpy computation of the model.
import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from thinc.api import SGD, Linear, with_array

import biaffine
from biaffine.thinc import (BiaffineLabeler, BiaffineScorer, get_scorer, with_minibatch_by_padded_size,
                            with_pad_seq_unpad_matrix, with_splits)

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
PARAMS = ("head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight")


def load(case, name):
    return np.load(GOLDEN / case / f"{name}.npy")


def golden_batch(case):
    """Both documents as one batch X [N, nI] with batch-wide heads, and the
    golden outputs / gradients concatenated in the same order."""
    n_docs, n_splits = load(case, "n_docs").item(), load(case, "n_splits").item()
    X, heads, off = [], [], 0
    for d in range(n_docs):
        doc, rel, split_off = load(case, f"doc{d}"), load(case, f"doc{d}_heads"), 0
        for n in load(case, f"doc{d}_split_lengths"):
            heads.extend(off + split_off + rel[split_off:split_off + n])
            split_off += n
        X.append(doc)
        off += len(doc)
    y = np.concatenate([load(case, f"split{k}_y") for k in range(n_splits)])
    dy = np.concatenate([load(case, f"split{k}_dy") for k in range(n_splits)])
    dx = np.concatenate([load(case, f"doc{d}_dx") for d in range(n_docs)])
    return np.concatenate(X), np.array(heads, np.int32), y, dy, dx


def numpy_labels(X, heads, P, bias_u=True, bias_v=True):
    """Y[i] = [h_heads[i], 1] W [d_i, 1], computed independently in float64."""
    X = X.astype(np.float64)
    h = np.maximum(X @ P["head_weight"].T + P["head_bias"], 0)
    d = np.maximum(X @ P["dependent_weight"].T + P["dependent_bias"], 0)
    one = np.ones((len(X), 1))
    hu = np.hstack([h, one]) if bias_u else h
    dv = np.hstack([d, one]) if bias_v else d
    return np.einsum("iu,ouv,iv->io", hu[heads], P["bilinear_weight"].astype(np.float64), dv)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", ["heads_eval", "heads_train"])
def test_labeler_golden(case, dtype):
    X, heads, y_ref, dy, dx_ref = golden_batch(case)
    wh, w = load(case, "head_weight"), load(case, "bilinear_weight")
    train = bool(load(case, "train"))
    # heads_eval's gradients are of the logits: training on logits (dropout 0) is that.
    model = BiaffineLabeler(nO=w.shape[0], hidden_width=wh.shape[0], dtype=dtype,
                            train_outputs="probabilities" if train else "logits")
    assert model.name == "bilinear"
    X = X.astype(dtype)
    model.initialize(X=(X, heads))
    assert model.get_dim("nI") == X.shape[1]
    for name in PARAMS:  # the params are the C++ buffers: fill them in place
        model.get_param(name)[...] = load(case, name)
    tol = 1e-10 if dtype == "float64" else 1e-5
    Y, bp = model.begin_update((X, heads))
    assert Y.shape == y_ref.shape and np.abs(Y - y_ref).max() <= tol * max(1, np.abs(y_ref).max())
    dX, H = bp(dy.astype(dtype))
    assert H is heads
    assert np.abs(dX - dx_ref).max() <= tol * max(1, np.abs(dx_ref).max())
    for name in PARAMS:
        ref = load(case, "d" + name)
        assert np.abs(model.get_grad(name) - ref).max() <= tol * max(1, np.abs(ref).max()), name
    if not train:
        P = {n: load(case, n) for n in PARAMS}
        assert np.abs(model.predict((X, heads)) - numpy_labels(X, heads, P)).max() <= tol * 10


def test_labeler_params_are_views_optimizer_and_serialization():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 6)).astype(np.float32)
    heads = rng.integers(0, 12, size=12)
    model = BiaffineLabeler(hidden_width=5, seed=3)
    model.initialize(X=(X, heads), Y=np.zeros((12, 4), np.float32))
    assert model.get_dim("nO") == 4
    s = get_scorer(model)
    for name, value, grad in s.parameters():
        assert np.shares_memory(model.get_param(name), value)
        assert np.shares_memory(model.get_grad(name), grad)
    P = {n: model.get_param(n).copy() for n in PARAMS}
    np.testing.assert_allclose(model.predict((X, heads)), numpy_labels(X, heads, P), rtol=1e-4, atol=1e-5)
    Y, bp = model.begin_update((X, heads))
    np.testing.assert_allclose(Y.sum(1), 1, rtol=1e-5)  # softmax over the labels in training
    bp(np.ones_like(Y))
    model.finish_update(SGD(0.5))
    P2 = {n: model.get_param(n).copy() for n in PARAMS}
    assert any(np.abs(P2[n] - P[n]).max() > 0 for n in PARAMS)
    np.testing.assert_allclose(model.predict((X, heads)), numpy_labels(X, heads, P2), rtol=1e-4, atol=1e-5)
    other = BiaffineLabeler(hidden_width=5, seed=9)
    other.initialize(X=(X, heads), Y=np.zeros((12, 4), np.float32))
    other.from_bytes(model.to_bytes())
    np.testing.assert_array_equal(other.predict((X, heads)), model.predict((X, heads)))
    with pytest.raises(biaffine.HeadError, match="bilinear: expected 12 heads"):
        model.predict((X, heads[:5]))
    with pytest.raises(TypeError, match="bilinear: heads must be integers"):
        model.predict((X, heads.astype(float)))
    with pytest.raises(biaffine.HeadError, match="head 12 outside 0..11"):
        model.predict((X, np.full(12, 12)))


def test_labeler_budget_threads_match_one_call():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 6)).astype(np.float32)
    heads = rng.integers(0, 40, size=40)
    ref = BiaffineLabeler(nO=3, hidden_width=4)
    ref.initialize(X=(X, heads))
    other = BiaffineLabeler(nO=3, hidden_width=4, budget=biaffine.budget.bytes(1 << 14), threads=2)
    other.initialize(X=(X, heads))
    np.testing.assert_array_equal(other.predict((X, heads)), ref.predict((X, heads)))
    with pytest.raises(TypeError, match="budget must be a biaffine.budget"):
        BiaffineLabeler(budget=4096)
    with pytest.raises(ValueError, match="threads must be an integer of at least 1"):
        BiaffineLabeler(threads=0)


def test_thinc_names_and_type_alias_modules():
    sc = BiaffineScorer(nO=1, hidden_width=4)
    assert with_splits(sc).name == "splits"
    assert with_pad_seq_unpad_matrix(sc).name == "with_pad_seq_unpad_bilinear"
    assert with_minibatch_by_padded_size(sc, size=biaffine.budget.items(8)).name == "with_minibatch_by_padded_size"
    from biaffine import with_minibatch_by_padded_size as m_mb
    from biaffine import with_pad_seq_unpad_matrix as m_pad
    from biaffine import with_splits as m_splits
    assert m_splits.with_splits is with_splits and m_pad.with_pad_seq_unpad_matrix is with_pad_seq_unpad_matrix
    assert m_mb.with_minibatch_by_padded_size is with_minibatch_by_padded_size
    for mod in (m_splits, m_pad):
        assert {"InT", "OutT", "InnerInT", "InnerOutT"} <= set(mod.__all__)
    assert {"OutT", "SizedInT"} <= set(m_mb.__all__)
    # A bare int size counts padded items (spaCy's); a float is refused.
    assert with_minibatch_by_padded_size(sc, size=8).attrs["budget_kind"] == "items"
    with pytest.raises(TypeError, match="budget.items: expected an integer, got float"):
        with_minibatch_by_padded_size(sc, size=8.5)


# ------------------------------------------------------- spaCy architectures


def toy_tok2vec(nI=5, nO=8):
    # A stand-in for spaCy's tok2vec: documents are arrays [n, nI] here.
    return with_array(Linear(nO=nO, nI=nI))


def test_architectures_module_does_not_import_spacy():
    code = ("import sys, biaffine.spacy_architectures as a; "
            "print('spacy' in sys.modules, a.REGISTERED)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"
    assert out[1] == str(importlib.util.find_spec("spacy") is not None)


def test_pairwise_bilinear_architecture_takes_one_score_per_head():
    from biaffine.spacy_architectures import build_pairwise_bilinear
    with pytest.raises(ValueError, match="nO must be 1"):
        build_pairwise_bilinear(toy_tok2vec(), nO=2)


def test_pairwise_bilinear_architecture():
    from biaffine.spacy_architectures import build_pairwise_bilinear
    rng = np.random.default_rng(2)
    docs = [rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)]
    lengths = np.array([3, 4, 4], np.int32)  # splits of both docs, in order
    model = build_pairwise_bilinear(toy_tok2vec(), nO=1, hidden_width=6, dropout=0.0,
                                    budget_megabytes=0.25, threads=2)
    model.initialize(X=(docs, lengths))
    ref = model.get_ref("pairwise_bilinear")
    assert ref.name == "pairwise_bilinear" and ref.get_dim("nI") == 8 and ref.get_dim("nO") == 1
    X = model.layers[0].layers[0].predict(docs)  # tok2vec + list2array: [N, nI]
    s = get_scorer(ref)
    want = s.predict([X], [list(lengths)], budget=None)
    Y = model.predict((docs, lengths))
    assert Y.shape == (11, 4) and Y.dtype == np.float32
    off = 0
    for w, n in zip(want, lengths):
        np.testing.assert_array_equal(Y[off:off + n, :n], w)
        assert (Y[off:off + n, n:] == -10000).all()
        off += n
    # Training: softmax over each split's heads, 0 in the padding; backprop
    # gives the gradients of the same call on the scorer directly.
    P, bp = model.begin_update((docs, lengths))
    off = 0
    for n in lengths:
        np.testing.assert_allclose(P[off:off + n, :n].sum(1), 1, rtol=1e-5)
        assert (P[off:off + n, n:] == 0).all()
        off += n
    dP = rng.standard_normal(P.shape).astype(np.float32)
    ref_s = biaffine.biaffine_scorer(8, 6)
    for name, value, _ in s.parameters():
        ref_s.set_parameter(name, value)
    _, ref_bp = ref_s.forward([X], [list(lengths)], budget=None)
    dys, off = [], 0
    for n in lengths:
        dys.append(np.ascontiguousarray(dP[off:off + n, :n]))
        off += n
    dX_ref = ref_bp(dys)[0]
    s.zero_grad()
    bp(dP)
    for (name, _, g), (_, _, g_ref) in zip(s.parameters(), ref_s.parameters()):
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6, err_msg=name)
    # dX reached the toy tok2vec: its Linear got a gradient of dX_ref's size.
    assert np.abs(dX_ref).max() > 0
    with pytest.raises(biaffine.ShapeError, match="split lengths sum to 10 but X has 11 rows"):
        model.predict((docs, np.array([3, 4, 3], np.int32)))


def test_bilinear_architecture():
    from biaffine.spacy_architectures import build_bilinear
    rng = np.random.default_rng(4)
    docs = [rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)]
    heads = np.array([0, 0, 1, 1, 3, 3, 6, 6, 7], np.int32)  # batch-wide, as heads_gold gives them
    model = build_bilinear(toy_tok2vec(), hidden_width=4, dropout=0.0)
    labels = [np.zeros((6, 3), np.float32), np.zeros((3, 3), np.float32)]
    model.initialize(X=(docs, heads), Y=labels)
    ref = model.get_ref("bilinear")
    assert ref.name == "bilinear" and ref.get_dim("nO") == 3 and ref.get_dim("nI") == 8
    X = model.layers[0].layers[0].predict(docs)  # tok2vec + list2array: [N, nI]
    P = {n: ref.get_param(n) for n in PARAMS}
    Y = model.predict((docs, heads))
    assert Y.shape == (9, 3)
    np.testing.assert_allclose(Y, numpy_labels(X, heads, P), rtol=1e-4, atol=1e-5)
    Yt, bp = model.begin_update((docs, heads))
    np.testing.assert_allclose(Yt.sum(1), 1, rtol=1e-5)
    bp(Yt - np.eye(3, dtype=np.float32)[np.zeros(9, int)])
    assert np.abs(ref.get_grad("bilinear_weight")).max() > 0


def test_architectures_warn_on_mixed_precision():
    from biaffine.spacy_architectures import build_bilinear, build_pairwise_bilinear
    for build in (build_bilinear, build_pairwise_bilinear):
        with pytest.warns(UserWarning, match="mixed_precision and grad_scaler .* no effect"):
            build(toy_tok2vec(), mixed_precision=True)
    with pytest.raises(ValueError, match="budget.megabytes"):
        build_bilinear(toy_tok2vec(), budget_megabytes=-1.0)


def test_architectures_take_precision():
    # A config's precision = "bf16" reaches the scorer: prediction then
    # differs from fp32's by bf16 rounding only (test_bf16.py bounds it).
    from biaffine.spacy_architectures import build_bilinear, build_pairwise_bilinear
    rng = np.random.default_rng(6)
    docs = [rng.standard_normal((7, 5)).astype(np.float32)]
    lengths = np.array([3, 4], np.int32)
    models = {}
    for precision in ("fp32", "bf16"):
        models[precision] = build_pairwise_bilinear(toy_tok2vec(), hidden_width=6, dropout=0.0, precision=precision)
        models[precision].initialize(X=(docs, lengths))
    # The same weights in both, tok2vec's and the scorer's.
    for a, b in zip(models["fp32"].walk(), models["bf16"].walk()):
        for name in a.param_names:
            if a.has_param(name):
                b.set_param(name, a.get_param(name).copy())
    out = {}
    for precision, model in models.items():
        out[precision] = model.predict((docs, lengths))
        assert get_scorer(model.get_ref("pairwise_bilinear")).precision == precision
    close = np.abs(out["bf16"] - out["fp32"]) <= 0.05 * (1 + np.abs(out["fp32"]))
    assert close.all() and not np.array_equal(out["bf16"], out["fp32"])
    model = build_bilinear(toy_tok2vec(), hidden_width=4, dropout=0.0, precision="bf16")
    assert model.get_ref("bilinear").attrs["precision"] == "bf16"
    with pytest.raises(ValueError, match="precision"):
        build_bilinear(toy_tok2vec(), precision="fp8")
