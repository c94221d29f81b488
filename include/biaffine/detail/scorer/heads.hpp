// biaffine/detail/scorer/heads.hpp - the scorer's labels at given heads: per
// split, `L[m, o] = S[m, head[m], o]` without the `[n, n, o]` scores.
//
// The projections and T = U W' run on the packed rows as for full scores
// (same dropout masks from the same seed draw); then each dependent m takes
// the row of T at its head, viewed `[o, hv]`, times its own V row: O(n o hv)
// per split where the full scores cost O(n^2 o hv). Backward scatters dy
// into dT at the head rows. The path itself is the full scores' one, with
// the labels_at_heads_kind policy (scorer/forward.hpp, output_kind.hpp);
// this file holds the public calls, the cost and the head lists.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
// ------------------------------------------------------------ public calls

template <class T, class Backend, class Out>
template <class Items, class Heads>
score_list<Out> biaffine_scorer<T, Backend, Out>::predict_heads(const Items& X, const Heads& H) const
{
    score_list<Out> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(score_tensor<Out>::from_shape(heads_shape(X[k].rows)));
    predict_into<detail::labels_at_heads_kind>(
        X, H, [&](std::size_t k, std::size_t n) { return detail::dense_rows(Y[k].data(), n, cfg_.labels); },
        [](std::size_t, seq_view<Out>) {});
    return Y;
}

template <class T, class Backend, class Out>
template <class Items, class Heads, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const
{
    scratch<Out> s(detail::packed_count<Out>("stream", detail::max_item_rows(X), cfg_.labels));
    predict_heads_stream_into(X, H, [&](std::size_t, std::size_t) { return s.data(); }, sink);
}

template <class T, class Backend, class Out>
template <class Items, class Heads, class Dest, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_heads_stream_into(const Items& X, const Heads& H, Dest&& dest,
                                                                 Sink&& sink) const
{
    stream_into<detail::labels_at_heads_kind>(X, H, dest, sink);
}

template <class T, class Backend, class Out>
template <class Items, class Heads>
std::pair<score_list<Out>, typename biaffine_scorer<T, Backend, Out>::heads_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_heads(const Items& X, const Heads& H, mode m)
{
    score_list<Out> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(score_tensor<Out>::from_shape(heads_shape(X[k].rows)));
    heads_backprop_type bp = forward_into<detail::labels_at_heads_kind>(
        X, H, m, [&](std::size_t k, std::size_t n) { return detail::dense_rows(Y[k].data(), n, cfg_.labels); });
    return {std::move(Y), std::move(bp)};
}

template <class T, class Backend, class Out>
template <class X3, class Lengths, class Heads2>
score_array<Out> biaffine_scorer<T, Backend, Out>::predict_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads) const
{
    const auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto lists = padded_head_lists(x, lengths, heads, flat);
    return predict_padded_kind<detail::labels_at_heads_kind>(views, lists, x.shape()[1]);
}

template <class T, class Backend, class Out>
template <class X3, class Lengths, class Heads2>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads, mode m)
{
    const auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto lists = padded_head_lists(x, lengths, heads, flat);
    return forward_padded_kind<detail::labels_at_heads_kind>(views, lists, x.shape()[1], m);
}

// ------------------------------------------------------------------ costs

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::heads_cost(std::size_t count, std::size_t max_len, mode m) const
{
    return kind_cost<detail::labels_at_heads_kind>(count, max_len, m);
}

template <class T, class Backend, class Out>
batch_cost biaffine_scorer<T, Backend, Out>::padded_heads_cost(std::size_t count, std::size_t max_len, mode m) const
{
    // The padded heads are copied flat (int64) and listed per sequence.
    batch_cost c = heads_cost(count, max_len, m);
    const char* what = "batch cost";
    const std::uint64_t lists = detail::checked_add(
        detail::checked_mul(count, sizeof(seq_view<const T>) + sizeof(span<const std::int64_t>), what),
        detail::checked_product(what, count, max_len, sizeof(std::int64_t)), what);
    c.heap = detail::checked_add(c.heap, lists, what);
    if (m == mode::train) {
        const std::uint64_t grads =
            detail::checked_mul(count, sizeof(seq_view<const T>) + sizeof(seq_view<T>), what);
        c.saved = detail::checked_add(c.saved, detail::checked_mul(count, sizeof(std::size_t), what), what);
        c.heap = detail::checked_add(c.heap, grads, what);
    }
    return c;
}

// ---------------------------------------------------------------- helpers

// Checks H against X and writes, for every packed row, the packed row of its
// head (off must hold the split offsets); returns the total rows.
template <class T, class Backend, class Out>
template <class Items, class Heads>
std::size_t biaffine_scorer<T, Backend, Out>::fill_head_rows(const Items& X, const Heads& H, std::size_t* off,
                                               std::size_t* rows) const
{
    return detail::split_head_rows(X, H, off, rows);
}

// Per-sequence head lists of a padded `heads [b, L]` (integers; read through
// xtensor's indexing, any layout), copied into `flat` as int64.
template <class T, class Backend, class Out>
template <class X3, class Lengths, class Heads2>
tracked_vector<span<const std::int64_t>> biaffine_scorer<T, Backend, Out>::padded_head_lists(const X3& x, const Lengths& lengths,
                                                                               const Heads2& heads,
                                                                               tracked_vector<std::int64_t>& flat) const
{
    const std::size_t b = x.shape()[0], L = x.shape()[1];
    if (heads.dimension() != 2 || heads.shape()[0] != b || heads.shape()[1] != L) {
        throw head_error(detail::msg("padded input: heads must be [", b, ", ", L, "], got ",
                                     detail::shape_str(std::vector<std::size_t>(heads.shape().begin(),
                                                                                heads.shape().end()))));
    }
    flat.assign(b * L, 0);
    tracked_vector<span<const std::int64_t>> lists(b);
    for (std::size_t k = 0; k < b; ++k) {
        // Lengths are checked by padded_views before this runs.
        const auto n = static_cast<std::size_t>(lengths[k]);
        for (std::size_t m = 0; m < n; ++m) flat[k * L + m] = static_cast<std::int64_t>(heads(k, m));
        lists[k] = span<const std::int64_t>(flat.data() + k * L, n);
    }
    return lists;
}

BIAFFINE_NAMESPACE_END
