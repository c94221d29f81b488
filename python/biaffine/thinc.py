"""Thinc 8 layers over the biaffine C++ pipeline.

``BiaffineScorer`` is a Thinc ``Model`` whose five weights are Thinc params;
``with_splits``, ``with_minibatch_by_padded_size`` and
``with_pad_seq_unpad_matrix`` take the arguments and the input / output types
of spaCy-experimental's layers of the same names, so they can be swapped in::

    from thinc.api import chain, Relu, with_getitem, Adam
    from biaffine.thinc import BiaffineScorer, with_splits, with_minibatch_by_padded_size
    import biaffine

    scorer = BiaffineScorer(nO=1, hidden_width=64)
    model = chain(
        with_getitem(0, Relu(nO=64)),     # (List[Floats2d], List[Ints1d]) in
        with_splits(with_minibatch_by_padded_size(scorer, size=biaffine.budget.megabytes(16))),
    )                                     # List[Floats2d] out: one [n, n] per split

``TreeCRFLoss`` is the tree CRF loss of the scorer's arc logits as a Thinc
loss (``d_Y, loss = TreeCRFLoss(projective=False)(Y, gold_heads)``, gold
``-1`` unknown); ``biaffine.cross_entropy_heads`` is the local one.

``BiaffineLabeler`` is the label model over given heads, with the input and
output of spaCy-experimental's ``Bilinear`` (``(Floats2d [N, nI], Ints1d
heads [N]) -> Floats2d [N, nO]``), its weights Thinc params as well.

Thinc names match spaCy-experimental's: ``with_splits`` is ``"splits"``,
``with_pad_seq_unpad_matrix`` ``"with_pad_seq_unpad_bilinear"``,
``with_minibatch_by_padded_size`` keeps its name, ``BiaffineLabeler`` is
``"bilinear"``. Their type aliases (``InT``, ``OutT``, ``InnerInT``,
``InnerOutT``, ``SizedInT``) are in the modules of spaCy's names:
``biaffine.with_splits``, ``biaffine.with_pad_seq_unpad_matrix``,
``biaffine.with_minibatch_by_padded_size``.

When the layers under a ``with_splits`` (or a ``with_minibatch_by_padded_size``
/ ``with_pad_seq_unpad_matrix``) are all from this module and end in a
``BiaffineScorer``, the whole stack runs as one C++ call (batching under the
byte or padded-items budget, padding, scoring, backward), reading the inputs
and Thinc's params in place. Around any other inner layer they work like the
spaCy-experimental layers, in Python.

Parameters: Thinc's param and gradient arrays *are* the C++ scorer's buffers
(numpy views), so ``finish_update(optimizer)`` (Thinc's optimizers update in
place) changes the weights the next call computes with, and backprop
accumulates straight into Thinc's gradients. When Thinc holds another array
for a param (``from_bytes``, ``copy``, ``use_params``), the next call builds
a scorer from the arrays Thinc holds (one copy) and registers its views.
"""
import operator
from typing import Callable, List, Optional, Tuple, Union

import numpy as np
from thinc.api import Model, deserialize_attr, serialize_attr
from thinc.loss import Loss
from thinc.types import Floats2d, Floats3d, Ints1d

import biaffine as _b

PARAM_NAMES = ("head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight")

SplitsInT = Tuple[List[Floats2d], List[Ints1d]]


class _ScorerHolder:
    """The C++ scorer behind a BiaffineScorer. Not serialized (the weights
    are Thinc params); a copied model gets an empty holder and builds its own
    scorer from its params on first use."""

    def __init__(self):
        self.scorer = None
        self.values = {}  # name -> (address, shape) of the scorer's value buffers
        self.grads = {}   # name -> (address, shape) of its gradient buffers

    def __deepcopy__(self, memo):
        return _ScorerHolder()


@serialize_attr.register(_ScorerHolder)
def _serialize_holder(_, value, name, model):
    return b""


@deserialize_attr.register(_ScorerHolder)
def _deserialize_holder(current, value, name, model):
    return current


def _address(a) -> Tuple[int, tuple, str]:
    return (a.__array_interface__["data"][0], tuple(a.shape), a.dtype.str)


def _is_buffer(a, key) -> bool:
    return (isinstance(a, np.ndarray) and a.flags["C_CONTIGUOUS"] and _address(a) == key)


# ------------------------------------------------------------------ scorer


