// biaffine/scorer_config.hpp - the scorer's configuration: its sizes, what a
// training forward returns, its arithmetic, and the mask of padded cells.
// Apart from the scorer's class so that what only configures a scorer
// needs none of its math.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>

BIAFFINE_NAMESPACE_BEGIN

/// What a training forward returns (and its backprop takes the gradient of).
enum class train_output {
    probabilities, ///< softmax over the last axis, as the reference module (the default)
    logits         ///< the scores themselves, for a stable loss such as cross_entropy_heads()
};

/// Arithmetic of a float scorer: inference (predict, predict_stream,
/// predict_heads*, predict_padded*) and training (forward*).
enum class compute_precision {
    fp32, ///< every product in the scorer's type (the default)
    /// bf16 operands (inputs, weights, U, V, T rounded to nearest even), fp32
    /// sums, bias, ReLU and outputs: AMX tiles or VDPBF16PS where the build
    /// targets them, else emulated on the fp32 kernels (same rounding points;
    /// detail/compute/bf16_forward.hpp). Training (forward*) runs the
    /// batch-wide products (projections, U W', their backward) on bf16
    /// operands with fp32 master weights, gradients and per-split products
    /// (detail/compute/bf16_train.hpp).
    bf16
};

/// Hyper-parameters of a biaffine_scorer.
struct scorer_config {
    std::size_t n_in = 0;     ///< width of the token representations
    std::size_t hidden = 128; ///< h, width of the head / dependent projections
    std::size_t labels = 1;   ///< o, number of labels (1: arc scorer, label axis dropped)
    bool bias_u = true;       ///< append 1 to the head side
    bool bias_v = true;       ///< append 1 to the dependent side
    double dropout = 0.0;     ///< variational dropout rate in training
    std::uint64_t seed = 0;   ///< parameter initialisation and dropout masks
    /// Keep nothing but the split views between forward and backward and
    /// recompute the batch's forward in backward: a training step's extra
    /// memory is then bounded by the batch budget too, for about 1.5x the
    /// compute. Gradients are identical.
    bool recompute_in_backward = false;
    /// What forward(mode::train) returns. `probabilities` keeps a copy of
    /// them for the softmax backward (unless recomputing); with `logits`
    /// dropout still applies but nothing is normalised or kept, and a fused
    /// loss (loss.hpp) turns confident mistakes into finite gradients where
    /// `-1 / p` on an underflowed probability gives NaN.
    train_output train_outputs = train_output::probabilities;
    /// Arithmetic of inference and training (float scorers only; see compute_precision).
    compute_precision precision = compute_precision::fp32;
};

/// The mask added to head columns past a sequence's length. -10000 as in the
/// reference, clamped to what the scalar type can hold.
template <class T>
constexpr T mask_value()
{
    return std::numeric_limits<T>::lowest() / T(2) > T(-10000) ? std::numeric_limits<T>::lowest() / T(2)
                                                               : T(-10000);
}

BIAFFINE_NAMESPACE_END
