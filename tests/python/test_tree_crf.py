# The tree CRF from Python (biaffine.tree_log_partition, tree_marginals,
# tree_crf_loss, mbr_heads; biaffine.thinc.TreeCRFLoss) against an
# independent computation: every dependency tree with one root of n <= 6
# tokens enumerated here (itertools; projective by the textbook definition,
# every token between a head and its dependent descends from the head), its
# score summed and log-sum-exp'd in np.longdouble. Nothing of the library
# (is_tree, the decoders) is used to build the reference.
import itertools
import threading

import numpy as np
import pytest

import biaffine

_TREES = {}


def trees(n, projective):
    """Every head vector of n tokens that is a tree with one root (heads[r] == r), as an int array
    [count, n]; only the projective ones when `projective`."""
    key = (n, projective)
    if key in _TREES:
        return _TREES[key]
    out = []
    for heads in itertools.product(range(n), repeat=n):
        if sum(h == d for d, h in enumerate(heads)) != 1:
            continue
        root = next(d for d, h in enumerate(heads) if h == d)

        def reaches_root(d):
            for _ in range(n):
                if d == root:
                    return True
                d = heads[d]
            return d == root

        if not all(reaches_root(d) for d in range(n)):
            continue
        if projective:
            def descends(t, h):
                while t != h and heads[t] != t:
                    t = heads[t]
                return t == h

            if not all(descends(t, h) for d, h in enumerate(heads) if h != d
                       for t in range(min(h, d) + 1, max(h, d))):
                continue
        out.append(heads)
    _TREES[key] = np.asarray(out, dtype=np.int64).reshape(-1, n)
    return _TREES[key]


def tree_scores(scores, T):
    """[count] long double: each tree's score."""
    s = np.asarray(scores, dtype=np.longdouble)
    return s[np.arange(T.shape[1]), T].sum(axis=1)


def logsumexp(x):
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def brute_force(scores, projective, gold=None):
    """(log Z, marginals [n, n]) over the trees of the kind, in long double; with `gold` (-1
    unknown) over the trees that agree with its known heads."""
    n = scores.shape[0]
    T = trees(n, projective)
    if gold is not None:
        known = np.asarray(gold) >= 0
        T = T[(T[:, known] == np.asarray(gold)[known]).all(axis=1)]
    w = tree_scores(scores, T)
    log_z = logsumexp(w)
    p = np.exp(w - log_z)
    marg = np.zeros((n, n), dtype=np.longdouble)
    for m in range(n):
        np.add.at(marg[m], T[:, m], p)
    return log_z, marg


KINDS = [False, True]


def random_scores(rng, n, case):
    if case == "random":
        return rng.standard_normal((n, n))
    if case == "trained":  # a trained parser's magnitudes, |s| <= 50
        return np.clip(rng.standard_normal((n, n)) * 15, -50, 50)
    # Adversarial: every token's best head is the next one round a cycle (1e4 above the rest),
    # the root arcs weak: a plain Laplacian cancels here.
    s = rng.uniform(-1.0, 1.0, (n, n)) * 1e4 - 1e4
    for m in range(n):
        s[m, (m + 1) % n] = 1e4 + rng.uniform(-1, 1)
        s[m, m] = -1e4 + rng.uniform(-1, 1)
    return s


@pytest.mark.parametrize("projective", KINDS)
@pytest.mark.parametrize("case", ["random", "trained", "adversarial"])
def test_log_z_and_marginals_against_brute_force(projective, case):
    rng = np.random.default_rng(10 + 3 * projective + len(case))
    for n in range(1, 7):
        for trial in range(2):
            s = random_scores(rng, n, case)
            want_z, want_m = brute_force(s, projective)
            try:
                z = biaffine.tree_log_partition(s, projective=projective)
                m = biaffine.tree_marginals(s, projective=projective)
            except ValueError as e:  # allowed for adversarial scores only, and said so
                assert case == "adversarial" and "beyond" in str(e), e
                continue
            assert abs(z - float(want_z)) <= 1e-12 * max(1.0, abs(float(want_z))), (n, z, want_z)
            assert m.dtype == np.float64 and m.shape == (n, n)
            assert np.abs(m - want_m.astype(np.float64)).max() <= 1e-10, (n, case)
            # float32 scores: the same, to float's precision.
            s32 = s.astype(np.float32)
            want32_z, want32_m = brute_force(s32, projective)
            m32 = biaffine.tree_marginals(s32, projective=projective)
            assert m32.dtype == np.float32
            assert np.abs(m32 - want32_m.astype(np.float64)).max() <= 1e-5
            z32 = biaffine.tree_log_partition(s32, projective=projective)
            assert abs(z32 - float(want32_z)) <= 1e-5 * max(1.0, abs(float(want32_z)))
            # MBR: the tree of the kind with the most expected correct heads.
            T = trees(n, projective)
            gain = want_m.astype(np.float64)[np.arange(n), T].sum(axis=1)
            heads = biaffine.mbr_heads(s, projective=projective)
            assert gain[(T == heads).all(axis=1)][0] >= gain.max() - 1e-9


