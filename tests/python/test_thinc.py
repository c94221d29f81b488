# The Thinc layers: finite-difference gradients in float64 through the
# layers (input and every parameter), Thinc's params are the C++ scorer's
# buffers, optimizers / serialization / copies, composition with Thinc's own
# layers, the generic (Python) paths against the fused C++ path, training.
import copy
import importlib.util
import pathlib

import numpy as np
import pytest
from thinc.api import Adam, SGD, chain, fix_random_seed, noop

import biaffine
from biaffine.thinc import (PARAM_NAMES, BiaffineScorer, get_scorer, with_minibatch_by_padded_size,
                            with_pad_seq_unpad_matrix, with_splits)

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "train_arc_scorer.py"


def data(dtype, seed=0, n_in=5):
    rng = np.random.default_rng(seed)
    docs = [rng.standard_normal((7, n_in)).astype(dtype), rng.standard_normal((4, n_in)).astype(dtype)]
    lengths = [np.array([3, 4]), np.array([1, 3])]
    return docs, lengths


def stacks(labels, dtype):
    def sc():
        return BiaffineScorer(nO=labels, hidden_width=4, dtype=dtype, seed=3)

    return {
        "bytes": with_splits(with_minibatch_by_padded_size(sc(), size=biaffine.budget.bytes(4096))),
        "items": with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(sc()), size=8)),
        "direct": with_splits(sc()),
    }