def _scorer_model(name, forward, init, nO, nI, *, hidden_width, dropout, bias_u, bias_v, seed, dtype,
                  recompute_in_backward, train_outputs, budget=None, threads=1, precision="fp32") -> Model:
    """A Thinc model whose params are a C++ scorer's buffers (see get_scorer)."""
    if train_outputs not in ("probabilities", "logits"):
        raise ValueError(f"{name}: train_outputs must be 'probabilities' or 'logits', got {train_outputs!r}")
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"{name}: precision must be 'fp32' or 'bf16', got {precision!r}")
    if precision == "bf16" and np.dtype(dtype).name != "float32":
        raise ValueError(f"{name}: precision='bf16' needs dtype float32, got {np.dtype(dtype).name}")
    if budget is not None and not isinstance(budget, _b.budget):
        raise TypeError(f"{name}: budget must be a biaffine.budget (budget.bytes(n), budget.megabytes(mb) or "
                        f"budget.items(n)) or None, got {type(budget).__name__}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{name}: threads must be an integer of at least 1, got {threads!r}")
    return Model(
        name,
        forward,
        init=init,
        dims={"nI": nI, "nO": nO},
        params={n: None for n in PARAM_NAMES},
        attrs={
            "hidden_width": hidden_width,
            "dropout_rate": dropout,
            "bias_u": bias_u,
            "bias_v": bias_v,
            "seed": seed,
            "dtype": np.dtype(dtype).name,
            "recompute_in_backward": recompute_in_backward,
            "train_outputs": train_outputs,
            "precision": precision,
            # A budget as plain values (Thinc serializes attrs with msgpack).
            "budget_kind": None if budget is None else budget.kind,
            "budget_value": None if budget is None else int(budget.value),
            "threads": int(threads),
            "_biaffine": _ScorerHolder(),
        },
    )


def _run_kw(model: Model) -> dict:
    """The C++ call's budget and threads from a scorer model's attrs."""
    kind, value = model.attrs.get("budget_kind"), model.attrs.get("budget_value")
    b = None if kind is None else (_b.budget.bytes(value) if kind == "bytes" else _b.budget.items(value))
    return {"budget": b, "threads": model.attrs.get("threads", 1)}


def BiaffineScorer(
    nO: Optional[int] = 1,
    nI: Optional[int] = None,
    *,
    hidden_width: int = 128,
    dropout: float = 0.0,
    bias_u: bool = True,
    bias_v: bool = True,
    seed: int = 0,
    dtype: str = "float32",
    recompute_in_backward: bool = False,
    train_outputs: str = "probabilities",
    precision: str = "fp32",
) -> Model:
    """The biaffine scorer as a Thinc layer: ``nI`` input width (inferred at
    initialization), ``nO`` labels (1: ``[n, n]`` arc scores, else
    ``[n, n, nO]``), ``hidden_width`` the projection width.

    Input either a list of splits ``List[Floats2d]`` (output one score array
    per split) or, like the seed's ``pairwise_bilinear``, a padded batch
    ``(Floats3d [b, L, nI], Ints1d lengths)`` (output ``[b, L, L(, nO)]``).
    Training (``is_train=True``) outputs the softmax over the last axis, as
    the reference does (``train_outputs="probabilities"``), or the logits
    (``"logits"``, for ``biaffine.cross_entropy_heads``); prediction outputs
    logits. ``precision="bf16"`` (float32) predicts on bf16 operands with
    fp32 sums (see ``biaffine.biaffine_scorer``), and trains in mixed
    precision (bf16 products, float32 weights and gradients).
    """
    return _scorer_model("biaffine_scorer", _scorer_forward, _scorer_init, nO, nI, hidden_width=hidden_width,
                         dropout=dropout, bias_u=bias_u, bias_v=bias_v, seed=seed, dtype=dtype,
                         recompute_in_backward=recompute_in_backward, train_outputs=train_outputs,
                         precision=precision)


