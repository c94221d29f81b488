// biaffine/tree_marginals.hpp - tree CRF arc marginals through any layer:
// the output kind tree_marginals_kind<K> (detail/tree_marginals_kind.hpp)
// by public name, and predict_marginals / predict_marginals_stream, one-line
// wrappers of a layer's predict_as / predict_stream_as of that kind.
//
// Per split, `[n, n]`: `y(m, h)` = P(head(m) = h) over the trees of K
// (tree_crf.hpp: non-projective by the Matrix-Tree theorem, projective by
// Eisner's inside-outside), each row summing to 1; computed right after the
// split's scores, with the solver's scratch in the layer's cost(), so a
// batcher keeps its byte budget and a stream stays flat. The layer's scorer
// must have 1 label (arc scores). Prediction only (train with tree_crf_loss).
#pragma once

#include "biaffine/abi.hpp"

#include <utility>

#include "biaffine/detail/tree_marginals_kind.hpp"
#include "biaffine/output_kind.hpp"
#include "biaffine/tree_crf.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// Arc marginals over the trees of K: `[n, n]` per split; no arguments.
template <tree_kind K = tree_kind::non_projective>
using tree_marginals_kind = detail::tree_marginals_kind<K>;

/// Every split's `[n, n]` arc marginals, in input order. `inputs`: what the
/// layer's predict takes before its kind's arguments - a split list (the
/// scorer, the batcher, with_pad_seq_unpad_matrix) or documents and their
/// split lengths (with_splits). Errors as tree_marginals (naming no split:
/// NaN scores, no tree of finite score, scores beyond the solver's range),
/// shape_error for a scorer of more than 1 label.
template <tree_kind K = tree_kind::non_projective, class Layer, class... Inputs>
auto predict_marginals(const Layer& layer, const Inputs&... inputs)
{
    return layer.template predict_as<tree_marginals_kind<K>>(inputs..., no_heads{});
}

/// Streaming marginals of a split list: `sink(k, score_view<const O>)` with
/// split k's `[n, n]`, as the layer's predict_stream (batch order; the view
/// is valid during the call).
template <tree_kind K = tree_kind::non_projective, class Layer, class Items, class Sink>
void predict_marginals_stream(const Layer& layer, const Items& X, Sink&& sink)
{
    layer.template predict_stream_as<tree_marginals_kind<K>>(X, no_heads{}, std::forward<Sink>(sink));
}

/// Streaming marginals of documents split by `split_lengths` (with_splits).
template <tree_kind K = tree_kind::non_projective, class Layer, class Docs, class Lengths, class Sink>
void predict_marginals_stream(const Layer& layer, const Docs& docs, const Lengths& split_lengths, Sink&& sink)
{
    layer.template predict_stream_as<tree_marginals_kind<K>>(docs, split_lengths, no_heads{},
                                                             std::forward<Sink>(sink));
}

BIAFFINE_NAMESPACE_END