def test_the_two_kinds_differ():
    # From n = 3 on there are non-projective trees: the kinds must not be mixed up.
    s = np.random.default_rng(3).standard_normal((5, 5))
    assert len(trees(5, True)) < len(trees(5, False))
    for projective in KINDS:
        want_z, _ = brute_force(s, projective)
        assert abs(biaffine.tree_log_partition(s, projective=projective) - float(want_z)) <= 1e-12 * abs(want_z)
    assert biaffine.tree_log_partition(s) > biaffine.tree_log_partition(s, projective=True)


def test_lists_strided_rows_and_empty():
    rng = np.random.default_rng(4)
    S = [rng.standard_normal((n, n)) for n in (3, 1, 6, 0)]
    padded = np.zeros((7, 9))
    padded[:6, :6] = S[2]
    block = padded[:6, :6]  # rows strided, as a block of a padded batch
    assert not block.flags["C_CONTIGUOUS"]
    for projective in KINDS:
        zs = biaffine.tree_log_partition(S, projective=projective)
        ms = biaffine.tree_marginals(S, projective=projective)
        hs = biaffine.mbr_heads(S, projective=projective)
        assert isinstance(zs, list) and len(zs) == len(ms) == len(hs) == 4
        for s, z, m, h in zip(S, zs, ms, hs):
            assert z == biaffine.tree_log_partition(s, projective=projective)
            assert np.array_equal(m, biaffine.tree_marginals(s, projective=projective))
            assert np.array_equal(h, biaffine.mbr_heads(s, projective=projective)) and h.dtype == np.int64
        assert zs[3] == 0.0 and ms[3].shape == (0, 0) and hs[3].shape == (0,)
        assert np.array_equal(biaffine.tree_marginals(block, projective=projective), ms[2])
        assert biaffine.tree_log_partition(block, projective=projective) == zs[2]
    assert biaffine.tree_marginals([]) == []


def gold_tree(rng, n, projective):
    T = trees(n, projective)
    return T[rng.integers(len(T))]


@pytest.mark.parametrize("projective", KINDS)
def test_loss_against_brute_force_and_finite_differences(projective):
    rng = np.random.default_rng(20 + projective)
    for n in (1, 2, 4, 5):
        s = rng.standard_normal((n, n)) * 2
        full = gold_tree(rng, n, projective)
        partial = full.copy()
        partial[rng.random(n) < 0.5] = -1
        for gold in (full, partial):
            loss, (d,) = biaffine.tree_crf_loss([s], [gold], 0.5, projective=projective)
            z, m = brute_force(s, projective)
            zg, mg = brute_force(s, projective, gold)
            assert abs(loss - 0.5 * float(z - zg)) <= 1e-12 * max(1.0, abs(float(z - zg)))
            assert np.abs(d - 0.5 * (m - mg).astype(np.float64)).max() <= 1e-10
            # Central differences of the loss, in float64.
            eps = 1e-5
            num = np.zeros_like(s)
            for i in range(n):
                for j in range(n):
                    e = np.zeros_like(s)
                    e[i, j] = eps
                    lp, _ = biaffine.tree_crf_loss([s + e], [gold], 0.5, projective=projective)
                    lm, _ = biaffine.tree_crf_loss([s - e], [gold], 0.5, projective=projective)
                    num[i, j] = (lp - lm) / (2 * eps)
            assert np.abs(num - d).max() <= 1e-7, (n, projective, gold)
        # float32 logits give a float32 gradient of the same values.
        loss32, (d32,) = biaffine.tree_crf_loss([s.astype(np.float32)], [full], projective=projective)
        assert d32.dtype == np.float32