def BiaffineLabeler(
    nO: Optional[int] = None,
    nI: Optional[int] = None,
    *,
    hidden_width: int = 128,
    dropout: float = 0.0,
    bias_u: bool = True,
    bias_v: bool = True,
    seed: int = 0,
    dtype: str = "float32",
    recompute_in_backward: bool = False,
    train_outputs: str = "probabilities",
    budget: Optional["_b.budget"] = None,
    threads: int = 1,
    precision: str = "fp32",
) -> Model[Tuple[Floats2d, Ints1d], Floats2d]:
    """Labels at given heads as a Thinc layer, in place of spaCy-experimental's
    ``Bilinear`` (Thinc name ``"bilinear"``): ``(X [N, nI], heads [N])`` in,
    ``heads[i]`` the row of X that is token i's head (any row of the batch),
    ``[N, nO]`` label scores out: ``Y[i] = [head_i, 1] W [dep_i, 1]`` with
    ``head = relu(X Wh^T + bh)``, ``dep = relu(X Wd^T + bd)``. Training
    outputs the softmax over the labels (``train_outputs="probabilities"``,
    as spaCy's) or the logits (``"logits"``, for
    ``biaffine.cross_entropy_labels``); prediction outputs logits. The
    backprop takes ``dY [N, nO]`` and returns ``(dX [N, nI], heads)``. No
    ``[N, N, nO]`` block is ever built: O(N nO h^2) FLOPs. ``nI`` is inferred
    from X and ``nO`` from Y at initialization. ``budget`` (a
    ``biaffine.budget`` or None: one call) and ``threads`` (prediction) are
    passed to the C++ batcher; ``precision="bf16"`` as BiaffineScorer's.
    """
    return _scorer_model("bilinear", _labeler_forward, _labeler_init, nO, nI, hidden_width=hidden_width,
                         dropout=dropout, bias_u=bias_u, bias_v=bias_v, seed=seed, dtype=dtype,
                         recompute_in_backward=recompute_in_backward, train_outputs=train_outputs, budget=budget,
                         threads=threads, precision=precision)


def _width(Y) -> Optional[int]:
    if Y is None:
        return None
    if isinstance(Y, (list, tuple)):
        return int(Y[0].shape[-1]) if len(Y) else None
    return int(Y.shape[-1])


def _labeler_init(model: Model, X=None, Y=None) -> None:
    if X is not None and model.has_dim("nI") is None:
        model.set_dim("nI", int(X[0].shape[1]))
    if Y is not None and model.has_dim("nO") is None and _width(Y) is not None:
        model.set_dim("nO", _width(Y))
    get_scorer(model)


