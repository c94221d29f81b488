"""spaCy architectures on the biaffine C++ scorer, no PyTorch needed.

``biaffine.PairwiseBilinear.v1`` and ``biaffine.Bilinear.v1`` take the
arguments of spacy-experimental's ``spacy-experimental.PairwiseBilinear.v1``
and ``spacy-experimental.Bilinear.v1`` and return models with the same input
and output, shaped for the components of spacy-experimental 0.6.4
(``experimental_arc_predicter``, ``experimental_arc_labeler``; the version
that installs beside spaCy 3.7):

- ``build_pairwise_bilinear``: ``(List[Doc], Ints1d split lengths)`` in (the
  lengths of every split of every doc, in order), ``Floats2d [N, L]`` out: row
  i holds token i's scores over the heads of its split, ``L`` the longest
  split, columns past a split's length padding (-10000 in prediction, 0 in
  training). Training outputs the softmax over the heads, prediction logits,
  as spaCy's. The scores are computed split by split under a byte budget;
  only the ``[N, L]`` matrix the component reads is built (PR 45's
  ``List[Floats2d]`` interface of spacy-biaffine-parser is
  ``biaffine.thinc.with_splits`` instead).
- ``build_bilinear``: ``(List[Doc], Ints1d heads)`` in (``heads[i]`` the
  batch-wide index of token i's head), ``Floats2d [N, nO]`` out.

Extra arguments: ``budget_megabytes`` (the C++ batcher's byte budget per
batch, MiB, float), ``threads`` (prediction) and ``precision`` ("fp32", or
"bf16": prediction on bf16 operands with fp32 sums, on AMX tiles where the
wheel's amxbf16 variant runs; training in mixed precision: bf16 products,
float32 weights and gradients). ``mixed_precision`` and
``grad_scaler`` are accepted for config compatibility; they configure
PyTorch's automatic mixed precision, which does not exist here (the scorer
computes in float32 on the CPU), so setting them warns and changes nothing.

spaCy is never imported here: the functions only build Thinc models. They
are declared as entry points of the ``spacy_architectures`` group (spaCy
finds them when it reads a config), and registered in spaCy's
``architectures`` registry when this module is imported and spaCy is
installed (for a build without the entry points: ``spacy train --code``
a file that imports ``biaffine.spacy_architectures``).
"""
import importlib.util
import warnings
from typing import Any, List, Optional, Tuple

import numpy as np
from thinc.api import Model, chain, list2array, with_getitem
from thinc.types import Floats2d, Ints1d

import biaffine as _b

from . import thinc as _bt

PAIRWISE_NAME = "biaffine.PairwiseBilinear.v1"
BILINEAR_NAME = "biaffine.Bilinear.v1"


def _budget(budget_megabytes: Optional[float]):
    return None if budget_megabytes is None else _b.budget.megabytes(budget_megabytes)


def _no_mixed_precision(name: str, mixed_precision: bool, grad_scaler: Any) -> None:
    if mixed_precision or grad_scaler is not None:
        warnings.warn(f"{name}: mixed_precision and grad_scaler configure PyTorch's automatic mixed precision; "
                      "this model computes in float32 without PyTorch, so they have no effect", UserWarning,
                      stacklevel=3)


def _nI_of(tok2vec: Model) -> Optional[int]:
    return tok2vec.get_dim("nO") if tok2vec.has_dim("nO") is True else None


def build_pairwise_bilinear(
    tok2vec: Model,
    nO: Optional[int] = None,
    *,
    dropout: float = 0.1,
    hidden_width: int = 128,
    mixed_precision: bool = False,
    grad_scaler: Optional[Any] = None,
    budget_megabytes: Optional[float] = 16.0,
    threads: int = 1,
    precision: str = "fp32",
) -> Model[Tuple[List[Any], Ints1d], Floats2d]:
    """Arc scores for spacy-experimental 0.6.4's ``experimental_arc_predicter``
    (see the module docstring): ``(docs, split lengths) -> Floats2d [N, L]``.
    ``nO`` is 1 (one arc score per head; None means 1). The scorer is the
    model's ref ``"pairwise_bilinear"``, as spaCy's."""
    _no_mixed_precision(PAIRWISE_NAME, mixed_precision, grad_scaler)
    if nO not in (None, 1):  # the arc predicter takes one [N, L] matrix: one score per head
        raise ValueError(f"{PAIRWISE_NAME}: nO must be 1 (or None), got {nO!r}")
    pairwise = _bt._scorer_model(
        "pairwise_bilinear", _pairwise_forward, _pairwise_init, 1, _nI_of(tok2vec),
        hidden_width=hidden_width, dropout=dropout, bias_u=True, bias_v=True, seed=0, dtype="float32",
        recompute_in_backward=False, train_outputs="probabilities", budget=_budget(budget_megabytes),
        threads=threads, precision=precision)
    model = chain(with_getitem(0, chain(tok2vec, list2array())), pairwise)
    model.set_ref("pairwise_bilinear", pairwise)
    return model


