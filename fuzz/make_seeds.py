#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/<name> (deterministic).

Each seed is a readable starting point in the byte format its target decodes
(see the decode functions in fuzz/*.cpp); the fuzzers mutate from there.
Re-run after changing a target's input format: python3 fuzz/make_seeds.py
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u16(v):
    return list(struct.pack("<H", v))


def u32(v):
    return list(struct.pack("<I", v))


def u64(v):
    return list(struct.pack("<Q", v))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


# ---------------------------------------------------------------- batching
def batching():
    t = "fuzz_batching"
    # spaCy rule: [0, n, size kind, size..., buffer flag, (buffer), lengths...]
    write(t, "spacy_parity", [0, 4, 2] + u16(17) + [0] + [5, 6, 5, 9])  # size 18 -> [[3], [0, 1, 2]]
    write(t, "spacy_buffer_3", [0, 10, 2] + u16(39) + [1, 3] + [3, 9, 1, 4, 4, 0, 7, 2, 8, 8])
    write(t, "spacy_zero_size", [0, 3, 1, 0, 5, 6, 7])
    write(t, "spacy_huge_lengths", [0, 4, 0] + u64(2**64 - 1) + [0] + [255] + u64(2**63) + [255] + u64(2**63) + [1, 2])
    # Byte planner: [1, n, a, b, c, d(u16), items?, value kind, value..., buffer flag, (buffer),
    #                oversize flag, threads, lengths...]
    lengths = [3, 7, 0, 12, 5, 5, 1, 30]
    write(t, "bytes_basic", [1, len(lengths), 1, 10, 5] + u16(100) + [1, 2] + u16(20000) + [0, 0, 1] + lengths)
    write(t, "bytes_throw_policy", [1, len(lengths), 1, 10, 5] + u16(100) + [1, 2] + u16(3000) + [0, 1, 1] + lengths)
    write(t, "bytes_buffer_2", [1, len(lengths), 2, 0, 0] + u16(0) + [1, 2] + u16(5000) + [1, 1, 0, 1] + lengths)
    write(t, "bytes_overflowing_cost", [1, 3, 16, 1, 1] + u16(1) + [1, 0] + u64(2**64 - 1) + [0, 0, 1]
          + [245] + u32(2**32 - 1) + [4, 245] + u32(2**31))
    write(t, "items_two_threads", [1, 12, 1, 1, 1] + u16(1) + [0, 2] + u16(40) + [0, 0, 0]
          + [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    write(t, "items_byte_cost_overflow", [1, 2, 16, 0, 0] + u16(0) + [0, 0] + u64(2**40) + [0, 0, 1]
          + [245] + u32(2**32 - 1) + [245] + u32(2**32 - 1))


# ---------------------------------------------------------------- pipeline
def pipeline_seed(kind=0, n_in=2, hidden=3, labels=2, bias_u=1, bias_v=0, recompute=0, seed=7, padded=0,
                  budget=("items", 8), buffer=None, throw=False, threads=1, op=0, bad_grad=False,
                  docs=((2, 0, 3), (4,)), bad_shape=None, lists=0, rng=None):
    rng = rng or random.Random(1)
    b = [kind, n_in - 1, hidden - 1, labels - 1, bias_u, bias_v, recompute, seed, padded]
    if budget[0] == "zero":
        b += [0] + u16(0) + [1]
    elif budget[0] == "items":
        b += [2, budget[1] - 1]
    else:  # bytes: 1 + u16 * (flag ? 1 : 16)
        v = budget[1] - 1
        b += [1] + (u16(v) + [1] if v < 65536 else u16(v // 16) + [0])
    b += [0] if buffer is None else [1, buffer]
    b += [0 if throw else 1, 0 if threads == 2 else 1, op, 0 if bad_grad else 1]
    b += [len(docs)]
    rows = []
    for i, ls in enumerate(docs):
        b += [len(ls)] + [l if l >= 0 else 231 + (-l) for l in ls]
        shape = 0
        if bad_shape == ("width", i):
            shape = 1
        b += [shape]
        rows.append(max(0, sum(ls)))
    b += [lists]
    n_vals = sum(rows) * n_in
    b += [rng.randrange(0, 256) if rng.random() < 0.5 else rng.randrange(0, 40) for _ in range(n_vals)]
    b += [rng.randrange(0, 256) for _ in range(200)]  # score gradients
    return b


def pipeline():
    t = "fuzz_pipeline"
    write(t, "predict_items", pipeline_seed(op=0))
    write(t, "predict_stream_bytes", pipeline_seed(op=1, budget=("bytes", 30000), kind=1))
    write(t, "forward_eval_padded", pipeline_seed(op=2, padded=1, budget=("items", 5)))
    write(t, "forward_train_float", pipeline_seed(op=3, kind=2, labels=1, recompute=1, budget=("bytes", 60000),
                                                  docs=((3, 1), (), (0, 5, 2))))
    write(t, "train_bad_gradient", pipeline_seed(op=3, bad_grad=True))
    write(t, "two_threads_buffer_2", pipeline_seed(op=0, threads=2, buffer=2, docs=((1, 2, 3), (4, 5), (2,))))
    write(t, "oversize_throw", pipeline_seed(op=0, throw=True, budget=("items", 4), docs=((2, 6),)))
    write(t, "negative_length", pipeline_seed(op=0, docs=((2, -1, 3),)))
    write(t, "width_mismatch", pipeline_seed(op=0, bad_shape=("width", 0)))
    write(t, "missing_list", pipeline_seed(op=0, lists=4))
    write(t, "zero_budget", pipeline_seed(op=0, budget=("zero", 0)))
    write(t, "tiny_byte_budget", pipeline_seed(op=1, budget=("bytes", 100)))
    write(t, "empty_documents", pipeline_seed(op=3, docs=((), (0, 0), ())))


# ---------------------------------------------------------------- lazy split
def lazy_split():
    t = "fuzz_lazy_split"
    # lazy: [kind 0-2, n selector, n, max, scores...]
    write(t, "monotone_double", [1, 1, 20, 3] + list(range(20)))
    write(t, "nan_inf_ties_float", [0, 1, 14, 4, 255, 255, 1, 1, 1, 254, 253, 5, 5, 255, 0, 0, 3, 3])
    write(t, "ints_max_1", [2, 1, 9, 1, 4, 4, 2, 9, 9, 0, 1, 7, 7])
    write(t, "max_zero", [1, 1, 3, 0, 1, 2, 3])
    rng = random.Random(2)
    write(t, "long_1500", [1, 0] + u16(1500) + [7] + [rng.randrange(0, 256) for _ in range(1500)])
    # cap: [kind 3-5, count, lengths (selector, value)..., max, with_scores, ...]
    # lengths 12, 0, 7, 30, 3 (a 0 selector byte means a zero-length sentence)
    write(t, "cap_no_scores", [3, 5, 1, 12, 0, 1, 7, 1, 30, 1, 3, 5, 0])
    write(t, "cap_with_scores", [4, 3, 1, 9, 0, 1, 13, 4, 1] + [rng.randrange(0, 256) for _ in range(22)])
    write(t, "cap_wrong_size", [5, 2, 1, 5, 1, 6, 3, 2, 1, 1] + list(range(13)))


# ---------------------------------------------------------------- mst
def mst():
    t = "fuzz_mst"
    rng = random.Random(3)

    def seed(kind, n, extra_stride, cells):
        sel = [1, n] if n <= 7 else [0, n]
        return [kind] + sel + [extra_stride] + cells

    write(t, "double_4", seed(0, 4, 0, [rng.randrange(0, 32) for _ in range(16)]))
    write(t, "float_5_stride", seed(1, 5, 2, [rng.randrange(0, 32) for _ in range(25)]))
    write(t, "int_6", seed(2, 6, 1, [rng.randrange(0, 32) for _ in range(36)]))
    cells = [rng.randrange(0, 32) for _ in range(25)]
    cells[3], cells[7], cells[12] = 250, 251, 252  # -inf, +inf, -inf
    write(t, "double_5_infinities", seed(0, 5, 0, cells))
    cells = [rng.randrange(0, 32) for _ in range(9)]
    write(t, "double_3_nan", seed(0, 3, 0, cells[:4] + [255, 0] + cells[4:]))
    write(t, "double_30", seed(0, 30, 0, [rng.randrange(0, 32) for _ in range(900)]))
    write(t, "all_equal_7", seed(1, 7, 0, [16] * 49))
    write(t, "empty", seed(0, 0, 3, []))


if __name__ == "__main__":
    batching()
    pipeline()
    lazy_split()
    mst()
