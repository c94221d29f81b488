# The numpy API: no copies, owning outputs, the GIL, memory accounting,
# decoding and splitting helpers, and bad input (docs/bad-input.md table rows
# Python can reach, plus Python-only cases).
import gc
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import biaffine

BAD_INPUT_TABLE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"


def readme_rows():
    rows = {}
    for line in BAD_INPUT_TABLE.read_text().splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \| .* \| `([a-z_:]+)` \| `(.*)` \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    assert len(rows) > 30, f"bad-input table not found in {BAD_INPUT_TABLE}"
    return rows


ROWS = readme_rows()
CLASSES = {
    "biaffine::error": biaffine.Error, "biaffine::shape_error": biaffine.ShapeError,
    "biaffine::length_error": biaffine.LengthError, "biaffine::budget_error": biaffine.BudgetError,
    "biaffine::overflow_error": biaffine.OverflowError, "biaffine::backprop_error": biaffine.BackpropError,
    "biaffine::head_error": biaffine.HeadError,
    "std::bad_alloc": MemoryError,
}


def rng_docs(rng, rows, n_in, dtype=np.float32):
    return [rng.standard_normal((n, n_in)).astype(dtype) for n in rows]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# ---------------------------------------------------------------- no copies


def test_input_read_in_place_no_input_sized_allocation():
    rng = np.random.default_rng(0)
    s = biaffine.biaffine_scorer(64, 32, seed=1)
    doc = rng.standard_normal((20000, 64)).astype(np.float32)  # 5.1 MB
    lengths = [[20] * 1000]
    budget = 1 << 20
    biaffine.reset_peak()
    before = biaffine.memory_stats()
    Y = s.predict([doc], lengths, budget=biaffine.budget.bytes(budget))
    after = biaffine.memory_stats()
    assert len(Y) == 1000
    # Working set (peak minus outputs) within the 1 MiB budget: far below the
    # 5 MB input, so the input was never copied into the tracked heap.
    assert after["work_peak_bytes"] - before["current_bytes"] <= budget < doc.nbytes
    assert after["output_bytes"] - before["output_bytes"] == 1000 * 20 * 20 * 4
    # And the scores are those of this very buffer: changing it changes them.
    doc[:20] += 1.0
    Y2 = s.predict([doc], lengths, budget=biaffine.budget.bytes(budget))
    assert not np.allclose(Y[0], Y2[0]) and np.array_equal(Y[1], Y2[1])


def test_outputs_own_memory_and_outlive_scorer():
    rng = np.random.default_rng(1)
    s = biaffine.biaffine_scorer(8, 4, labels=3, dtype="float64")
    docs = rng_docs(rng, [6], 8, np.float64)
    Y = s.predict(docs, [[2, 4]])
    assert Y[1].shape == (4, 4, 3) and Y[1].flags["C_CONTIGUOUS"] and Y[1].flags["WRITEABLE"]
    assert type(Y[1].base).__name__ == "PyCapsule"  # owns the C++ buffer, no copy
    kept = [y.copy() for y in Y]
    Yf, bp = s.forward(docs, [[2, 4]], train=False)
    del s, bp
    gc.collect()
    junk = [np.full(1000, 7.0) for _ in range(100)]
    for a, b in zip(Y, kept):
        assert np.array_equal(a, b)
    for a, b in zip(Yf, kept):
        assert np.array_equal(a, b)
    del junk


def test_repeated_predict_keeps_tracker_and_rss_flat():
    rng = np.random.default_rng(2)
    s = biaffine.biaffine_scorer(32, 16)
    docs = rng_docs(rng, [200, 50], 32)
    lengths = [[20] * 10, [25, 25]]
    # Warm-up: scores are cut one after the other from 8 MiB chunks, and a
    # call's scores live on while the next call's are cut (Y is rebound
    # after predict returns), so the calls walk through two chunks before
    # they reuse them. 21 KB of scores per call: 1000 calls walk 21 MB.
    for _ in range(1000):
        Y = s.predict(docs, lengths)
    del Y
    gc.collect()
    base, rss0 = biaffine.memory_stats()["current_bytes"], rss_bytes()
    for _ in range(1000):
        Y = s.predict(docs, lengths)
    del Y
    gc.collect()
    assert biaffine.memory_stats()["current_bytes"] == base
    # Under AddressSanitizer (CI's sanitizer build says so in the tests'
    # environment) freed memory waits in ASan's quarantine, so the resident
    # size grows whatever the library does; the tracker's figure above stands.
    if os.environ.get("BIAFFINE_TEST_ASAN") != "1":
        assert rss_bytes() - rss0 < 4 << 20


def test_parameters_are_views_of_the_scorer():
    s = biaffine.biaffine_scorer(4, 3, dtype="float64")
    doc = np.ones((3, 4))
    y0 = s.predict([doc], [[3]])[0]
    params = {n: (v, g) for n, v, g in s.parameters()}
    assert params["bilinear_weight"][0].shape == (1, 4, 4)
    params["bilinear_weight"][0][0, -1, -1] += 1.0  # the bias x bias cell: +1 everywhere
    y1 = s.predict([doc], [[3]])[0]
    assert np.allclose(y1 - y0, 1.0)


