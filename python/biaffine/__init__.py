"""biaffine: split-batched biaffine scoring with bounded peak memory.

The C++ pipeline on numpy arrays (see docs/api.md, "Python"):

    import numpy as np, biaffine
    scorer = biaffine.biaffine_scorer(n_in=64, hidden=32, dtype="float32")
    docs = [np.random.rand(7, 64).astype(np.float32)]
    scores = scorer.predict(docs, [[4, 3]], budget=biaffine.budget.megabytes(16))

Thinc layers are in ``biaffine.thinc``. ``biaffine.info()`` (or
``python -m biaffine``) says which ISA variant of the C++ extension runs and
what runs each operation; ``BIAFFINE_ISA=avx2`` forces a narrower variant.
"""
from . import _loader

# Registers the ISA variant this CPU runs as biaffine._biaffine.
_loader.load(__name__)
from ._loader import ISAError, info  # noqa: E402,F401
from ._biaffine import (  # noqa: E402,F401
    __version__,
    abi_tag,
    Error,
    ShapeError,
    LengthError,
    BudgetError,
    OverflowError,
    BackpropError,
    HeadError,
    budget,
    biaffine_scorer_float32,
    biaffine_scorer_float64,
    mst_heads,
    argmax_heads,
    eisner_heads,
    labels_at_heads,
    cross_entropy_heads,
    cross_entropy_labels,
    tree_log_partition,
    tree_marginals,
    tree_crf_loss,
    mbr_heads,
    is_tree,
    lazy_split,
    cap_split_lengths,
    minibatch_by_padded_size,
    pairwise_bilinear,
    pairwise_bilinear_backward,
    memory_stats,
    reset_peak,
    set_limit,
    limit,
    format_bytes,
    memory_log,
    memory_checkpoint,
)

_SCORERS = {"float32": biaffine_scorer_float32, "float64": biaffine_scorer_float64}


def biaffine_scorer(n_in, hidden=128, labels=1, *, bias_u=True, bias_v=True, dropout=0.0, seed=0,
                    dtype="float32", recompute_in_backward=False, train_outputs="probabilities", precision="fp32"):
    """A biaffine scorer (C++ ``biaffine_scorer<float>`` or ``<double>``).

    ``n_in`` input width, ``hidden`` projection width h, ``labels`` o (1: arc
    scores ``[n, n]``, else ``[n, n, o]``). ``dtype`` is "float32" or
    "float64" (or the numpy dtype); inputs must then be C-contiguous arrays of
    exactly that dtype. ``train_outputs`` is what a training forward returns:
    "probabilities" (softmax over the last axis, the reference's) or "logits"
    (for cross_entropy_heads / cross_entropy_labels). ``precision="bf16"``
    (float32 only) runs inference (predict*, the padded calls) on bf16
    operands with fp32 sums and fp32 outputs: AMX tiles on the amxbf16
    variant, else emulated (``info()["backends"]["float32"]["bf16"]`` says
    which); training forwards run the batch-wide products (projections,
    ``U W'``, their backward) on bf16 operands too, with float32 master
    weights, gradients and per-split products (mixed precision). Returns a
    ``biaffine_scorer_float32`` or ``biaffine_scorer_float64``.
    """
    import numpy as np

    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = str(dtype)
    if key not in _SCORERS:
        raise TypeError(f"biaffine_scorer: dtype must be float32 or float64, got {dtype!r}")
    return _SCORERS[key](n_in, hidden, labels, bias_u, bias_v, dropout, seed, recompute_in_backward, train_outputs,
                         precision)


def bfloat16_to_float32(a):
    """bfloat16 values as float32, exactly (bfloat16 is float32's upper half).

    ``a``: a uint16 array of the bits (``predict(..., output="bfloat16_bits")``)
    or an ``ml_dtypes.bfloat16`` array (``output="bfloat16"``). Returns a new
    float32 array of the same shape.
    """
    import numpy as np

    a = np.asarray(a)
    if a.dtype != np.uint16 and not (a.dtype.itemsize == 2 and a.dtype.name == "bfloat16"):
        raise TypeError(f"bfloat16_to_float32: expected uint16 bits or ml_dtypes.bfloat16, got dtype {a.dtype}")
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16_bits(a):
    """float32 values rounded to bfloat16 (nearest, ties to even; NaN stays a
    quiet NaN), as a uint16 array of the bits: what the scorer's
    ``output="bfloat16_bits"`` holds. ``.view(ml_dtypes.bfloat16)`` reads it
    as ml_dtypes' bfloat16 without copying."""
    import numpy as np

    x = np.asarray(a)
    if x.dtype != np.float32:
        raise TypeError(f"float32_to_bfloat16_bits: expected float32, got dtype {x.dtype}")
    u = np.ascontiguousarray(x).view(np.uint32)
    out = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return out.reshape(x.shape)


__all__ = [
    "biaffine_scorer", "bfloat16_to_float32", "float32_to_bfloat16_bits", "biaffine_scorer_float32", "biaffine_scorer_float64", "budget",
    "Error", "ShapeError", "LengthError", "BudgetError", "BackpropError", "HeadError",
    "mst_heads", "argmax_heads", "eisner_heads", "labels_at_heads", "cross_entropy_heads", "cross_entropy_labels",
    "tree_log_partition", "tree_marginals", "tree_crf_loss", "mbr_heads",
    "is_tree", "lazy_split", "cap_split_lengths", "minibatch_by_padded_size",
    "pairwise_bilinear", "pairwise_bilinear_backward",
    "memory_stats", "reset_peak", "set_limit", "limit", "format_bytes", "memory_log", "memory_checkpoint",
]
__all__ += ["info", "ISAError", "abi_tag"]
