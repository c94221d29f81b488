// biaffine/detail/tree_marginals_kind.hpp - the third output kind: per split
// the `[n, n]` arc marginals P(head(m) = h) of a first-order tree CRF on the
// split's arc scores (tree_crf.hpp), computed while the scores are in cache.
//
// The kind is the full-scores kind (same layout, views, padding, copies)
// with another product: the backend's split_scores, then the tree solver in
// place of a softmax - Matrix-Tree (tree_kind::non_projective) or Eisner's
// inside-outside (tree_kind::projective). The solver's working memory is
// workspace scratch the kind carves per split and reports through
// product_scratch_bytes, so the scorer's cost() and every batcher's byte
// budget hold it. Prediction only: train with tree_crf_loss on the full
// scores' logits; a forward of this kind runs, its backward throws error.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/kind_support.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/mode.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/tree_crf.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Arc marginals of the trees of `K`: split k's `[n, n]`, `y(m, h)` =
/// P(head(m) = h), the diagonal P(m is the root), each row summing to 1.
/// Needs a scorer of one label (arc scores).
template <tree_kind K>
struct tree_marginals_kind : full_scores_kind, kind_layer_calls<tree_marginals_kind<K>> {
    static constexpr tree_kind trees = K;
    static constexpr const char* grad_name = "tree marginals";
    static constexpr const char* output_name = "split tree marginals";
    static constexpr const char* saved_name = "saved tree marginals";

    /// Doubles one split of n tokens carves: its scores and marginals in
    /// double (`[n, n]` each) and the solver's working memory.
    static std::size_t cells(std::size_t n)
    {
        // Checked first: the solver's sizes are a few n * n, unchecked.
        to_index_size(checked_product("tree marginals scratch", n, n, 32, sizeof(double)), "tree marginals scratch");
        return 2 * n * n + tree_solver_cells(K, n);
    }
    /// The solver's scratch for splits of up to max_len tokens (the scorer's
    /// cost counts it, kind_product_scratch_bytes).
    static std::uint64_t product_scratch_bytes(std::size_t max_len, std::size_t /*o*/)
    {
        return max_len == 0 ? 0 : scratch_bytes<double>(cells(max_len));
    }

    /// Split's scores by the backend's product, then its marginals in place.
    template <class Ops, class VA, class T>
    static void product(const VA& va, const T* t, const std::size_t* /*rows*/, std::size_t o, view<T> y, T* packed)
    {
        check_labels(o);
        Ops::split_scores(va, t, o, y, packed);
        normalise(y);
    }
    /// bf16 inference: the same from the split's bf16 rows of V and T.
    template <class F, class Dims, class D, class Args>
    static void bf16_product(const Dims& d, const D* vb, const D* tb, const Args&, std::size_t /*k*/,
                             std::size_t* /*rows*/, float* packed, view<float> y)
    {
        check_labels(y.labels);
        F::split_scores(d, vb, tb, packed, y);
        normalise(y);
    }
    /// Padded cells of a padded output `[b, L, L]` set to 0, whatever the
    /// layer's pad (a masked logit for scores): no probability of an arc to
    /// or from padding.
    template <class O, class Views>
    static void fill_padding(score_array<O>& y, const Views& views, O /*pad*/)
    {
        full_scores_kind::fill_padding(y, views, O(0));
    }
    /// The marginals are normalised by the product already (a training
    /// forward's softmax step would find them so).
    template <class T>
    static void softmax(view<T>)
    {
    }
    template <class T>
    [[noreturn]] static void softmax_backward(view<const T>, view<const T>, view<T>)
    {
        throw_prediction_only();
    }
    template <class Ops, class VA, class T, class DVA>
    [[noreturn]] static void product_backward(const VA&, const T*, const std::size_t*, std::size_t, view<const T>,
                                              DVA&&, T*, T*)
    {
        throw_prediction_only();
    }

    // ---- the layer calls: each layer's `*_as` members. A forward runs (it
    // predicts); its backward throws.

    using calls = kind_layer_calls<tree_marginals_kind<K>>;
    using calls::cost;
    using calls::forward;
    using calls::forward_padded;
    using calls::padded_cost;
    using calls::predict;
    using calls::predict_padded;
    using calls::predict_stream;
    using calls::predict_stream_into;

private:
    [[noreturn]] static void throw_prediction_only()
    {
        throw error(msg("tree marginals (", tree_kind_name(K),
                        "): prediction only, no backward through the tree solver; train with tree_crf_loss on the "
                        "full scores' logits (forward of full_scores_kind)"));
    }
    static void check_labels(std::size_t o)
    {
        if (o != 1) {
            throw shape_error(msg("tree marginals: need arc scores (a scorer of 1 label), this scorer has ", o,
                                  " labels"));
        }
    }
    /// y's scores -> their marginals, through double scratch carved from the
    /// workspace (NaN, +inf and scores without a finite tree throw as
    /// tree_marginals).
    template <class T>
    static void normalise(view<T> y)
    {
        constexpr const char* where = "tree marginals";
        const std::size_t n = y.n;
        if (n == 0) return;
        scratch<double> work(cells(n));
        double* S = work.data();
        double* mu = S + n * n;
        tree_crf_load(read_only(y), S, where);
        if (tree_crf_solve(K, n, S, mu, where, mu + n * n) == -std::numeric_limits<double>::infinity()) {
            throw_no_tree(K, where);
        }
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t h = 0; h < n; ++h) y(m, h) = static_cast<T>(mu[m * n + h]);
        }
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