def test_cost_dicts_report_device_bytes():
    # The CPU backends hold nothing on a device; "total" sums every figure.
    s = biaffine.biaffine_scorer(4, 3, labels=2)
    for c in (s.cost(5, 7), s.cost(5, 7, True), s.heads_cost(5, 7, True)):
        assert c["device"] == 0
        assert c["total"] == c["scratch"] + c["heap"] + c["saved"] + c["outputs"] + c["device"]


def test_save_and_load_npy(tmp_path):
    s = biaffine.biaffine_scorer(5, 3, labels=2, seed=3)
    s.save_npy(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{n}.npy" for n in ("head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight"))
    t = biaffine.biaffine_scorer(5, 3, labels=2, seed=4)
    doc = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    assert not np.array_equal(s.predict([doc], [[4]])[0], t.predict([doc], [[4]])[0])
    t.load_npy(str(tmp_path))
    assert np.array_equal(s.predict([doc], [[4]])[0], t.predict([doc], [[4]])[0])


# -------------------------------------------------------------------- GIL


def test_gil_released_during_predict():
    # A Python thread stamps the time as it runs. With the GIL held for the
    # whole C++ call it could not run at all between the call's start and
    # its end; released, it runs throughout, so some stamps fall in the
    # middle of the call.
    rng = np.random.default_rng(4)
    s = biaffine.biaffine_scorer(128, 128, labels=4)
    # The work grows until one call lasts long enough to observe, so a faster
    # CPU (or ISA variant) does not make the test vacuous.
    n_docs = 1
    while True:
        docs = rng_docs(rng, [6000] * n_docs, 128)
        lengths = [[60] * 100] * n_docs
        a = time.perf_counter()
        s.predict(docs, lengths, threads=1)
        if time.perf_counter() - a >= 0.05 or n_docs >= 16:
            break
        n_docs *= 2
    stamps = []
    stop = threading.Event()

    def spin():
        i = 0
        while not stop.is_set():
            i += 1
            if i % 64 == 0:
                stamps.append(time.perf_counter())

    th = threading.Thread(target=spin)
    th.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    reps = 0
    while time.perf_counter() - t0 < 0.25 or reps == 0:
        a = time.perf_counter()
        s.predict(docs, lengths, threads=1)
        b = time.perf_counter()
        reps += 1
        if b - a >= 0.02:
            break
    stop.set()
    th.join()
    duration = b - a
    assert duration >= 0.02, "predict too fast to observe"
    inside = [t for t in stamps if a + 0.2 * duration < t < b - 0.2 * duration]
    assert len(inside) >= 2, (len(stamps), duration)


# ----------------------------------------------------------- memory + helpers


def test_memory_log_and_limit():
    log = biaffine.memory_log()
    s = biaffine.biaffine_scorer(16, 8)
    docs = [np.ones((100, 16), np.float32)]
    Y = s.predict(docs, [[50, 50]])
    c = log.checkpoint("scored")
    assert c.label == "scored" and c.change_bytes >= 2 * 50 * 50 * 4
    del Y
    log.checkpoint("freed")
    assert log.checkpoints()[1].change_bytes <= -2 * 50 * 50 * 4
    assert "scored" in log.summary() and "freed" in log.summary()
    assert biaffine.format_bytes(1536) == "1.5 KB"
    biaffine.set_limit(biaffine.memory_stats()["current_bytes"] + 1000)
    try:
        with pytest.raises(MemoryError):
            s.predict(docs, [[50, 50]])
    finally:
        biaffine.set_limit(0)
    assert biaffine.limit() == 0


def test_decoders_and_splitting():
    sc = np.array([[5.0, 1, 0], [9, 0, 0], [0, 8, 0]])
    assert list(biaffine.argmax_heads(sc)) == [0, 0, 1]
    assert list(biaffine.mst_heads(sc)) == [0, 0, 1] and biaffine.is_tree([0, 0, 1])
    big = np.zeros((2, 5, 5), np.float32)
    big[1, :3, :3] = sc  # a strided block of a padded batch, read in place
    assert list(biaffine.mst_heads(big[1, :3, :3])) == [0, 0, 1]
    assert biaffine.lazy_split(np.arange(5, dtype=np.float32), 2) == [2, 1, 1, 1]
    assert biaffine.cap_split_lengths([3, 7], 3) == [3, 3, 2, 2]
    assert biaffine.cap_split_lengths([5], 2, np.array([0, 0, 9, 0, 0], np.float64)) == [2, 1, 2]
    assert biaffine.minibatch_by_padded_size([5, 6, 5, 9], 18) == [[3], [0, 1, 2]]


# ---------------------------------------------------------------- bad input


def expect(row, fn, exact=True):
    cls_name, message = ROWS[row]
    with pytest.raises(CLASSES[cls_name]) as info:
        fn()
    if exact:
        assert str(info.value) == message, (row, str(info.value), message)
    return info.value


@pytest.fixture
def s3():
    return biaffine.biaffine_scorer(3, 2, seed=5, dtype="float64")


def test_bad_input_table_rows(s3, tmp_path):
    d = np.ones((7, 3))
    expect("doc-count", lambda: s3.predict([d, d], [[7]]))
    expect("split-sum", lambda: s3.predict([np.ones((6, 3)), np.ones((6, 3))], [[6], [2, 3]]))
    expect("negative-length", lambda: s3.predict([np.ones((1, 3))], [[3, -2]]))
    expect("doc-width", lambda: s3.predict([np.ones((2, 4))], [[2]]))
    Y, bp = s3.forward([np.ones((4, 3)), np.ones((2, 3))], [[2, 2], [2]])
    expect("grad-count", lambda: bp([np.ones((2, 2))] * 2))
    Y, bp = s3.forward([np.ones((5, 3))], [[3, 2]])
    expect("grad-shape", lambda: bp([np.zeros((3, 3)), np.zeros((3, 3))]))
    Y, bp = s3.forward([np.ones((4, 3))], [[2, 2]])
    expect("grad-not-square", lambda: bp([np.ones((2, 3)), np.ones((2, 2))]))
    y, pbp = s3.forward_padded(np.ones((2, 4, 3)), [4, 2])
    expect("padded-grad-shape", lambda: pbp(np.ones((2, 4, 3))))
    Y, bp = s3.forward([d], [[7]])
    bp([np.ones((7, 7))])
    expect("backprop-twice", lambda: bp([np.ones((7, 7))]))
    expect("budget-zero", lambda: biaffine.budget.bytes(0))
    expect("budget-megabytes-overflow", lambda: biaffine.budget.megabytes(1 << 50))
    expect("buffer-zero", lambda: s3.predict([d], [[7]], buffer=0))
    expect("threads-zero", lambda: s3.predict([d], [[7]], threads=0))
    expect("budget-below-bookkeeping", lambda: s3.predict([d], [[3, 2, 2]], budget=biaffine.budget.bytes(200), buffer=3))
    expect("budget-below-one-split", lambda: s3.predict([d], [[7]], budget=biaffine.budget.bytes(100)))
    expect("budget-below-index", lambda: s3.predict([np.ones((3, 3))] + [np.ones((0, 3))] * 3, [[1, 1, 1], [], [], []],
                                                    budget=biaffine.budget.bytes(420)))
    expect("bilinear-shapes", lambda: biaffine.pairwise_bilinear(np.ones((1, 2, 3)), np.ones((1, 2, 4)),
                                                                 np.ones((1, 4, 4)), True, True))
    expect("oversize-throw", lambda: s3.predict([np.ones((9, 3))], [[4, 5]], budget=biaffine.budget.items(4),
                                                oversize="throw"))
    expect("config-size", lambda: biaffine.biaffine_scorer(0, 2))
    expect("config-dropout", lambda: biaffine.biaffine_scorer(3, 2, dropout=1.0))
    expect("padded-rank", lambda: s3.predict_padded(np.ones((4, 3)), [4]))
    expect("padded-width", lambda: s3.predict_padded(np.ones((2, 4, 5)), [4, 4]))
    expect("padded-lengths-count", lambda: s3.predict_padded(np.ones((2, 4, 3)), [4]))
    expect("padded-length-range", lambda: s3.predict_padded(np.ones((2, 4, 3)), [4, 5]))
    expect("set-parameter-shape", lambda: s3.set_parameter("head_bias", np.ones(3)))
    expect("set-parameter-name", lambda: s3.set_parameter("nope", np.ones(3)))
    expect("load-npy-missing", lambda: s3.load_npy("/nonexistent"))
    expect("as-view-rank", lambda: s3.predict([np.ones((2, 2, 3))], [[2]]))
    expect("lazy-split-max-length", lambda: biaffine.lazy_split(np.ones(3), 0))
    expect("cap-split-scores", lambda: biaffine.cap_split_lengths([2, 3], 2, np.ones(4)))
    expect("decode-nan", lambda: biaffine.mst_heads(np.array([[0.0, 1], [np.nan, 0]])))
    expect("decode-not-square", lambda: biaffine.mst_heads(np.ones((2, 3))))
    base = biaffine.memory_stats()["current_bytes"]
    biaffine.set_limit(base + 64)
    try:
        expect("memory-limit", lambda: s3.predict([d], [[7]]), exact=False)
    finally:
        biaffine.set_limit(0)
    assert isinstance(biaffine.OverflowError("x"), OverflowError)
    assert issubclass(biaffine.ShapeError, ValueError)


def test_bad_input_rows_of_labels_at_heads(s3):
    d3 = np.ones((3, 3))
    expect("heads-missing", lambda: s3.predict_heads([d3, d3], [[3], [3]], [[0, 0, 0]]))
    expect("heads-length", lambda: s3.predict_heads([d3], [[3]], [[0, 0]]))
    expect("heads-range", lambda: s3.predict_heads([np.ones((1, 3)), d3], [[1], [1, 2]], [[0], [0, 2, 0]]))
    expect("heads-range", lambda: s3.forward_heads([np.ones((1, 3)), d3], [[1], [1, 2]], [[0], [0, 2, 0]]))
    expect("heads-padded-shape", lambda: s3.predict_heads_padded(np.ones((2, 4, 3)), [4, 4], np.zeros((2, 3), int)))
    expect("heads-padded-shape", lambda: s3.forward_heads_padded(np.ones((2, 4, 3)), [4, 4], np.zeros((2, 3), int)))
    Y, bp = s3.forward_heads([np.ones((2, 3))], [[2]], [[0, 0]])
    expect("heads-grad-shape", lambda: bp([np.ones((3, 1))]))
    expect("loss-gold-head", lambda: biaffine.cross_entropy_heads([np.zeros((2, 2))], [[0, 2]]))
    expect("labels-at-heads-range", lambda: biaffine.labels_at_heads(np.zeros((2, 2, 3)), [0, 2]))
    assert issubclass(biaffine.HeadError, biaffine.Error)
    # The head_error rows also raise the mirror of their C++ class under any composition.
    for pad in (False, True):
        with pytest.raises(biaffine.HeadError, match="head -1 outside"):
            s3.predict_heads([d3], [[3]], [[0, -1, 0]], pad_seq_unpad_matrix=pad)


def test_budgets_are_explicit():
    assert biaffine.budget.megabytes(16.0) == biaffine.budget.megabytes(16) == biaffine.budget.bytes(16 << 20)
    assert biaffine.budget.megabytes(0.5) == biaffine.budget.bytes(1 << 19)
    assert len({biaffine.budget.megabytes(1), biaffine.budget.bytes(1 << 20), biaffine.budget.items(1 << 20)}) == 2
    assert biaffine.budget.megabytes(1.5).value == 3 << 19
    assert biaffine.budget.megabytes(1e-6).kind == "bytes" and biaffine.budget.megabytes(1e-6).value == 1
    with pytest.raises(biaffine.BudgetError, match="must be positive"):
        biaffine.budget.megabytes(1e-9)  # rounds to 0 bytes
    with pytest.raises(ValueError, match="finite non-negative"):
        biaffine.budget.megabytes(float("nan"))
    with pytest.raises(ValueError, match="finite non-negative"):
        biaffine.budget.megabytes(-1.0)
    with pytest.raises(biaffine.OverflowError, match="64 bits"):
        biaffine.budget.megabytes(1e300)
    with pytest.raises(TypeError, match="budget.megabytes"):
        biaffine.budget.megabytes("16")
    with pytest.raises(TypeError, match="budget.bytes: expected an integer, got float"):
        biaffine.budget.bytes(1.5)
    with pytest.raises(ValueError, match="budget.items: expected a non-negative integer, got -3"):
        biaffine.budget.items(-3)
    with pytest.raises(biaffine.OverflowError, match="budget.bytes"):
        biaffine.budget.bytes(1 << 70)
    s = biaffine.biaffine_scorer(3, 2)
    d = [np.ones((4, 3), np.float32)]
    # A bare int is deprecated (it reads as bytes here, as padded items in
    # with_minibatch_by_padded_size(size=...)): a FutureWarning naming the fix.
    with pytest.warns(FutureWarning, match=r"budget=<int> is read as bytes.*budget.bytes\(n\)") as rec:
        a = s.predict(d, [[4]], budget=1 << 16)
    assert rec[0].filename == __file__  # attributed to the caller's line
    b = s.predict(d, [[4]], budget=biaffine.budget.bytes(1 << 16))
    np.testing.assert_array_equal(a[0], b[0])
    with pytest.raises(TypeError, match="budget must be a biaffine.budget"):
        s.predict(d, [[4]], budget=16.0)
    with pytest.raises(TypeError, match="budget must be a biaffine.budget"):
        s.predict(d, [[4]], budget=True)


def test_python_only_bad_input_of_heads_and_losses(s3):
    d = np.ones((4, 3))
    with pytest.raises(TypeError, match=r"predict_heads: heads must be a list"):
        s3.predict_heads([d], [[4]], np.zeros(4, int))
    with pytest.raises(TypeError, match=r"forward_heads: heads must be a list"):
        s3.forward_heads([d], [[4]], None)
    with pytest.raises(TypeError, match=r"predict_heads_stream: heads must be a list"):
        s3.predict_heads_stream([d], [[4]], None, lambda k, doc, v: None)
    with pytest.raises(TypeError, match=r"predict_heads: heads\[0\] must hold integers, got float"):
        s3.predict_heads([d], [[4]], [[0.0, 0, 0, 0]])
    with pytest.raises(TypeError, match=r"forward_heads: heads\[0\] must hold integers, got dtype float64"):
        s3.forward_heads([d], [[4]], [np.zeros(4)])
    with pytest.raises(ValueError, match=r"heads\[0\]: expected a 1-d array, got 2 dimensions"):
        s3.predict_heads([d], [[4]], [np.zeros((2, 2), int)])
    with pytest.raises(TypeError, match="padded heads: expected an integer array, got dtype float64"):
        s3.predict_heads_padded(np.ones((1, 4, 3)), [4], np.zeros((1, 4)))
    Y, bp = s3.forward_heads([d], [[4]], [[0, 0, 0, 0]])
    with pytest.raises(TypeError, match=r"backprop: dY\[0\]: expected dtype float64, got float32"):
        bp([np.ones((4, 1), np.float32)])
    with pytest.raises(biaffine.ShapeError, match="split gradient 0: expected \\[n, o\\], got 3 dimensions"):
        bp([np.ones((4, 1, 1))])
    with pytest.raises(ValueError, match="not C-contiguous"):
        bp([np.ones((4, 2))[:, :1]])
    with pytest.raises(TypeError, match="cross_entropy_heads: Y must be a list"):
        biaffine.cross_entropy_heads(np.zeros((2, 2)), [[0, 0]])
    with pytest.raises(TypeError, match=r"cross_entropy_labels: Y\[1\]: expected dtype float32, got float64"):
        biaffine.cross_entropy_labels([np.zeros((2, 2), np.float32), np.zeros((2, 2))], [[0, 0], [0, 0]])
    with pytest.raises(biaffine.ShapeError, match="cross_entropy_labels: 1 gold label lists for 2 splits"):
        biaffine.cross_entropy_labels([np.zeros((2, 2)), np.zeros((2, 2))], [[0, 0]])
    with pytest.raises(TypeError, match="gold_heads must be a list"):
        biaffine.cross_entropy_heads([np.zeros((2, 2))], "01")
    with pytest.raises(TypeError, match="labels_at_heads: scores must be a numpy array"):
        biaffine.labels_at_heads([[[0.0]]], [0])
    with pytest.raises(ValueError, match="train_outputs must be 'probabilities' or 'logits', got 'probs'"):
        biaffine.biaffine_scorer(3, 2, train_outputs="probs")


def test_python_only_bad_input(s3):
    d = np.ones((4, 3))
    with pytest.raises(TypeError, match="expected dtype float64, got float32"):
        s3.predict([d.astype(np.float32)], [[4]])
    with pytest.raises(TypeError, match="expected dtype float64, got int64"):
        s3.predict([np.ones((4, 3), np.int64)], [[4]])
    with pytest.raises(ValueError, match="not C-contiguous"):
        s3.predict([np.ones((3, 4)).T], [[4]])
    with pytest.raises(ValueError, match="not C-contiguous"):
        s3.predict([np.ones((8, 3))[::2]], [[4]])
    with pytest.raises(biaffine.ShapeError, match="expected a 2-d array"):
        s3.predict([np.ones(3)], [[1]])
    with pytest.raises(TypeError, match="expected a numpy array"):
        s3.predict([[[1.0, 2.0, 3.0]]], [[1]])
    with pytest.raises(TypeError, match="docs must be a list"):
        s3.predict(d, [[4]])
    with pytest.raises(TypeError, match="split_lengths"):
        s3.predict([d], [4])
    with pytest.raises(TypeError, match="must hold integers"):
        s3.predict([d], [[4.0]])
    with pytest.raises(TypeError, match="budget"):
        s3.predict([d], [[4]], budget="16MB")
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        biaffine.biaffine_scorer(3, 2, dtype="float16")
    Y, bp = s3.forward([d], [[4]])
    with pytest.raises(TypeError, match="dY must be a list"):
        bp(np.ones((4, 4)))
    with pytest.raises(TypeError, match="expected dtype float64"):
        bp([np.ones((4, 4), np.float32)])
    with pytest.raises(TypeError):
        biaffine.mst_heads([[0.0, 1.0], [1.0, 0.0]])


def test_raising_callback_propagates_and_leaks_nothing():
    s = biaffine.biaffine_scorer(8, 4)
    docs = [np.ones((60, 8), np.float32)]
    lengths = [[10] * 6]
    s.predict(docs, lengths)
    gc.collect()
    base = biaffine.memory_stats()["current_bytes"]
    refs = []

    class Boom(Exception):
        pass

    calls = []

    def cb(k, d, v):
        calls.append(k)
        if len(calls) == 3:
            raise Boom("stop at the third split")

    for threads in (1, 2, 1, 2, 1, 2):
        calls.clear()
        try:
            s.predict_stream(docs, lengths, cb, budget=biaffine.budget.items(20), threads=threads)
        except Boom as e:
            assert str(e) == "stop at the third split"
        else:
            raise AssertionError("the callback's exception did not reach the caller")
        # One thread stops at the failing call; with two, the other thread's
        # batch of the same buffer may still deliver.
        assert len(calls) == 3 if threads == 1 else len(calls) >= 3
        gc.collect()
        refs.append(sys.getrefcount(docs[0]))
    assert biaffine.memory_stats()["current_bytes"] == base
    assert refs == [refs[0]] * len(refs)
    view = []
    s.predict_stream(docs, lengths, lambda k, d, v: view.append(v.flags["WRITEABLE"]))
    assert view == [False] * 6


def _stream_case(labels):
    # Small splits and a 1500-token one, in two documents; shrinking sizes
    # first, so that a stream that reused a kept block would overwrite it.
    rng = np.random.default_rng(11)
    s = biaffine.biaffine_scorer(8, 16, labels=labels, seed=3)
    docs = [rng.standard_normal((60, 8)).astype(np.float32), rng.standard_normal((1520, 8)).astype(np.float32)]
    return s, docs, [[30, 23, 7], [1500, 20]]


def _churn(s, docs, lengths):
    # More streams and predicts after the kept blocks were handed out, so
    # that memory the library freed or reuses is written again (before the
    # fix a kept block read another split's scores, garbage, or segfaulted).
    for threads in (1, 2):
        s.predict_stream(docs, lengths, lambda k, d, v: None, budget=biaffine.budget.items(3000), threads=threads)
        s.predict(docs, lengths)
    gc.collect()


@pytest.mark.parametrize("labels,pad,threads", [(1, False, 1), (3, False, 2), (1, True, 2), (3, True, 1)])
def test_stream_blocks_kept_by_the_callback_stay_valid(labels, pad, threads):
    s, docs, lengths = _stream_case(labels)
    want = s.predict(docs, lengths)
    kept, seen, addresses = {}, {}, []

    def cb(k, d, scores):
        # The array, a slice (a numpy view of it) and a memoryview.
        kept[k] = (scores, scores[1:, :3], memoryview(scores))
        seen[k] = scores.copy()
        addresses.append(scores.__array_interface__["data"][0])

    s.predict_stream(docs, lengths, cb, budget=biaffine.budget.items(3000), threads=threads,
                     pad_seq_unpad_matrix=pad)
    _churn(s, docs, lengths)
    assert sorted(kept) == list(range(5))
    for k, (a, part, mv) in kept.items():
        assert a.shape == want[k].shape and not a.flags["WRITEABLE"]
        assert np.array_equal(a, seen[k]), k  # unchanged since the callback had it
        assert np.array_equal(part, seen[k][1:, :3]), k
        assert np.array_equal(np.asarray(mv), seen[k]), k
        np.testing.assert_allclose(a, want[k], rtol=1e-5, atol=1e-6, err_msg=f"split {k}")
    assert len(set(addresses)) == 5  # each kept block is its own memory
    # A callback that keeps nothing gets one block, reused (on one thread: on
    # several, a split computed before its turn waits parked in its thread's
    # block, each at its own place there, and is handed out from it).
    addresses.clear()
    s.predict_stream(docs, lengths, lambda k, d, v: addresses.append(v.__array_interface__["data"][0]),
                     budget=biaffine.budget.items(3000), threads=threads, pad_seq_unpad_matrix=pad)
    assert len(addresses) == 5
    if threads == 1:
        assert len(set(addresses)) < 5


@pytest.mark.parametrize("heads", [False, True])
def test_stream_blocks_kept_before_the_callback_raised_stay_valid(heads):
    # budget=None: one batch, the splits in input order; the callback keeps
    # every block and raises at the 1500-token one (the 4th of 5).
    s, docs, lengths = _stream_case(3)
    hs = [np.zeros(60, np.int64), np.arange(1520) % 20]
    want = s.predict_heads(docs, lengths, hs) if heads else s.predict(docs, lengths)
    kept, seen = [], []

    class Boom(Exception):
        pass

    def cb(k, d, scores):
        kept.append((k, scores, scores[::2], memoryview(scores)))
        seen.append(scores.copy())
        if scores.shape[0] == 1500:
            raise Boom("stop at the long split")

    with pytest.raises(Boom) as info:
        if heads:
            s.predict_heads_stream(docs, lengths, hs, cb, budget=None)
        else:
            s.predict_stream(docs, lengths, cb, budget=None)
    # The traceback's frame of the callback still holds the last block.
    in_frame = [tb.tb_frame.f_locals["scores"] for tb in _walk(info.value.__traceback__)
                if tb.tb_frame.f_code.co_name == "cb"]
    _churn(s, docs, lengths)
    assert [k for k, *_ in kept] == [0, 1, 2, 3]
    for (k, a, part, mv), c in zip(kept, seen):
        assert np.array_equal(a, c) and np.array_equal(part, c[::2]) and np.array_equal(np.asarray(mv), c), k
        np.testing.assert_allclose(a, want[k], rtol=1e-5, atol=1e-6, err_msg=f"split {k}")
    assert len(in_frame) == 1 and np.array_equal(in_frame[0], seen[3])


@pytest.mark.parametrize("heads,pad,budget", [(False, False, None), (True, False, None), (False, True, 3000),
                                               (True, True, None), (False, False, 3000)])
def test_stream_writes_in_place_into_one_reused_block_when_nothing_is_kept(heads, pad, budget):
    # Zero copy: the library writes each split straight into the numpy block
    # the callback is handed (tests/test_scorer.cpp checks predict_stream_into
    # writes where its destination says). With one thread and a callback
    # that keeps nothing, a split gets the block of the split before unless
    # it is larger than every one before (the block then grows).
    s, docs, lengths = _stream_case(3)
    hs = [np.zeros(60, np.int64), np.arange(1520) % 20]
    want = s.predict_heads(docs, lengths, hs) if heads else s.predict(docs, lengths)
    got = []

    def cb(k, d, scores):
        base = scores.base
        assert base.ndim == 1 and base.flags["OWNDATA"] and not scores.flags["WRITEABLE"]
        got.append((k, scores.size, scores.__array_interface__["data"][0], base.__array_interface__["data"][0]))
        np.testing.assert_allclose(scores, want[k], rtol=1e-5, atol=1e-6, err_msg=f"split {k}")

    run = dict(budget=None if budget is None else biaffine.budget.items(budget), threads=1, pad_seq_unpad_matrix=pad)
    gc.collect()
    base_bytes = biaffine.memory_stats()["current_bytes"]
    biaffine.reset_peak()
    if heads:
        s.predict_heads_stream(docs, lengths, hs, cb, **run)
    else:
        s.predict_stream(docs, lengths, cb, **run)
    peak = biaffine.memory_stats()["peak_bytes"] - base_bytes
    assert sorted(k for k, *_ in got) == list(range(5))
    largest = 0
    for i, (k, size, addr, block) in enumerate(got):
        assert addr == block, k  # the array is the block's memory from its first byte
        if i > 0:
            assert (addr == got[i - 1][2]) == (size <= largest), (k, size, largest)
        largest = max(largest, size)
    assert len({addr for _, _, addr, _ in got}) < 5
    if not heads and not pad and budget is None:
        # The 1500-token split's [n, n, 3] scores were never in library
        # memory. (Under a budget the batch reserves its planned cost, which
        # still counts one split of stream scratch: the same peak as before.)
        assert peak < 1500 * 1500 * 3 * 4, peak


def test_stream_kept_blocks_are_outside_the_tracker():
    # Kept blocks are the caller's memory (numpy's): a stream's tracked
    # peak is the same whether its callback keeps every block or none, and
    # far below the blocks it kept.
    s = biaffine.biaffine_scorer(8, 16, labels=3)
    docs = [np.random.default_rng(2).standard_normal((1200, 8)).astype(np.float32)]
    lengths = [[30] * 40]
    run = lambda cb: s.predict_stream(docs, lengths, cb, budget=biaffine.budget.items(60))
    run(lambda k, d, v: None)
    gc.collect()
    base = biaffine.memory_stats()["current_bytes"]
    peaks = []
    kept = []
    for cb in (lambda k, d, v: None, lambda k, d, v: kept.append(v), lambda k, d, v: None):
        biaffine.reset_peak()
        run(cb)
        peaks.append(biaffine.memory_stats()["peak_bytes"] - base)
        assert biaffine.memory_stats()["current_bytes"] == base
    assert peaks[0] == peaks[1] == peaks[2], peaks
    assert len(kept) == 40 and sum(v.nbytes for v in kept) > 4 * peaks[0], (peaks, sum(v.nbytes for v in kept))


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


# Bad inputs of issue 47: each a TypeError / ValueError naming the argument.

def test_stream_callback_of_the_wrong_arity_is_named():
    s = biaffine.biaffine_scorer(8, 4, labels=2)
    docs, lengths, heads = [np.ones((10, 8), np.float32)], [[4, 6]], [np.zeros(10, np.int64)]
    results = []
    for cb in (results.append, list.append, lambda scores: None, lambda k, d, v, extra: None):
        with pytest.raises(TypeError, match=r"predict_stream: callback must take three positional arguments "
                                            r"\(split_index, doc_index, scores\), but .* has the signature"):
            s.predict_stream(docs, lengths, cb)
        with pytest.raises(TypeError, match=r"predict_heads_stream: callback must take three positional"):
            s.predict_heads_stream(docs, lengths, heads, cb)
    with pytest.raises(TypeError, match=r"predict_stream: callback must be callable .* got list"):
        s.predict_stream(docs, lengths, results)
    assert results == []
    # Defaults, *args and a callable object pass; nothing ran before the check.
    s.predict_stream(docs, lengths, lambda k, d, v, extra=None: results.append(k))
    s.predict_stream(docs, lengths, lambda *a: results.append(a[0]))
    assert results == [0, 1, 0, 1]


@pytest.mark.parametrize("bad,cls,msg", [
    (2**64, biaffine.LengthError, r"predict: split_lengths\[0\]\[1\]: 18446744073709551616 is out of range"),
    (sys.maxsize + 1, biaffine.LengthError, r"split_lengths\[0\]\[1\]: 9223372036854775808 is out of range"),
    (-2**64, biaffine.LengthError, r"split_lengths\[0\]\[1\]: -18446744073709551616 is out of range"),
    (-1, biaffine.LengthError, r"document 0, split 1: negative length -1"),
    (True, TypeError, r"predict: split_lengths\[0\]\[1\] must hold integers, got bool"),
    (np.bool_(False), TypeError, r"predict: split_lengths\[0\]\[1\] must hold integers, got bool"),
])
def test_bad_split_length_is_named(bad, cls, msg):
    s = biaffine.biaffine_scorer(8, 4)
    with pytest.raises(cls, match=msg):
        s.predict([np.ones((4, 8), np.float32)], [[4, bad]])


def test_bool_lengths_are_refused_everywhere():
    s = biaffine.biaffine_scorer(8, 4)
    doc = np.ones((2, 8), np.float32)
    for call, where in ((lambda L: s.predict([doc], [L]), r"predict: split_lengths\[0\]"),
                        (lambda L: s.predict_stream([doc], [L], lambda k, d, v: None),
                         r"predict_stream: split_lengths\[0\]"),
                        (lambda L: s.forward([doc], [L]), r"forward: split_lengths\[0\]"),
                        (lambda L: biaffine.cap_split_lengths(L, 3), r"cap_split_lengths: lengths"),
                        (lambda L: biaffine.minibatch_by_padded_size(L, 3), r"minibatch_by_padded_size: lengths"),
                        (lambda L: s.predict_padded(np.ones((2, 1, 8), np.float32), L), r"predict_padded: lengths")):
        with pytest.raises(TypeError, match=where + r" must hold integers, got dtype bool"):
            call(np.array([True, True]))
        with pytest.raises(TypeError, match=where + r"\[0\] must hold integers, got bool"):
            call([True, True])
    with pytest.raises(biaffine.LengthError, match=r"predict_padded: lengths\[0\]: 18446744073709551616 is out"):
        s.predict_padded(np.ones((1, 1, 8), np.float32), [2**64])


def test_bad_counts_of_the_splitting_helpers_are_named():
    x = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match=r"cap_split_lengths: max_length: expected a non-negative integer, got -1"):
        biaffine.cap_split_lengths([3, 3], -1)
    with pytest.raises(TypeError, match=r"cap_split_lengths: max_length: expected an integer, got bool"):
        biaffine.cap_split_lengths([3, 3], True)
    with pytest.raises(biaffine.OverflowError, match=r"cap_split_lengths: max_length: 18446744073709551616 does not"):
        biaffine.cap_split_lengths([3, 3], 2**64)
    with pytest.raises(ValueError, match=r"cap_split_lengths: lengths\[1\] must be non-negative, got -3"):
        biaffine.cap_split_lengths([3, -3], 2)
    with pytest.raises(ValueError, match=r"lazy_split: max_length: expected a non-negative integer, got -1"):
        biaffine.lazy_split(x, -1)
    with pytest.raises(TypeError, match=r"lazy_split: max_length: expected an integer, got float"):
        biaffine.lazy_split(x, 2.0)
    with pytest.raises(ValueError, match=r"minibatch_by_padded_size: size: expected a non-negative integer, got -1"):
        biaffine.minibatch_by_padded_size([3], -1)
    with pytest.raises(ValueError, match=r"minibatch_by_padded_size: buffer: expected a non-negative integer"):
        biaffine.minibatch_by_padded_size([3], 4, -2)
    assert biaffine.cap_split_lengths([3, 3], 2) == [2, 1, 2, 1]
    assert biaffine.minibatch_by_padded_size([3], 4) == [[0]]