@pytest.mark.parametrize("labels", [1, 3])
@pytest.mark.parametrize("stack", ["bytes", "items", "direct"])
def test_finite_differences_float64(stack, labels):
    docs, lengths = data(np.float64)
    model = stacks(labels, "float64")[stack]
    model.initialize(X=(docs, lengths))
    scorer_model = model.layers[0] if stack == "direct" else model.layers[0].layers[0]
    while scorer_model.name != "biaffine_scorer":
        scorer_model = scorer_model.layers[0]
    rng = np.random.default_rng(7)
    Y, _ = model((docs, lengths), is_train=True)
    R = [rng.standard_normal(y.shape) for y in Y]

    def loss():
        Y, _ = model((docs, lengths), is_train=True)
        return sum(float((y * r).sum()) for y, r in zip(Y, R))

    for name in PARAM_NAMES:
        scorer_model.get_grad(name)[...] = 0
    Y, backprop = model((docs, lengths), is_train=True)
    dX, _ = backprop(R)
    eps = 1e-6
    checks = [(f"dX[{d}]", docs[d], dX[d]) for d in range(len(docs))]
    checks += [(name, scorer_model.get_param(name), scorer_model.get_grad(name).copy()) for name in PARAM_NAMES]
    for what, arr, grad in checks:
        flat, g = arr.reshape(-1), grad.reshape(-1)
        for i in range(0, flat.size, max(1, flat.size // 12)):
            old = flat[i]
            flat[i] = old + eps
            up = loss()
            flat[i] = old - eps
            down = loss()
            flat[i] = old
            fd = (up - down) / (2 * eps)
            assert abs(fd - g[i]) <= 1e-6 * max(1.0, abs(fd)), (what, i, fd, g[i])


def test_thinc_params_are_the_scorer_buffers():
    docs, lengths = data(np.float32)
    scorer_model = BiaffineScorer(nO=1, hidden_width=4)
    model = with_splits(with_minibatch_by_padded_size(scorer_model, size=biaffine.budget.megabytes(1)))
    model.initialize(X=(docs, lengths))
    s = get_scorer(scorer_model)
    for (name, value, grad) in s.parameters():
        assert np.shares_memory(scorer_model.get_param(name), value)
        assert np.shares_memory(scorer_model.get_grad(name), grad)
    y0 = model.predict((docs, lengths))
    scorer_model.get_param("bilinear_weight")[0, -1, -1] += 2.0  # bias x bias: +2 on every score
    y1 = model.predict((docs, lengths))
    for a, b in zip(y0, y1):
        assert np.allclose(b - a, 2.0, atol=1e-5)
    # Backprop accumulates into Thinc's gradient arrays.
    Y, bp = model((docs, lengths), is_train=True)
    bp([np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype) for y in Y])  # not constant per row
    g = scorer_model.get_grad("head_weight")
    assert np.abs(g).sum() > 0 and np.shares_memory(g, s.parameters()[0][2])


@pytest.mark.parametrize("make_opt", [lambda: Adam(0.01), lambda: SGD(0.1)])
def test_finish_update_updates_in_place(make_opt):
    docs, lengths = data(np.float32)
    scorer_model = BiaffineScorer(nO=1, hidden_width=4)
    model = with_splits(scorer_model)
    model.initialize(X=(docs, lengths))
    s = get_scorer(scorer_model)
    before = {n: scorer_model.get_param(n).copy() for n in PARAM_NAMES}
    y0 = model.predict((docs, lengths))
    Y, bp = model((docs, lengths), is_train=True)
    bp([(np.ones_like(y) * np.arange(y.shape[1])).astype(y.dtype) for y in Y])
    model.finish_update(make_opt())
    assert get_scorer(scorer_model) is s  # no rebuild: the optimizer wrote in place
    assert any(not np.array_equal(before[n], scorer_model.get_param(n)) for n in PARAM_NAMES)
    for _, _, grad in s.parameters():
        assert not grad.any()  # the optimizer zeroed the scorer's own gradients
    y1 = model.predict((docs, lengths))
    assert any(not np.allclose(a, b) for a, b in zip(y0, y1))


def test_to_bytes_from_bytes_copy_and_use_params():
    docs, lengths = data(np.float32)
    a = with_splits(with_minibatch_by_padded_size(BiaffineScorer(nO=2, hidden_width=4, seed=1), size=16))
    b = with_splits(with_minibatch_by_padded_size(BiaffineScorer(nO=2, hidden_width=4, seed=2), size=16))
    a.initialize(X=(docs, lengths))
    b.initialize(X=(docs, lengths))
    ya = a.predict((docs, lengths))
    assert not np.allclose(ya[0], b.predict((docs, lengths))[0])
    b.from_bytes(a.to_bytes())
    for x, y in zip(ya, b.predict((docs, lengths))):
        assert np.array_equal(x, y)
    c = a.copy()
    for x, y in zip(ya, c.predict((docs, lengths))):
        assert np.array_equal(x, y)
    # The copy has its own scorer: changing it leaves the original alone.
    sc_c = c.layers[0].layers[0]
    sc_c.get_param("bilinear_weight")[...] = 0
    c.predict((docs, lengths))
    for x, y in zip(ya, a.predict((docs, lengths))):
        assert np.array_equal(x, y)
    # use_params: temporary weights, then the original ones again.
    sc_a = a.layers[0].layers[0]
    zeros = {(sc_a.id, n): np.zeros_like(sc_a.get_param(n)) for n in PARAM_NAMES}
    with a.use_params(zeros):
        assert all(not y.any() for y in a.predict((docs, lengths)))
    for x, y in zip(ya, a.predict((docs, lengths))):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("labels", [1, 2])
def test_generic_paths_match_fused(labels):
    # Wrapping the scorer in a Thinc chain hides it from the fusion: the
    # combinators then run in Python (spaCy-experimental's way) around it.
    docs, lengths = data(np.float64)
    fused_sc = BiaffineScorer(nO=labels, hidden_width=4, dtype="float64", seed=9)
    fused = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(fused_sc), size=8))
    generic_sc = BiaffineScorer(nO=labels, hidden_width=4, dtype="float64", seed=9)
    generic = with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(chain(noop(), generic_sc)),
                                                        size=8))
    fused.initialize(X=(docs, lengths))
    generic.initialize(X=(docs, lengths))
    Yf, bpf = fused((docs, lengths), is_train=True)
    Yg, bpg = generic((docs, lengths), is_train=True)
    assert len(Yf) == len(Yg) == 4
    for a, b in zip(Yf, Yg):
        assert np.allclose(a, b, rtol=1e-12, atol=1e-12)
    dY = [np.random.default_rng(k).standard_normal(y.shape) for k, y in enumerate(Yf)]
    dXf, _ = bpf(dY)
    dXg, _ = bpg(dY)
    for a, b in zip(dXf, dXg):
        assert np.allclose(a, b, rtol=1e-10, atol=1e-12)
    for n in PARAM_NAMES:
        assert np.allclose(fused_sc.get_grad(n), generic_sc.get_grad(n), rtol=1e-10, atol=1e-12)