def build_bilinear(
    tok2vec: Model,
    nO: Optional[int] = None,
    *,
    dropout: float = 0.1,
    hidden_width: int = 128,
    mixed_precision: bool = False,
    grad_scaler: Optional[Any] = None,
    budget_megabytes: Optional[float] = 16.0,
    threads: int = 1,
    precision: str = "fp32",
) -> Model[Tuple[List[Any], Ints1d], Floats2d]:
    """Label scores at given heads for ``experimental_arc_labeler``:
    ``(docs, heads) -> Floats2d [N, nO]`` (``nO`` inferred from the labels at
    initialization). The label model (``biaffine.thinc.BiaffineLabeler``) is
    the model's ref ``"bilinear"``, as spaCy's."""
    _no_mixed_precision(BILINEAR_NAME, mixed_precision, grad_scaler)
    bilinear = _bt.BiaffineLabeler(nO, _nI_of(tok2vec), hidden_width=hidden_width, dropout=dropout,
                                   budget=_budget(budget_megabytes), threads=threads, precision=precision)
    model = chain(with_getitem(0, chain(tok2vec, list2array())), bilinear)
    model.set_ref("bilinear", bilinear)
    return model


def _pairwise_init(model: Model, X=None, Y=None) -> None:
    if X is not None and model.has_dim("nI") is None:
        model.set_dim("nI", int(X[0].shape[1]))
    _bt.get_scorer(model)


def _pairwise_forward(model: Model, X_lengths, is_train: bool):
    X, lengths = X_lengths
    s = _bt.get_scorer(model)
    X = _bt._contiguous(X, s, "pairwise_bilinear: X")
    lens = [int(n) for n in lengths]
    if sum(lens) != X.shape[0]:
        raise _b.ShapeError(f"pairwise_bilinear: split lengths sum to {sum(lens)} but X has {X.shape[0]} rows")
    L = max(lens, default=0)
    kw = _bt._run_kw(model)
    if not is_train:
        Y = s.predict([X], [lens], **kw)
        return _flat(Y, lens, L, -10000.0, s.dtype), _bt._no_backprop
    Y, bp = s.forward([X], [lens], train=True, **kw)
    out = _flat(Y, lens, L, 0.0, s.dtype)

    def backprop(dY: Floats2d):
        if dY.shape != out.shape:
            raise _b.ShapeError(f"pairwise_bilinear backprop: dY must be {list(out.shape)}, got {list(dY.shape)}")
        dYs, off = [], 0
        for n in lens:
            dYs.append(np.ascontiguousarray(dY[off:off + n, :n], dtype=s.dtype))
            off += n
        _bt._grads_to_scorer(model, s)
        return bp(dYs)[0], lengths

    return out, backprop


def _flat(Y, lens, L, pad, dtype):
    """Per-split [n, n] scores as one [N, L] matrix, padding past each split."""
    out = np.full((sum(lens), L), pad, dtype=dtype)
    off = 0
    for y, n in zip(Y, lens):
        out[off:off + n, :n] = y
        off += n
    return out


def _register() -> bool:
    """Registers both builders in spaCy's ``architectures`` registry when
    spaCy is installed, without importing it (the registry is catalogue's
    ``("spacy", "architectures")`` namespace, which spaCy reads)."""
    if importlib.util.find_spec("spacy") is None:
        return False
    import catalogue

    architectures = catalogue.Registry(("spacy", "architectures"), entry_points=True)
    architectures.register(PAIRWISE_NAME, func=build_pairwise_bilinear)
    architectures.register(BILINEAR_NAME, func=build_bilinear)
    return True


REGISTERED = _register()

__all__ = ["build_pairwise_bilinear", "build_bilinear", "PAIRWISE_NAME", "BILINEAR_NAME", "REGISTERED"]