def test_labels_at_heads_refuses_a_2d_matrix():
    with pytest.raises(biaffine.ShapeError, match=r"labels_at_heads: scores: expected a 3-d array \[n, n, o\]"
                                                 r".*got 2 dimensions"):
        biaffine.labels_at_heads(np.ones((3, 3), np.float32), [0, 0, 1])
    sc = np.zeros((3, 3, 2))
    sc[:, :, 1] = 1
    assert list(biaffine.labels_at_heads(sc, [0, 0, 1])) == [1, 1, 1]
    # A one-label [n, n] matrix, made explicit, has the single label 0.
    assert list(biaffine.labels_at_heads(np.ones((3, 3))[..., None], [0, 0, 1])) == [0, 0, 0]


def test_nan_sentence_start_scores_are_refused():
    nan = np.full(10, np.nan, np.float32)
    with pytest.raises(biaffine.Error, match=r"^lazy_split: sentence-start score is NaN at token 0$"):
        biaffine.lazy_split(nan, 4)
    one = np.arange(10, dtype=np.float64)
    one[7] = np.nan
    with pytest.raises(biaffine.Error, match=r"lazy_split: sentence-start score is NaN at token 7"):
        biaffine.lazy_split(one, 4)
    with pytest.raises(biaffine.Error, match=r"cap_split_lengths: sentence-start score is NaN at token 7"):
        biaffine.cap_split_lengths([5, 5], 4, one)
    one[7] = 0.5
    assert sum(biaffine.lazy_split(one, 4)) == 10


