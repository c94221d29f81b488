# precision="bf16": a float32 scorer's inference (and training products) on
# bf16 operands with fp32 sums (AMX tiles on the amxbf16 variant, VDPBF16PS on avx512bf16, else
# emulated on the fp32 kernels). Checked against a float64 numpy reference
# on the same bf16-rounded operands, with a per-element bound derived from
# where the forward rounds (bf16 storage of inputs, weights, U, V and T) and
# from fp32 summation - the bound of tests/bf16_reference.hpp, written again
# here in numpy. The reference itself is first checked, unrounded, against
# the PyTorch golden outputs.
import pathlib

import numpy as np
import pytest

import biaffine

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden"
U_BF16 = 2.0 ** -8   # unit roundoff of bf16 storage (8 significand bits)
U_FP32 = 2.0 ** -24


def gamma(n):
    return n * U_FP32 / (1 - n * U_FP32)


def round_bf16(a):
    """float32 -> nearest bf16 (ties to even), as float32; finite inputs."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def params_of(s):
    return {name: np.array(v, dtype=np.float64) for name, v, _ in s.parameters()}


def reference(p, x, bias_u, bias_v, rounded):
    """One split's scores [n, n, o] in float64 and, with rounded operands,
    the bound a bf16 forward meets element-wise."""
    r = (lambda a: round_bf16(a).astype(np.float64)) if rounded else (lambda a: np.asarray(a, np.float64))
    u = U_BF16 if rounded else 0.0
    X = r(x)
    n, n_in = X.shape

    def project(W, b, ones):
        W = r(W)
        z = X @ W.T + b
        mag = np.abs(X) @ np.abs(W).T + np.abs(b)
        val = np.maximum(z, 0.0)
        err = gamma(n_in + 1) * mag * (1 + u) + u * val
        if ones:
            val = np.hstack([val, np.ones((n, 1))])
            err = np.hstack([err, np.zeros((n, 1))])
        return val, err

    U, eU = project(p["head_weight"], p["head_bias"], bias_u)
    V, eV = project(p["dependent_weight"], p["dependent_bias"], bias_v)
    W = r(p["bilinear_weight"])                                # [o, hu, hv]
    aW = np.abs(W)
    T = np.einsum("jr,lrc->jlc", U, W)                         # [n, o, hv]
    prop = np.einsum("jr,lrc->jlc", eU, aW)
    mag = np.einsum("jr,lrc->jlc", np.abs(U) + eU, aW)
    eT = (prop + gamma(W.shape[1]) * mag) * (1 + u) + u * np.abs(T)
    S = np.einsum("mc,jlc->mjl", V, T)
    e = (np.einsum("mc,jlc->mjl", eV, np.abs(T)) + np.einsum("mc,jlc->mjl", np.abs(V), eT)
         + np.einsum("mc,jlc->mjl", eV, eT))
    mag = np.einsum("mc,jlc->mjl", np.abs(V) + eV, np.abs(T) + eT)
    return S, e + gamma(W.shape[2]) * mag


def within(got, ref, bound, what):
    got = np.asarray(got, np.float64).reshape(ref.shape)
    excess = np.abs(got - ref) - bound
    assert (excess <= 0).all(), (what, float(excess.max()), float(np.abs(got - ref).max()))


def rng_case(seed, n_in=24, hidden=20, labels=3, lengths=(1, 5, 17, 40), bias_u=True, bias_v=True):
    rng = np.random.default_rng(seed)
    s = biaffine.biaffine_scorer(n_in, hidden, labels, bias_u=bias_u, bias_v=bias_v, seed=seed, precision="bf16")
    # Biases large enough that some pre-activations are negative, some not.
    s.set_parameter("head_bias", rng.uniform(-0.3, 0.3, hidden))
    s.set_parameter("dependent_bias", rng.uniform(-0.3, 0.3, hidden))
    doc = rng.uniform(-1, 1, (sum(lengths), n_in)).astype(np.float32)
    return s, doc, list(lengths)


def splits_of(doc, lengths):
    off = np.cumsum([0] + list(lengths))
    return [doc[off[k]:off[k + 1]] for k in range(len(lengths))]


def test_reference_matches_golden_unrounded():
    # The reference's arithmetic, without rounding, is the PyTorch module's.
    case = GOLDEN / "pipeline_labels"
    p = {n: np.load(case / f"{n}.npy") for n in ("head_weight", "head_bias", "dependent_weight", "dependent_bias",
                                                 "bilinear_weight")}
    h = p["head_weight"].shape[0]
    bias_u, bias_v = p["bilinear_weight"].shape[1] == h + 1, p["bilinear_weight"].shape[2] == h + 1
    k = 0
    for d in range(np.load(case / "n_docs.npy").item()):
        doc = np.load(case / f"doc{d}.npy")
        for x in splits_of(doc, np.load(case / f"doc{d}_split_lengths.npy")):
            S, _ = reference(p, x, bias_u, bias_v, rounded=False)
            y = np.load(case / f"split{k}_y.npy")
            assert np.abs(S.reshape(y.shape) - y).max() <= 1e-9 * max(1.0, np.abs(y).max())
            k += 1


@pytest.mark.parametrize("labels", [1, 3])
@pytest.mark.parametrize("bias_u, bias_v", [(True, True), (True, False), (False, True)])
def test_predict_within_bf16_bound(labels, bias_u, bias_v):
    s, doc, lengths = rng_case(7 + labels, labels=labels, bias_u=bias_u, bias_v=bias_v)
    assert s.precision == "bf16"
    p = params_of(s)
    Y = s.predict([doc], [lengths], budget=biaffine.budget.items(24))
    fp32 = biaffine.biaffine_scorer(24, 20, labels, bias_u=bias_u, bias_v=bias_v)
    for name, v in p.items():
        fp32.set_parameter(name, v)
    Y32 = fp32.predict([doc], [lengths])
    differs = False
    for k, x in enumerate(splits_of(doc, lengths)):
        S, bound = reference(p, x, bias_u, bias_v, rounded=True)
        assert Y[k].dtype == np.float32 and Y[k].shape == ((len(x), len(x)) if labels == 1 else S.shape)
        within(Y[k], S, bound, f"split {k}")
        differs |= not np.array_equal(Y[k], Y32[k])
    # Operands really are rounded: fp32 inference gives other numbers.
    assert differs


def test_stream_heads_and_padded_within_bound():
    s, doc, lengths = rng_case(11, labels=4)
    p = params_of(s)
    xs = splits_of(doc, lengths)
    refs = [reference(p, x, True, True, rounded=True) for x in xs]
    got = {}
    s.predict_stream([doc], [lengths], lambda k, d, v: got.__setitem__(k, v.copy()),
                     budget=biaffine.budget.items(30), threads=2)
    assert sorted(got) == list(range(len(xs)))
    for k, (S, b) in enumerate(refs):
        within(got[k], S, b, f"stream split {k}")
    # Labels at given heads: the reference's rows at each token's head.
    rng = np.random.default_rng(3)
    heads = [rng.integers(0, n, n) for n in lengths]
    H = s.predict_heads([doc], [lengths], [np.concatenate(heads)])
    for k, (S, b) in enumerate(refs):
        m = np.arange(lengths[k])
        within(H[k], S[m, heads[k]], b[m, heads[k]], f"heads split {k}")
    # Padded: [b, L, L, o], cells past a length hold the mask.
    L = max(lengths)
    x = np.zeros((len(xs), L, doc.shape[1]), np.float32)
    for k, xk in enumerate(xs):
        x[k, :len(xk)] = xk
    P = s.predict_padded(x, lengths)
    for k, (S, b) in enumerate(refs):
        n = lengths[k]
        within(P[k, :n, :n], S, b, f"padded split {k}")
        assert (P[k, :n, n:] == P[0, 0, L - 1]).all() if n < L else True
    hp = np.zeros((len(xs), L), np.int64)
    for k, hk in enumerate(heads):
        hp[k, :len(hk)] = hk
    PH = s.predict_heads_padded(x, lengths, hp)
    for k, (S, b) in enumerate(refs):
        m = np.arange(lengths[k])
        within(PH[k, :lengths[k]], S[m, heads[k]], b[m, heads[k]], f"padded heads split {k}")


def test_writes_through_parameter_views_are_seen():
    # Thinc's optimisers write into the numpy views of parameters(); the bf16
    # copy of the weights must follow, call after call.
    s, doc, lengths = rng_case(5, labels=2)
    s.predict([doc], [lengths])  # the bf16 copy made once
    views = {name: v for name, v, _ in s.parameters()}
    s.predict([doc], [lengths])  # after parameters(): the copy made again, then the views are written
    for step in range(2):
        views["bilinear_weight"] *= -1.5
        views["head_weight"] += 0.05
        p = {name: np.array(v, np.float64) for name, v in views.items()}  # not parameters(): it tells the scorer
        Y = s.predict([doc], [lengths])
        for k, x in enumerate(splits_of(doc, lengths)):
            S, b = reference(p, x, True, True, rounded=True)
            within(Y[k], S, b, f"step {step}, split {k}")


def test_training_in_bf16_within_rounding_of_fp32():
    # Mixed precision: bf16 products, fp32 master weights and gradients. The
    # biases are shifted so ReLU passes every unit (a unit within rounding
    # of 0 would switch its gradient on or off: no norm-wise bound covers
    # that); then at most eight roundings of 2^-8 lie on any path from an
    # operand to a gradient: within 2^-5 of the fp32 gradients' norm, and
    # not equal to them (bf16 ran). On logits: a softmax the shifted biases
    # saturate turns bf16's relative rounding of large scores into large
    # relative changes of small probabilities. tests/test_bf16_train.cpp
    # says more.
    r0, doc, lengths = rng_case(9, labels=3, lengths=(6, 9, 30))
    s, t = (biaffine.biaffine_scorer(24, 20, 3, seed=9, train_outputs="logits", precision=p) for p in ("bf16", "fp32"))
    for name, v, _ in r0.parameters():
        value = np.full(20, 3.0, np.float32) if name.endswith("_bias") else v
        s.set_parameter(name, value)
        t.set_parameter(name, value)
    rng = np.random.default_rng(4)
    grads = []
    for m in (s, t):
        m.zero_grad()
        Y, bp = m.forward([doc], [lengths], train=True)
        dY = [rng.uniform(-1, 1, y.shape).astype(np.float32) for y in Y]
        rng = np.random.default_rng(4)  # the same dY for both
        dx = bp(dY)[0]
        grads.append([np.array(g, np.float64) for _, _, g in m.parameters()] + [np.array(dx, np.float64)])
    moved = 0.0
    for g16, g32 in zip(*grads):
        r = np.linalg.norm(g16 - g32) / np.linalg.norm(g32)
        assert r <= 2.0 ** -5, r
        moved += r
    assert moved > 0.0


def test_training_sees_writes_through_parameter_views():
    # An optimiser writes the numpy views between steps: the next training
    # forward packs them again (a fresh scorer with those values agrees).
    s, doc, lengths = rng_case(11, labels=2, lengths=(5, 12))
    views = {name: v for name, v, _ in s.parameters()}
    s.forward([doc], [lengths], train=True)  # bf16 copies made for these values
    views["head_weight"] *= 0.5
    views["bilinear_weight"] += 0.25
    fresh = biaffine.biaffine_scorer(24, 20, 2, seed=11, precision="bf16")
    for name, v in views.items():
        fresh.set_parameter(name, v)
    for train in (True, False):
        Ya, _ = s.forward([doc], [lengths], train=train)
        Yb, _ = fresh.forward([doc], [lengths], train=train)
        for a, b in zip(Ya, Yb):
            assert np.array_equal(a, b), train


def test_precision_argument_checked():
    assert biaffine.biaffine_scorer(4, 2).precision == "fp32"
    with pytest.raises(ValueError, match="float32"):
        biaffine.biaffine_scorer(4, 2, dtype="float64", precision="bf16")
    with pytest.raises(ValueError, match="'fp32' or 'bf16'"):
        biaffine.biaffine_scorer(4, 2, precision="fp16")


def test_info_names_the_bf16_arithmetic():
    d = biaffine.info()
    bf16 = d["backends"]["float32"]["bf16"]
    assert "bf16" not in d["backends"]["float64"]
    compiled = set(d["compiled_isa"])
    if {"amx_tile", "amx_bf16"} <= compiled:
        # AMX, or VDPBF16PS where Linux withholds the tiles (and says so).
        assert bf16.startswith("amx_bf16") or "withholds" in bf16, bf16
    elif "avx512_bf16" in compiled:
        assert bf16.startswith("avx512_bf16"), bf16
    else:
        assert bf16.startswith("emulated"), bf16
    assert f"precision='bf16': {bf16}" in biaffine._loader.format_info(d)


def test_thinc_layers_take_precision():
    thinc = pytest.importorskip("thinc")  # noqa: F841 (conftest turns a skip into a failure: thinc is required)
    from biaffine.thinc import BiaffineLabeler, BiaffineScorer, get_scorer

    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, (n, 16)).astype(np.float32) for n in (4, 7)]
    m = BiaffineScorer(nO=2, hidden_width=8, precision="bf16")
    m.initialize(X=xs)
    s = get_scorer(m)
    assert s.precision == "bf16"
    p = params_of(s)
    Y = m.predict(xs)
    for k, x in enumerate(xs):
        S, b = reference(p, x, True, True, rounded=True)
        within(Y[k], S, b, f"thinc split {k}")
    # An optimiser step writes into the scorer's buffers (Thinc's params are
    # them); the next prediction must use the new weights.
    from thinc.api import Adam

    Yt, bp = m.begin_update(xs)
    bp([np.ones_like(y) for y in Yt])
    m.finish_update(Adam(0.05))
    p = {name: np.array(m.get_param(name), np.float64) for name in p}
    Y2 = m.predict(xs)
    for k, x in enumerate(xs):
        S, b = reference(p, x, True, True, rounded=True)
        within(Y2[k], S, b, f"thinc split {k} after an update")
        assert not np.array_equal(Y2[k], Y[k])
    lab = BiaffineLabeler(nO=3, hidden_width=8, precision="bf16")
    lab.initialize(X=(xs[1], np.zeros(7, np.int64)), Y=np.zeros((7, 3), np.float32))
    assert get_scorer(lab).precision == "bf16"
    with pytest.raises(ValueError, match="precision"):
        BiaffineScorer(precision="int8")


# ------------------------------------------- concurrent calls (issue 47)

def _threaded(fn, threads=4, calls=50):
    """fn(t, c) from `threads` threads at once, `calls` each; the results."""
    import threading

    out = [[None] * calls for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(t):
        start.wait()
        for c in range(calls):
            out[t][c] = fn(t, c)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def _bf16_twin(s, weights):
    """A second scorer of s's sizes holding `weights` ({name: array}, read
    from views: s.parameters() would tell s its weights changed), packing
    its own bf16 copy: the single-thread reference."""
    t = biaffine.biaffine_scorer(s.n_in, s.hidden, s.labels, bias_u=s.bias_u, bias_v=s.bias_v, precision="bf16")
    for name, v in weights.items():
        t.set_parameter(name, np.array(v))
    return t


def test_concurrent_calls_give_one_calls_bytes():
    # Every bf16 call from Python used to pack the bf16 copy of the weights
    # again, in place, while other threads' calls read it: wrong scores in a
    # few percent of calls. 4 threads x 50 calls of predict, predict_heads
    # and predict_stream on one scorer give the bytes of single-thread calls
    # on a twin; then the weights are written through the parameter views
    # (no call running; the scorer is not told) and the next concurrent
    # calls all see the write.
    # Weights large beside the tokens (16 labels): packing takes a good share
    # of a call, so the old code failed 10-25% of these calls here.
    s, doc, lengths = rng_case(21, n_in=64, hidden=96, labels=16, lengths=(30, 7, 45, 19, 38, 12))
    rng = np.random.default_rng(3)
    heads = [np.concatenate([rng.integers(0, n, size=n) for n in lengths])]
    views = {name: v for name, v, _ in s.parameters()}

    def calls(m, which):
        if which == 0:
            return [y.tobytes() for y in m.predict([doc], [lengths])]
        if which == 1:
            return [y.tobytes() for y in m.predict_heads([doc], [lengths], heads)]
        got = []
        m.predict_stream([doc], [lengths], lambda k, d, y: got.append(np.array(y).tobytes()))
        return got

    for rnd in range(2):
        if rnd == 1:
            views["bilinear_weight"] *= -0.5  # written behind the scorer's back, as an optimiser does
            views["head_bias"] += 0.125
        twin = _bf16_twin(s, views)
        want = [calls(twin, w) for w in range(3)]
        if rnd == 1:
            assert want[0] != before, "the write changed nothing"
        before = want[0]
        got = _threaded(lambda t, c: calls(s, (t + c) % 3))
        wrong = sum(got[t][c] != want[(t + c) % 3] for t in range(4) for c in range(50))
        assert wrong == 0, f"round {rnd}: {wrong} of 200 concurrent calls differ from one call's bytes"


def test_thinc_layer_concurrent_predictions_after_adam_steps():
    # The Thinc layer's params are the scorer's buffers; Adam writes them in
    # place. After each step, 4 threads x 50 predictions give the bytes of a
    # twin scorer holding the stepped weights (and differ from before the
    # step: the write was seen). Each step ends with a second Adam update on
    # no new gradient (its momentum moves the weights): a write with no
    # training forward since the last prediction packed them.
    pytest.importorskip("thinc")  # conftest turns a skip into a failure: thinc is required
    from thinc.api import Adam

    from biaffine.thinc import PARAM_NAMES, BiaffineScorer, get_scorer

    rng = np.random.default_rng(8)
    xs = [rng.uniform(-1, 1, (n, 64)).astype(np.float32) for n in (9, 31, 17, 44, 50)]
    m = BiaffineScorer(nO=16, hidden_width=96, precision="bf16")
    m.initialize(X=xs)
    opt = Adam(0.05)
    previous = None
    for step in range(2):
        Yt, bp = m.begin_update(xs)
        bp([np.full_like(y, 0.01) for y in Yt])
        m.finish_update(opt)
        m.predict(xs)  # packs the stepped weights
        before_momentum = np.array(m.get_param("bilinear_weight"))
        m.finish_update(opt)
        assert not np.array_equal(before_momentum, m.get_param("bilinear_weight"))
        twin = _bf16_twin(get_scorer(m), {n: m.get_param(n) for n in PARAM_NAMES})
        want = [y.tobytes() for y in twin.predict(xs, [[x.shape[0]] for x in xs])]
        assert want != previous, step
        previous = want
        got = _threaded(lambda t, c: [y.tobytes() for y in m.predict(xs)])
        wrong = sum(g != want for row in got for g in row)
        assert wrong == 0, f"step {step}: {wrong} of 200 concurrent predictions differ from one call's bytes"


# ------------------------------------------------ bfloat16 outputs (output=)

def ties_and_specials(rng):
    """float32 values with exact bf16 halfway ties (both parities), values that
    round up into the next binade, and inf / NaN."""
    u = rng.integers(0, 0x7F800000, 4200, dtype=np.uint64).astype(np.uint32)  # finite, positive
    u[:1000] = (u[:1000] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)  # ties
    u[1000:1100] = (u[1000:1100] & np.uint32(0xFF800000)) | np.uint32(0x007FFFFF)  # carry into the exponent
    u[1100:2100] |= np.uint32(0x80000000)  # negative
    x = u.view(np.float32).copy()
    x[2100:2110] = [np.inf, -np.inf, 0.0, -0.0, np.float32(3.4e38), -np.float32(3.4e38), 1e-40, -1e-40, 1.0, -1.0]
    return x


def test_bfloat16_converters_round_to_nearest_even():
    rng = np.random.default_rng(3)
    x = ties_and_specials(rng).reshape(-1, 7)[:, :5]  # a strided 2-d input
    bits = biaffine.float32_to_bfloat16_bits(x)
    assert bits.dtype == np.uint16 and bits.shape == x.shape
    # round_bf16 (above) is an independent computation in uint64 arithmetic.
    finite = np.isfinite(x) & (np.abs(x) < np.float32(3.38e38))
    np.testing.assert_array_equal(biaffine.bfloat16_to_float32(bits)[finite], round_bf16(x[finite]))
    # Past the largest bf16 (3.3895e38) rounds to infinity, as ties to even says.
    big = np.array([3.4e38, -3.4e38, np.inf], np.float32)
    np.testing.assert_array_equal(biaffine.bfloat16_to_float32(biaffine.float32_to_bfloat16_bits(big)),
                                  np.array([np.inf, -np.inf, np.inf], np.float32))
    nan = biaffine.float32_to_bfloat16_bits(np.array([np.nan, -np.nan], np.float32))
    assert np.isnan(biaffine.bfloat16_to_float32(nan)).all()
    with pytest.raises(TypeError, match="expected float32"):
        biaffine.float32_to_bfloat16_bits(np.ones(3))
    with pytest.raises(TypeError, match="uint16 bits or ml_dtypes"):
        biaffine.bfloat16_to_float32(np.ones(3, np.int16))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("labels", [1, 3])
def test_bfloat16_outputs_are_the_float32_outputs_rounded(precision, labels):
    # Every layer composition the options select: one batch, batched under a
    # budget on 2 threads, and padded.
    rng = np.random.default_rng(17 + labels)
    s = biaffine.biaffine_scorer(24, 16, labels, seed=5, precision=precision)
    docs = [rng.uniform(-1, 1, (n, 24)).astype(np.float32) for n in (70, 9, 0)]
    lengths = [[1, 30, 0, 39], [9], []]
    heads = [[0] + [int(h) for h in rng.integers(0, 30, 30)] + [int(h) for h in rng.integers(0, 39, 39)],
             [int(h) for h in rng.integers(0, 9, 9)], []]
    for opts in ({"budget": None}, {"budget": biaffine.budget.items(64), "threads": 2},
                 {"budget": biaffine.budget.bytes(1 << 16), "pad_seq_unpad_matrix": True}):
        Y = s.predict(docs, lengths, **opts)
        B = s.predict(docs, lengths, output="bfloat16_bits", **opts)
        H = s.predict_heads(docs, lengths, heads, **opts)
        HB = s.predict_heads(docs, lengths, heads, output="bfloat16_bits", **opts)
        assert len(B) == len(Y) == 5 and len(HB) == len(H) == 5
        for y, b in zip(Y + H, B + HB):
            assert b.dtype == np.uint16 and b.shape == y.shape
            np.testing.assert_array_equal(b, biaffine.float32_to_bfloat16_bits(y))


def test_bfloat16_outputs_take_half_the_bytes():
    s = biaffine.biaffine_scorer(16, 8, 5)
    docs = [np.ones((60, 16), np.float32)]
    cells = (20 * 20 + 40 * 40) * 5
    base = biaffine.memory_stats()["current_bytes"]
    Y = s.predict(docs, [[20, 40]])
    f32 = biaffine.memory_stats()["current_bytes"] - base
    del Y
    base = biaffine.memory_stats()["current_bytes"]
    B = s.predict(docs, [[20, 40]], output="bfloat16_bits")
    b16 = biaffine.memory_stats()["current_bytes"] - base
    assert f32 == cells * 4 and b16 == cells * 2
    del B


def test_bfloat16_output_arguments_checked():
    s64 = biaffine.biaffine_scorer(8, 4, dtype="float64")
    docs = [np.ones((3, 8))]
    with pytest.raises(ValueError, match="needs a float32 scorer"):
        s64.predict(docs, [[3]], output="bfloat16")
    s = biaffine.biaffine_scorer(8, 4)
    with pytest.raises(ValueError, match="output must be 'float32', 'bfloat16' or 'bfloat16_bits', got 'float16'"):
        s.predict([np.ones((3, 8), np.float32)], [[3]], output="float16")
    with pytest.raises(ValueError, match="output must be"):
        s.predict_heads([np.ones((3, 8), np.float32)], [[3]], [[0, 0, 0]], output="bf16")


def test_bfloat16_output_as_ml_dtypes_and_decoded():
    rng = np.random.default_rng(2)
    s = biaffine.biaffine_scorer(16, 8, seed=3)
    docs = [rng.uniform(-1, 1, (50, 16)).astype(np.float32)]
    bits = s.predict(docs, [[13, 37]], output="bfloat16_bits")
    try:
        import ml_dtypes
    except ImportError:
        # Without ml_dtypes, output='bfloat16' says what to install (and
        # 'bfloat16_bits' works, above); decoders refuse the raw bits.
        with pytest.raises(ImportError, match="pip install ml_dtypes"):
            s.predict(docs, [[13, 37]], output="bfloat16")
        with pytest.raises(TypeError, match="expected dtype float32, float64 or bfloat16"):
            biaffine.mst_heads(bits[0])
        return
    B = s.predict(docs, [[13, 37]], output="bfloat16")
    for b, u in zip(B, bits):
        assert b.dtype == np.dtype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(b.view(np.uint16), u)
        w = biaffine.bfloat16_to_float32(b)
        np.testing.assert_array_equal(w, b.astype(np.float32))  # ml_dtypes' own widening
        for decode in (biaffine.mst_heads, biaffine.eisner_heads, biaffine.argmax_heads):
            np.testing.assert_array_equal(decode(b), decode(w))