@pytest.mark.parametrize("projective", KINDS)
def test_partial_annotation_all_known_and_none_known(projective):
    rng = np.random.default_rng(30 + projective)
    S = [rng.standard_normal((n, n)) * 3 for n in (4, 6, 1)]
    gold = [gold_tree(rng, len(s), projective) for s in S]
    loss, dY = biaffine.tree_crf_loss(S, gold, projective=projective)
    want = 0.0
    for s, g, d in zip(S, gold, dY):
        z, m = brute_force(s, projective)
        gold_score = float(sum(np.longdouble(s[i, h]) for i, h in enumerate(g)))
        want += float(z) - gold_score  # all heads known: log Z minus the gold tree's score
        onehot = np.zeros_like(s)
        onehot[np.arange(len(g)), g] = 1
        assert np.abs(d - (m.astype(np.float64) - onehot)).max() <= 1e-10
    assert abs(loss - want) <= 1e-12 * max(1.0, abs(want))
    # All but one head known: the sum over the trees that agree (one or more).
    for s, g in zip(S, gold):
        p = g.copy()
        p[0] = -1
        z, _ = brute_force(s, projective)
        zg, _ = brute_force(s, projective, p)
        lp, _ = biaffine.tree_crf_loss([s], [p], projective=projective)
        assert abs(lp - float(z - zg)) <= 1e-12 * max(1.0, abs(float(z - zg)))
    # None known: loss 0, gradient 0.
    loss0, d0 = biaffine.tree_crf_loss(S, [np.full(len(s), -1) for s in S], projective=projective)
    assert loss0 == 0.0 and all(not d.any() for d in d0)


def test_mbr_differs_from_mst_on_hand_made_scores():
    # Token 1 prefers head 0 (3.0 against 2.0), and the best tree takes it
    # (0 <- 2, 1 <- 0, root 2: 3.2); but the trees with 1 <- 2 hold more of the
    # probability of token 0's and token 1's heads together: the marginals
    # favour 1 <- 2, and the tree of the most expected correct heads is 2, 2, 2.
    s = np.array([[-1.3, 1.1, 0.2],
                  [3.0, 0.0, 2.0],
                  [-1.8, -0.4, -0.2]])
    assert list(biaffine.mst_heads(s)) == [2, 0, 2]
    assert list(biaffine.eisner_heads(s)) == [2, 0, 2]
    for projective in KINDS:
        _, m = brute_force(s, projective)
        T = trees(3, projective)
        gain = m.astype(np.float64)[np.arange(3), T].sum(axis=1)
        best = T[np.argmax(gain)]
        assert list(best) == [2, 2, 2]
        assert list(biaffine.mbr_heads(s, projective=projective)) == [2, 2, 2]
        assert list(biaffine.mbr_heads(s.astype(np.float32), projective=projective)) == [2, 2, 2]


@pytest.mark.parametrize("gold, projective, error, message", [
    ([[0, 0, 1], [1, 0, 0]], False, biaffine.HeadError, r"^split 1: tree_crf_loss: the gold heads close a cycle "
                                                       r"through token 0"),
    ([[0, 0, 1], [0, 1, -1]], False, biaffine.HeadError, r"^split 1: tree_crf_loss: tokens 0 and 1 are both gold "
                                                         r"roots"),
    ([[0, 3, 1], [0, 0, 0]], False, biaffine.LengthError, r"^split 0: tree_crf_loss: token 1 has gold head 3, "
                                                          r"expected -1 \(unknown\) or 0..2"),
    ([[0, 0, 1], [0, -2, 0]], False, biaffine.LengthError, r"^split 1: tree_crf_loss: token 1 has gold head -2"),
    ([[2, 0, 2, 1], [0, 0, 0]], True, biaffine.HeadError, r"^split 0: tree_crf_loss: the gold tree is not "
                                                          r"projective: the arcs into tokens \d and \d cross"),
    ([[0, 0], [0, 0, 0]], False, biaffine.ShapeError, r"^split 0: tree_crf_loss: 2 gold heads for a split of 4"),
    ([[0, 0, 0, 0]], False, biaffine.ShapeError, r"tree_crf_loss: 1 gold head lists for 2 splits"),
])
def test_bad_gold_is_named(gold, projective, error, message):
    rng = np.random.default_rng(5)
    S = [rng.standard_normal((4, 4)), rng.standard_normal((3, 3))]
    if len(gold) == 2 and len(gold[0]) == 3:
        S = [S[1], S[1].copy()]
    with pytest.raises(error, match=message):
        biaffine.tree_crf_loss(S, gold, projective=projective)
    # The same sentences are fine under the non-projective CRF when only projectivity was wrong.
    if projective:
        biaffine.tree_crf_loss(S, gold, projective=False)