def test_abi_tag_names_version_backend_and_isa():
    # include/biaffine/abi.hpp: v<major>_<minor>_<patch>_<backend>_<isa>.
    m = re.fullmatch(r"v(\d+)_(\d+)_(\d+)_(eigen|avx2kernel|blas)_([a-z0-9]+)", biaffine.abi_tag)
    assert m, biaffine.abi_tag
    assert ".".join(m.group(1, 2, 3)) == biaffine.__version__


def test_an_old_pybind11_build_refuses_numpy_2(tmp_path):
    # pybind11 < 2.12 reads numpy 2's arrays wrongly without an error: such a
    # build must refuse to import under numpy 2 (a stand-in numpy 2.0.0 here,
    # found first on the path) rather than give wrong numbers.
    built = tuple(int(x) for x in biaffine.info()["pybind11"].split(".")[:2])
    fake = tmp_path / "numpy"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "2.0.0"\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + [p for p in sys.path if p])
    r = subprocess.run([sys.executable, "-c", "import biaffine"], env=env, capture_output=True, text=True)
    if built < (2, 12):
        assert r.returncode != 0, r.stderr
        assert "does not support numpy 2, and numpy 2.0.0 is imported" in r.stderr, r.stderr
    else:
        assert "does not support numpy 2" not in r.stderr, r.stderr