def _contiguous(X, s, what):
    """X as a C-contiguous array of the scorer's dtype (a copy only if it is not one)."""
    if not isinstance(X, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array, got {type(X).__name__}")
    return np.ascontiguousarray(X, dtype=s.dtype)


def _heads_array(H, n: int, what: str) -> np.ndarray:
    H = np.asarray(H)
    if H.dtype.kind not in "iu":
        raise TypeError(f"{what}: heads must be integers, got dtype {H.dtype}")
    if H.shape != (n,):
        raise _b.HeadError(f"{what}: expected {n} heads (one per row of X), got shape {list(H.shape)}")
    return H.astype(np.int64, copy=False)


def _labeler_forward(model: Model, X_heads, is_train: bool):
    X, H = X_heads
    s = get_scorer(model)
    X = _contiguous(X, s, "bilinear: X")
    heads = _heads_array(H, X.shape[0], "bilinear")
    one = [[X.shape[0]]]
    kw = _run_kw(model)
    if not is_train:
        return s.predict_heads([X], one, [heads], **kw)[0], _no_backprop
    Y, bp = s.forward_heads([X], one, [heads], train=True, **kw)

    def backprop(dY):
        _grads_to_scorer(model, s)
        return bp([np.ascontiguousarray(dY, dtype=s.dtype)])[0], H

    return Y[0], backprop


def _scorer_init(model: Model, X=None, Y=None) -> None:
    if X is not None and model.has_dim("nI") is None:
        if isinstance(X, tuple):
            model.set_dim("nI", int(X[0].shape[2]))
        elif len(X):
            model.set_dim("nI", int(X[0].shape[1]))
    get_scorer(model)


def get_scorer(model: Model):
    """The C++ scorer of a BiaffineScorer model, with Thinc's current params
    in its buffers (built, or rebuilt from the arrays Thinc holds, when they
    are not its buffers)."""
    holder: _ScorerHolder = model.attrs["_biaffine"]
    s = holder.scorer
    if s is not None and all(
        model.has_param(n) and _is_buffer(model.get_param(n), holder.values[n]) for n in PARAM_NAMES
    ):
        return s
    if model.has_dim("nI") is not True or model.has_dim("nO") is not True:
        raise ValueError(f"{model.name}: nI and nO must be set (initialize the model with sample input)")
    a = model.attrs
    s = _b.biaffine_scorer(
        model.get_dim("nI"), a["hidden_width"], model.get_dim("nO"), bias_u=a["bias_u"], bias_v=a["bias_v"],
        dropout=a["dropout_rate"], seed=a["seed"], dtype=a["dtype"],
        recompute_in_backward=a["recompute_in_backward"], train_outputs=a.get("train_outputs", "probabilities"),
        precision=a.get("precision", "fp32"),
    )
    for name, value, grad in s.parameters():
        if model.has_param(name):
            theirs = model.get_param(name)
            if tuple(theirs.shape) != value.shape:
                raise _b.ShapeError(
                    f"set_parameter({name}): expected shape {list(value.shape)}, got {list(theirs.shape)}")
            value[...] = theirs  # the one copy: Thinc held another array
        if model.has_grad(name):
            grad[...] = model.get_grad(name)
        model.set_param(name, value)
        model.set_grad(name, grad)
        holder.values[name] = _address(value)
        holder.grads[name] = _address(grad)
    holder.scorer = s
    return s


def _grads_to_scorer(model: Model, s) -> None:
    """Before a backprop: make Thinc's gradient arrays the scorer's buffers
    again if Thinc replaced one (its values are carried over)."""
    holder: _ScorerHolder = model.attrs["_biaffine"]
    if holder.scorer is not s:
        raise RuntimeError("BiaffineScorer: the params were replaced between forward and backprop")
    for name, _, grad in s.parameters():
        if model.has_grad(name):
            theirs = model.get_grad(name)
            if _is_buffer(theirs, holder.grads[name]):
                continue
            grad[...] = theirs
        else:
            grad[...] = 0
        model.set_grad(name, grad)


def _no_backprop(dY):
    raise _b.BackpropError("backprop of a prediction (is_train=False): call the model with is_train=True")


def _scorer_forward(model: Model, X, is_train: bool):
    s = get_scorer(model)
    if isinstance(X, tuple):  # the reference's padded interface
        Xp, lengths = X
        lens = [_split_length(n, "padded lengths") for n in lengths]
        if not is_train:
            return s.predict_padded(Xp, lens), _no_backprop
        Y, bp = s.forward_padded(Xp, lens, train=True)

        def backprop_padded(dY):
            _grads_to_scorer(model, s)
            return bp(dY), lengths

        return Y, backprop_padded
    X = list(X)
    one = [[x.shape[0]] if hasattr(x, "shape") else [len(x)] for x in X]
    if not is_train:
        return s.predict(X, one, budget=None), _no_backprop
    Y, bp = s.forward(X, one, train=True, budget=None)

    def backprop(dY):
        _grads_to_scorer(model, s)
        return bp(list(dY))

    return Y, backprop


# -------------------------------------------------------------- combinators


def _fused(model: Model):
    """(scorer model, keyword arguments of the C++ call) when `model` and
    everything under it are this module's layers ending in a BiaffineScorer;
    None otherwise."""
    kw = {"budget": None, "pad_seq_unpad_matrix": False}
    node = model
    while True:
        if node._func is _scorer_forward and isinstance(node.attrs.get("_biaffine"), _ScorerHolder):
            return node, kw
        if not node.attrs.get("_biaffine_layer") or len(node.layers) != 1:
            return None
        if node.name == "with_minibatch_by_padded_size" and kw["budget"] is None and not kw["pad_seq_unpad_matrix"]:
            kw["budget"] = _budget_of(node)
            kw["threads"] = node.attrs["threads"]
            kw["buffer"] = node.attrs["buffer"]
            kw["oversize"] = node.attrs["oversize"]
        elif node.name == "with_pad_seq_unpad_bilinear" and not kw["pad_seq_unpad_matrix"]:
            kw["pad_seq_unpad_matrix"] = True
        else:
            return None
        node = node.layers[0]


def _run_fused(plan, docs, lengths, is_train):
    scorer_model, kw = plan
    s = get_scorer(scorer_model)
    if not is_train:
        return s.predict(docs, lengths, **kw), None
    Y, bp = s.forward(docs, lengths, train=True, **kw)

    def backprop(dY):
        _grads_to_scorer(scorer_model, s)
        return bp(list(dY))

    return Y, backprop


def with_splits(inner: Model) -> Model:
    """Documents ``(List[Floats2d] [n_tokens, nI], List[Ints1d] split
    lengths)`` in, one score matrix per split out (``List[Floats2d]``); the
    backprop returns ``(per-document dX, lengths)``, as the seed's does."""
    return Model("splits", _with_splits_forward, init=_with_splits_init, layers=[inner],
                 attrs={"_biaffine_layer": True})


def _split_length(n, what: str) -> int:
    # As the binding reads split lengths: True / False would be 1 / 0.
    if isinstance(n, (bool, np.bool_)) or isinstance(n, float) or not hasattr(n, "__index__"):
        raise TypeError(f"{what} must hold integers, got {type(n).__name__}")
    return operator.index(n)


def _docs_to_splits(docs, lengths):
    out = []
    for X_doc, ls in zip(docs, lengths):
        offset = 0
        for n in ls:
            n = _split_length(n, "with_splits: split lengths")
            out.append(X_doc[offset: offset + n])
            offset += n
    return out


def _with_splits_init(model: Model, X=None, Y=None) -> None:
    if X is None:
        model.layers[0].initialize(X=None, Y=Y)
    else:
        model.layers[0].initialize(X=_docs_to_splits(*X), Y=Y)


def _with_splits_forward(model: Model, X_lengths: SplitsInT, is_train: bool):
    docs, lengths = X_lengths
    docs = list(docs)
    plan = _fused(model.layers[0])
    if plan is not None:
        Y, bp = _run_fused(plan, docs, list(lengths), is_train)
        if bp is None:
            return Y, _no_backprop

        def backprop_fused(dY):
            return bp(dY), lengths

        return Y, backprop_fused
    if len(docs) != len(lengths):
        raise _b.ShapeError(f"with_splits: {len(docs)} documents but {len(lengths)} lists of split lengths")
    Y, bp_inner = model.layers[0](_docs_to_splits(docs, lengths), is_train)

    def backprop(dY):
        dX_splits = bp_inner(dY)
        out, k = [], 0
        for X_doc, ls in zip(docs, lengths):
            parts = dX_splits[k: k + len(ls)]
            k += len(ls)
            out.append(np.concatenate(parts) if len(parts) else np.zeros_like(X_doc))
        return out, lengths

    return Y, backprop


def _budget_of(model: Model):
    if model.attrs["budget_kind"] == "bytes":
        return _b.budget.bytes(model.attrs["size"])
    return _b.budget.items(model.attrs["size"])


def with_minibatch_by_padded_size(
    inner: Model,
    size: Union[int, "_b.budget"],
    buffer: int = 256,
    *,
    threads: int = 1,
    oversize: str = "run_alone",
) -> Model:
    """Batches a list of splits so that each batch stays within ``size``:
    an int counts padded items (spaCy's ``minibatch_by_padded_size`` rule),
    a ``biaffine.budget`` (e.g. ``budget.megabytes(16)``) may count bytes of
    the C++ scorer's working set. ``threads`` run prediction batches
    concurrently (C++ only); ``oversize`` is "run_alone" or "throw".
    Outputs and gradients keep input order."""
    b = size if isinstance(size, _b.budget) else _b.budget.items(size)  # a bare int: padded items, as spaCy's
    if buffer <= 0:
        raise _b.BudgetError(f"with_minibatch_by_padded_size: buffer must be positive, got {buffer}")
    return Model(
        "with_minibatch_by_padded_size",
        _minibatch_forward,
        init=_minibatch_init,
        layers=[inner],
        attrs={"size": int(b.value), "budget_kind": b.kind, "buffer": int(buffer), "threads": int(threads),
               "oversize": oversize, "_biaffine_layer": True},
    )


def _minibatch_init(model: Model, X=None, Y=None) -> None:
    model.layers[0].initialize(X=X, Y=Y)


def _as_docs(X):
    # A split list as one-split documents for the C++ pipeline.
    return list(X), [[x.shape[0]] for x in X]


def _minibatch_forward(model: Model, X, is_train: bool):
    plan = _fused(model)
    if plan is not None:
        docs, lengths = _as_docs(X)
        Y, bp = _run_fused(plan, docs, lengths, is_train)
        return Y, (bp if bp is not None else _no_backprop)
    if model.attrs["budget_kind"] != "items":
        raise _b.BudgetError("with_minibatch_by_padded_size: a byte budget needs a BiaffineScorer under it "
                             "(its working set is what the bytes count); use an int size for other layers")
    inner = model.layers[0]
    batches = _b.minibatch_by_padded_size([len(x) for x in X], model.attrs["size"], model.attrs["buffer"])
    Y = [None] * len(X)
    backprops = []
    for batch in batches:
        Yb, bp = inner([X[i] for i in batch], is_train)
        backprops.append(bp)
        for i, y in zip(batch, Yb):
            Y[i] = y

    def backprop(dY):
        dX = [None] * len(X)
        for batch, bp in zip(batches, backprops):
            for i, dx in zip(batch, bp([dY[i] for i in batch])):
                dX[i] = dx
        return dX

    return Y, backprop


def with_pad_seq_unpad_matrix(inner: Model) -> Model:
    """Pads a list of splits to ``(Floats3d [b, L, nI], Ints1d lengths)`` for
    ``inner`` and unpads its ``[b, L, L(, o)]`` output in two dimensions, like
    the seed's layer (the reference-compatible path)."""
    return Model("with_pad_seq_unpad_bilinear", _pad_forward, init=_pad_init, layers=[inner],
                 attrs={"_biaffine_layer": True})


def _pad(X):
    lengths = np.asarray([len(x) for x in X], dtype="int32")
    L = int(lengths.max()) if len(X) else 0
    width = X[0].shape[1] if len(X) else 0
    out = np.zeros((len(X), L, width), dtype=X[0].dtype if len(X) else "float32")
    for i, x in enumerate(X):
        out[i, : len(x)] = x
    return out, lengths


def _pad_init(model: Model, X=None, Y=None) -> None:
    model.layers[0].initialize(X=_pad(X) if X is not None else None, Y=Y)


def _pad_forward(model: Model, X, is_train: bool):
    plan = _fused(model)
    if plan is not None:
        docs, lengths = _as_docs(X)
        Y, bp = _run_fused(plan, docs, lengths, is_train)
        return Y, (bp if bp is not None else _no_backprop)
    if not len(X):
        return [], lambda dY: []
    Xp, lengths = _pad(X)
    Yp, bp_inner = model.layers[0]((Xp, lengths), is_train)
    Y = [Yp[i, :n, :n] for i, n in enumerate(lengths)]

    def backprop(dY):
        dYp = np.zeros_like(Yp)
        for i, n in enumerate(lengths):
            dYp[i, :n, :n] = dY[i]
        dXp, _ = bp_inner(dYp)
        return [dXp[i, :n] for i, n in enumerate(lengths)]

    return Y, backprop


# -------------------------------------------------------------------- losses


class TreeCRFLoss(Loss):
    """The first-order tree CRF loss of a ``BiaffineScorer``'s arc logits, Thinc's way:
    ``d_guesses, loss = TreeCRFLoss(projective=False)(guesses, truths)``.

    ``guesses`` is the scorer's training output with ``train_outputs="logits"``
    (one ``[n, n]`` array per split: rows dependents, columns heads, the
    diagonal the root), ``truths`` one gold head array per split (split-relative,
    the root pointing at itself, ``-1`` for an unknown head: partial
    annotation). The loss is ``log Z - log Z(trees agreeing with the known
    heads)`` summed over the splits, its gradient the arc marginals minus the
    constrained ones (``biaffine.tree_crf_loss``); ``projective`` sums over
    Eisner's trees instead of all spanning trees. ``normalize`` (default)
    divides both by the number of tokens. Bad gold (a cycle, two roots, a
    head out of range, a non-projective gold tree under ``projective=True``)
    raises ``biaffine.HeadError`` / ``LengthError`` naming the split and token.
    The guesses must be logits: probabilities would train a wrong model
    without an error.
    """

    def __init__(self, *, projective: bool = False, normalize: bool = True):
        if not isinstance(projective, (bool, np.bool_)):
            raise TypeError(f"TreeCRFLoss: projective must be True or False, got {type(projective).__name__}")
        self.projective = bool(projective)
        self.normalize = normalize

    def __call__(self, guesses: List[Floats2d], truths: List[Ints1d]) -> Tuple[List[Floats2d], float]:
        guesses = list(guesses)
        tokens = sum(int(g.shape[0]) for g in guesses)
        scale = 1.0 / tokens if self.normalize and tokens else 1.0
        loss, d = _b.tree_crf_loss(guesses, list(truths), scale, projective=self.projective)
        return d, loss

    def get_grad(self, guesses: List[Floats2d], truths: List[Ints1d]) -> List[Floats2d]:
        return self(guesses, truths)[0]

    def get_loss(self, guesses: List[Floats2d], truths: List[Ints1d]) -> float:
        return self(guesses, truths)[1]


__all__ = ["BiaffineScorer", "BiaffineLabeler", "with_splits", "with_minibatch_by_padded_size",
           "with_pad_seq_unpad_matrix",
           "TreeCRFLoss", "get_scorer", "PARAM_NAMES"]