def test_seed_style_batching_order():
    # spaCy-experimental's own check of the padded-size rule, on this layer.
    seen = []

    def memo_forward(model, X, is_train):
        seen.append(list(X))
        return X, lambda dY: dY

    from thinc.api import Model
    model = with_minibatch_by_padded_size(Model("memoize", memo_forward), size=18)
    X = ["peach", "banana", "apple", "pineapple"]
    Y, backprop = model(X, True)
    assert seen == [["pineapple"], ["peach", "banana", "apple"]]
    assert Y == X and backprop(["a", "b", "c", "d"]) == ["a", "b", "c", "d"]
    with pytest.raises(biaffine.BudgetError):
        with_minibatch_by_padded_size(Model("memoize", memo_forward), size=biaffine.budget.megabytes(1))(X, True)


def test_composes_with_relu_and_trains():
    spec = importlib.util.spec_from_file_location("train_arc_scorer", EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    fix_random_seed(0)
    rng = np.random.default_rng(0)
    mix = rng.normal(0.0, 1.0 / np.sqrt(ex.N_IN), (ex.N_IN, ex.N_IN))
    train = ex.make_data(rng, 100, mix)
    held = ex.make_data(rng, 30, mix)
    model = ex.build_model(hidden=32, budget_mb=1)
    model.initialize(X=(train[0][:2], train[1][:2]))
    heads, k = [], 0
    for ls in train[1]:
        heads.append(train[2][k: k + len(ls)])
        k += len(ls)
    chance = np.mean([1.0 / len(h) for h in held[2]])
    acc0 = ex.mst_accuracy(model, *held)
    opt = Adam(0.01)
    losses = []
    for epoch in range(6):
        for idx in ex.batches(100, 16, rng):
            probs, bp = model.begin_update(([train[0][i] for i in idx], [train[1][i] for i in idx]))
            loss, d = ex.loss_and_grad(probs, [h for i in idx for h in heads[i]])
            dX, _ = bp(d)
            assert len(dX) == len(idx)
            model.finish_update(opt)
            losses.append(loss)
    acc1 = ex.mst_accuracy(model, *held)
    assert np.mean(losses[-5:]) < 0.6 * losses[0]
    assert acc1 > max(3 * chance, acc0 + 0.25), (acc0, acc1, chance)


def test_bool_split_lengths_are_refused_on_every_path():
    # issue 47: True / False as split lengths would read as 1 / 0.
    docs, lengths = data(np.float64)
    bools = [np.array([True, True]), [True, False]]
    fused = with_splits(BiaffineScorer(nO=1, hidden_width=4, dtype="float64", seed=9))
    generic = with_splits(chain(noop(), BiaffineScorer(nO=1, hidden_width=4, dtype="float64", seed=9)))
    for model, msg in ((fused, r"split_lengths\[0\] must hold integers, got dtype bool"),
                       (generic, r"with_splits: split lengths must hold integers, got bool")):
        model.initialize(X=(docs, lengths))
        with pytest.raises(TypeError, match=msg):
            model.predict((docs, bools))
        assert len(model.predict((docs, lengths))) == 4
    sc = BiaffineScorer(nO=1, hidden_width=4, dtype="float64", seed=9)
    sc.initialize(X=[docs[0]])
    with pytest.raises(TypeError, match=r"padded lengths must hold integers, got bool"):
        sc.predict((np.zeros((1, 2, 5)), np.array([True])))
    assert sc.predict((np.zeros((1, 2, 5)), np.array([2]))).shape == (1, 2, 2)