def test_bad_scores_and_arguments():
    s = np.zeros((3, 3))
    bad = s.copy()
    bad[2, 1] = np.nan
    with pytest.raises(biaffine.Error, match=r"^split 1: tree_marginals: score is NaN at row \(dependent\) 2, "
                                            r"column \(head\) 1"):
        biaffine.tree_marginals([s, bad])
    minus_inf = np.full((3, 3), -np.inf)
    with pytest.raises(ValueError, match="no projective tree has a finite score"):
        biaffine.tree_log_partition(minus_inf, projective=True)
    g = s.copy()
    g[1, 0] = -np.inf
    with pytest.raises(biaffine.HeadError, match="split 0: tree_crf_loss: token 1's gold head 0 has score -inf"):
        biaffine.tree_crf_loss([g], [[0, 0, 0]])
    with pytest.raises(TypeError, match="projective must be True or False, got str"):
        biaffine.tree_marginals(s, projective="yes")
    with pytest.raises(TypeError):
        biaffine.tree_marginals(s, True)  # keyword only
    with pytest.raises(TypeError, match="tree_crf_loss: Y must be a list"):
        biaffine.tree_crf_loss(s, [[0, 0, 0]])
    with pytest.raises(TypeError, match=r"tree_log_partition: scores\[1\]: expected dtype float64 \(the first "
                                        r"split's\), got float32"):
        biaffine.tree_log_partition([s, s.astype(np.float32)])
    with pytest.raises(TypeError, match="mbr_heads: expected dtype float32 .or float64., got int64"):
        biaffine.mbr_heads(np.zeros((3, 3), np.int64))
    with pytest.raises(biaffine.ShapeError, match=r"tree_marginals: scores\[0\]: expected a square \[n, n\] score "
                                                  r"matrix, got \[2, 3\]"):
        biaffine.tree_marginals([np.zeros((2, 3))])
    with pytest.raises(TypeError, match="scores must be a 2-d numpy array"):
        biaffine.tree_log_partition("scores")


def test_threads_at_once_give_the_results_of_one():
    # The calls release the GIL and the solvers' scratch is per thread: four
    # threads on the same lists give one thread's bytes.
    rng = np.random.default_rng(6)
    S = [rng.standard_normal((n, n)).astype(np.float32) * 5 for n in rng.integers(1, 90, size=40)]
    gold = [trees_free_gold(rng, len(s)) for s in S]

    def work(projective):
        return (biaffine.tree_marginals(S, projective=projective),
                biaffine.tree_crf_loss(S, gold, projective=projective),
                biaffine.mbr_heads(S, projective=projective))

    want = {p: work(p) for p in KINDS}
    got, errors = [], []

    def run(i):
        try:
            for _ in range(3):
                got.append((i % 2 == 1, work(i % 2 == 1)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(got) == 12
    for p, (m, (loss, d), h) in got:
        wm, (wloss, wd), wh = want[p]
        assert loss == wloss
        assert all(np.array_equal(a, b) for a, b in zip(m, wm))
        assert all(np.array_equal(a, b) for a, b in zip(d, wd))
        assert all(np.array_equal(a, b) for a, b in zip(h, wh))


def trees_free_gold(rng, n):
    """A projective tree of n tokens without enumerating: a chain to the right, root 0, with about
    a third of the heads unknown."""
    g = np.arange(n) - 1
    g[0] = 0
    g[rng.random(n) < 0.3] = -1
    return g


@pytest.mark.parametrize("projective", KINDS)
def test_thinc_tree_crf_loss_on_biaffine_scorer_logits(projective):
    thinc_api = pytest.importorskip("thinc.api")
    from biaffine.thinc import BiaffineScorer, TreeCRFLoss

    rng = np.random.default_rng(7)
    X = [rng.standard_normal((n, 8)).astype(np.float32) for n in (5, 3, 6)]  # Thinc's Adam: float32
    gold = [gold_tree(rng, len(x), projective) for x in X]
    gold[1] = np.array([-1, 1, -1])  # partially annotated
    model = BiaffineScorer(nO=1, hidden_width=8, train_outputs="logits", seed=3)
    model.initialize(X=X)
    loss_fn = TreeCRFLoss(projective=projective)
    assert isinstance(loss_fn, __import__("thinc.loss").loss.Loss)
    Y, backprop = model.begin_update(X)
    d, loss = loss_fn(Y, gold)
    want_loss, want_d = biaffine.tree_crf_loss(Y, gold, 1.0 / 14, projective=projective)
    assert loss == want_loss == loss_fn.get_loss(Y, gold)
    assert all(np.array_equal(a, b) for a, b in zip(d, want_d))
    assert all(np.array_equal(a, b) for a, b in zip(loss_fn.get_grad(Y, gold), want_d))
    _, total = TreeCRFLoss(projective=projective, normalize=False)(Y, gold)
    assert abs(total - 14 * loss) <= 1e-12 * abs(total)
    assert d[0].dtype == np.float32
    # Training lowers it.
    optimizer = thinc_api.Adam(0.05)
    losses = []
    for _ in range(8):
        Y, backprop = model.begin_update(X)
        d, loss = loss_fn(Y, gold)
        backprop(d)
        model.finish_update(optimizer)
        losses.append(loss)
    assert losses[-1] < 0.8 * losses[0]
    with pytest.raises(biaffine.HeadError, match="split 0"):
        loss_fn(Y, [np.arange(len(x)) for x in X])  # every token a root
    with pytest.raises(TypeError, match="projective must be True or False"):
        TreeCRFLoss(projective="no")
