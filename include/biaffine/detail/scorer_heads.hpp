// biaffine/detail/scorer_heads.hpp - the scorer's labels at given heads: per
// split, `L[m, o] = S[m, head[m], o]` without the `[n, n, o]` scores.
//
// The projections and T = U W' run on the packed rows as for full scores
// (same dropout masks from the same seed draw); then each dependent m takes
// the row of T at its head, viewed `[o, hv]`, times its own V row: O(n o hv)
// per split where the full scores cost O(n^2 o hv). Backward scatters dy
// into dT at the head rows and continues through the shared projection
// backward (scorer_forward.hpp).
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/softmax.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// In-place softmax of each row of `[n, o]` over the labels.
template <class T>
void softmax_rows(seq_view<T> y)
{
    if (y.col_stride == 1) {
        for (std::size_t m = 0; m < y.rows; ++m) {
            softmax_group(y.data + static_cast<std::ptrdiff_t>(m) * y.row_stride, y.cols);
        }
        return;
    }
    auto ym = y.map();
    for (Eigen::Index m = 0; m < ym.rows(); ++m) {
        if (ym.cols() == 0) continue;
        auto r = ym.row(m).array();
        r = (r - r.maxCoeff()).exp();
        r /= r.sum();
    }
}

// dS = Y * (dY - sum(dY * Y)) per row of `[n, o]`, into `ds`.
template <class T>
void softmax_rows_backward(seq_view<const T> y, seq_view<const T> dy, seq_view<T> ds)
{
    const auto ym = y.map();
    const auto dym = dy.map();
    auto dsm = ds.map();
    for (Eigen::Index m = 0; m < ym.rows(); ++m) {
        const T dot = (ym.row(m).array() * dym.row(m).array()).sum();
        dsm.row(m).array() = ym.row(m).array() * (dym.row(m).array() - dot);
    }
}

// A dense `[n, o]` view at `p`.
template <class T>
seq_view<T> dense_rows(T* p, std::size_t n, std::size_t o)
{
    return {p, n, o, static_cast<std::ptrdiff_t>(o), 1};
}

}  // namespace detail

// ------------------------------------------------------------ public calls

template <class T>
template <class Items, class Heads>
score_list<T> biaffine_scorer<T>::predict_heads(const Items& X, const Heads& H) const
{
    score_list<T> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(score_tensor<T>::from_shape(heads_shape(X[k].rows)));
    predict_heads_into(X, H, [&](std::size_t k, std::size_t n) { return detail::dense_rows(Y[k].data(), n, cfg_.labels); },
                       [](std::size_t, seq_view<T>) {});
    return Y;
}

template <class T>
template <class Items, class Heads, class Sink>
void biaffine_scorer<T>::predict_heads_stream(const Items& X, const Heads& H, Sink&& sink) const
{
    std::size_t max_n = 0;
    for (std::size_t k = 0; k < X.size(); ++k) max_n = std::max(max_n, X[k].rows);
    const std::size_t o = cfg_.labels;
    scratch<T> s(detail::packed_count<T>("stream", max_n, o));
    predict_heads_into(X, H, [&](std::size_t, std::size_t n) { return detail::dense_rows(s.data(), n, o); },
                       [&](std::size_t k, seq_view<T> y) { sink(k, detail::read_only(y)); });
}

template <class T>
template <class Items, class Heads>
std::pair<score_list<T>, typename biaffine_scorer<T>::heads_backprop_type>
biaffine_scorer<T>::forward_heads(const Items& X, const Heads& H, mode m)
{
    score_list<T> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(score_tensor<T>::from_shape(heads_shape(X[k].rows)));
    heads_backprop_type bp = forward_heads_into(
        X, H, m, [&](std::size_t k, std::size_t n) { return detail::dense_rows(Y[k].data(), n, cfg_.labels); });
    return {std::move(Y), std::move(bp)};
}

template <class T>
template <class X3, class Lengths, class Heads2>
score_array<T> biaffine_scorer<T>::predict_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads) const
{
    const auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto lists = padded_head_lists(x, lengths, heads, flat);
    const std::size_t b = x.shape()[0], L = x.shape()[1], o = cfg_.labels;
    detail::to_index_size(detail::checked_product("padded labels", b, L, o, sizeof(T)), "padded labels");
    score_array<T> y = xt::zeros<T>({b, L, o});
    predict_heads_into(views, lists,
                       [&](std::size_t k, std::size_t n) {
                           return seq_view<T>{y.data() + k * L * o, n, o, static_cast<std::ptrdiff_t>(o), 1};
                       },
                       [](std::size_t, seq_view<T>) {});
    return y;
}

template <class T>
template <class X3, class Lengths, class Heads2>
std::pair<score_array<T>, typename biaffine_scorer<T>::padded_backprop_type>
biaffine_scorer<T>::forward_heads_padded(const X3& x, const Lengths& lengths, const Heads2& heads, mode m)
{
    auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto lists = padded_head_lists(x, lengths, heads, flat);
    const std::size_t b = x.shape()[0], L = x.shape()[1], o = cfg_.labels, n_in = cfg_.n_in;
    detail::to_index_size(detail::checked_product("padded labels", b, L, o, sizeof(T)), "padded labels");
    score_array<T> y = xt::zeros<T>({b, L, o});
    heads_backprop_type inner = forward_heads_into(views, lists, m, [&](std::size_t k, std::size_t n) {
        return seq_view<T>{y.data() + k * L * o, n, o, static_cast<std::ptrdiff_t>(o), 1};
    });
    tracked_vector<std::size_t> lens(b);
    for (std::size_t k = 0; k < b; ++k) lens[k] = views[k].rows;
    padded_backprop_type bp([inner = std::move(inner), lens = std::move(lens), L, o,
                             n_in](const score_array<T>& dy) mutable {
        const std::size_t b = lens.size();
        if (dy.dimension() != 3 || dy.shape()[0] != b || dy.shape()[1] != L || dy.shape()[2] != o) {
            throw shape_error(detail::msg(
                "forward_heads_padded backprop: dy must be [", b, ", ", L, ", ", o, "], got ",
                detail::shape_str(std::vector<std::size_t>(dy.shape().begin(), dy.shape().end()))));
        }
        detail::to_index_size(detail::checked_product("padded input gradient", b, L, n_in, sizeof(T)),
                              "padded input gradient");
        tensor<T, 3> dx = xt::zeros<T>({b, L, n_in});
        tracked_vector<seq_view<const T>> dys(b);
        tracked_vector<seq_view<T>> dxs(b);
        for (std::size_t k = 0; k < b; ++k) {
            dys[k] = {dy.data() + k * L * o, lens[k], o, static_cast<std::ptrdiff_t>(o), 1};
            dxs[k] = {dx.data() + k * L * n_in, lens[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1};
        }
        inner(span<const seq_view<const T>>(dys.data(), b), span<const seq_view<T>>(dxs.data(), b));
        return dx;
    });
    return {std::move(y), std::move(bp)};
}

// ------------------------------------------------------------------ costs

template <class T>
batch_cost biaffine_scorer<T>::heads_cost(std::size_t count, std::size_t max_len, mode m) const
{
    using detail::checked_add;
    using detail::checked_mul;
    using detail::scratch_bytes;
    const char* what = "batch cost";
    const std::uint64_t rows = checked_mul(count, max_len, what);
    const std::uint64_t o = cfg_.labels;
    batch_cost c;
    c.outputs = detail::checked_product(what, rows, o, sizeof(T));
    const std::uint64_t xp = scratch_bytes<T>(checked_mul(rows, cfg_.n_in, what));
    // X is gathered (inference and both training passes) only where the
    // backend cannot read the splits in place.
    const std::uint64_t input = detail::compute_backend<T>::reads_items ? 0 : xp;
    const std::uint64_t u = scratch_bytes<T>(checked_mul(rows, hu(), what));
    const std::uint64_t v = scratch_bytes<T>(checked_mul(rows, hv(), what));
    const std::uint64_t t = scratch_bytes<T>(detail::checked_product(what, rows, o, hv()));
    const std::uint64_t uvt = checked_add(checked_add(u, v, what), t, what);
    const std::uint64_t offsets = scratch_bytes<std::size_t>(checked_add(count, 1, what));
    // One split's [max_len, o]: predict_heads_stream's buffer, or in training
    // one split's dS (and its recomputed labels).
    const std::uint64_t one = scratch_bytes<T>(checked_mul(max_len, o, what));
    if (m == mode::eval) {
        // Offsets, head rows, X (when gathered), U, V, T, the stream buffer
        // and the backend's packed block for the projections and T (no
        // split-score block).
        const std::uint64_t head_rows = scratch_bytes<std::size_t>(rows);
        const std::uint64_t packed = scratch_bytes<T>(packed_elements(0));
        c.scratch =
            checked_add(checked_add(checked_add(offsets, head_rows, what), checked_add(input, one, what), what),
                        checked_add(packed, uvt, what), what);
        return c;
    }
    // Train: the views, offsets and head rows stay for backward, and unless
    // recomputing U, V, T and the softmax outputs ([rows, o]). Backward
    // carves dT, dV, dU, one split's dS (softmax), X (when gathered) and the packed block
    // (and when recomputing U, V, T and one split's labels again); the
    // forward carves no more.
    const bool softmax = softmax_in(m);
    const std::uint64_t one_ds = softmax ? one : 0;
    const std::uint64_t views = checked_add(
        checked_mul(count, sizeof(seq_view<const T>) + sizeof(std::size_t), what),
        checked_mul(rows, sizeof(std::size_t), what), what);
    const std::uint64_t packed = scratch_bytes<T>(train_packed_elements(0, detail::to_index_size(rows, what)));
    const std::uint64_t backward =
        checked_add(checked_add(uvt, one_ds, what), checked_add(input, packed, what), what);
    if (cfg_.recompute_in_backward) {
        c.saved = views;
        c.scratch = checked_add(backward, checked_add(uvt, one_ds, what), what);
    } else {
        c.saved = checked_add(checked_add(uvt, softmax ? c.outputs : 0, what), views, what);
        c.scratch = backward;
    }
    return c;
}

template <class T>
batch_cost biaffine_scorer<T>::padded_heads_cost(std::size_t count, std::size_t max_len, mode m) const
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
template <class T>
template <class Items, class Heads>
std::size_t biaffine_scorer<T>::fill_head_rows(const Items& X, const Heads& H, std::size_t* off,
                                               std::size_t* rows) const
{
    const std::size_t count = X.size();
    for (std::size_t k = 0; k < count; ++k) {
        const auto& hk = H[k];
        const std::size_t n = off[k + 1] - off[k];
        for (std::size_t m = 0; m < n; ++m) rows[off[k] + m] = off[k] + static_cast<std::size_t>(hk[m]);
    }
    return off[count];
}

template <class T>
template <class Items, class Heads, class Dest, class Done>
void biaffine_scorer<T>::predict_heads_into(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
{
    check_items(X);
    const std::size_t count = X.size(), o = cfg_.labels;
    detail::check_heads("scorer", count, H, [&](std::size_t k) { return X[k].rows; },
                        [](std::size_t k) { return detail::msg("split ", k); });
    scratch<std::size_t> off(count + 1);
    const std::size_t N = fill_offsets(X, off.data());
    scratch<std::size_t> rows(N);
    fill_head_rows(X, H, off.data(), rows.data());
    scratch<T> u(detail::packed_count<T>("packed U", N, hu()));
    scratch<T> v(detail::packed_count<T>("packed V", N, hv()));
    scratch<T> t(detail::packed_count<T>("packed T", N, o, hv()));
    scratch<T> packed(packed_elements(0));
    forward_activations(X, off.data(), N, false, 0, u.data(), v.data(), t.data(), packed.data());
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = off[k + 1] - off[k];
        seq_view<T> y = dest(k, n);
        if (n != 0) {
            detail::compute_backend<T>::head_scores(detail::const_row_block(v.data() + off[k] * hv(), n, hv()),
                                                    t.data(), rows.data() + off[k], o, y);
        }
        done(k, y);
    }
}

template <class T>
template <class Items, class Heads, class Dest>
typename biaffine_scorer<T>::heads_backprop_type biaffine_scorer<T>::forward_heads_into(const Items& X,
                                                                                         const Heads& H, mode m,
                                                                                         Dest&& dest)
{
    using backend = detail::compute_backend<T>;
    check_items(X);
    const std::size_t count = X.size(), o = cfg_.labels;
    // Checked before the dropout seed is drawn: a bad call changes nothing.
    detail::check_heads("scorer", count, H, [&](std::size_t k) { return X[k].rows; },
                        [](std::size_t k) { return detail::msg("split ", k); });
    ensure_gradients();  // the callback accumulates into them
    saved_batch sb;
    begin_saved(X, m, sb);
    const std::size_t N = sb.off[count];
    sb.head_rows.resize(N);
    fill_head_rows(X, H, sb.off.data(), sb.head_rows.data());
    const bool keep = sb.kept;
    const bool keep_y = sb.softmax && keep;
    // Kept activations (and outputs) are one block that moves into the
    // callback; recomputed ones are workspace scratch that dies with this call.
    activations<saved_batch> act(*this, sb, keep_y ? detail::packed_count<T>("saved labels", N, o) : 0);
    T *u = act.u, *v = act.v, *t = act.t;
    scratch<T> packed(packed_elements(0));
    forward_activations(X, sb.off.data(), N, sb.drop, sb.seed, u, v, t, packed.data());
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = sb.off[k + 1] - sb.off[k];
        seq_view<T> y = dest(k, n);
        if (n == 0) continue;
        backend::head_scores(detail::const_row_block(v + sb.off[k] * hv(), n, hv()), t,
                             sb.head_rows.data() + sb.off[k], o, y);
        if (sb.softmax) detail::softmax_rows(y);
        if (keep_y) detail::row_block(sb.ys + sb.off[k] * o, n, o) = y.map();
    }
    return heads_backprop_type([this, sb = std::move(sb)](span<const seq_view<const T>> dY,
                                                          span<const seq_view<T>> dX) { backward_heads(sb, dY, dX); });
}

template <class T>
void biaffine_scorer<T>::backward_heads(const saved_batch& sb, span<const seq_view<const T>> dY,
                                        span<const seq_view<T>> dX)
{
    using backend = detail::compute_backend<T>;
    const std::size_t count = sb.views.size(), o = cfg_.labels;
    check_backward_args(sb, dY, dX, "label", [](auto&&... a) { detail::check_head_grad<T>(a...); });
    const std::size_t N = sb.off[count];
    const std::size_t* off = sb.off.data();
    const bool keep = sb.kept;
    const std::size_t n_u = detail::packed_count<T>("packed U", N, hu());
    const std::size_t n_v = detail::packed_count<T>("packed V", N, hv());
    const std::size_t n_t = detail::packed_count<T>("packed T", N, o, hv());
    const std::size_t n_y = detail::packed_count<T>("split labels", detail::max_split_rows(off, count), o);
    activations<const saved_batch> act(*this, sb);
    scratch<T> y_tmp(keep || !sb.softmax ? 0 : n_y);
    scratch<T> packed(train_packed_elements(0, N));
    act.recompute(*this, sb, packed.data());
    const T *u = act.u, *v = act.v, *t = act.t;
    scratch<T> dt(n_t);
    scratch<T> dv(n_v);
    scratch<T> du(n_u);
    scratch<T> ds(sb.softmax ? n_y : 0);
    // Several dependents may share a head: dT accumulates.
    if (N != 0) detail::row_block(dt.data(), N, o * hv()).setZero();
    const std::size_t* rows = sb.head_rows.data();
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = sb.views[k].rows;
        if (n == 0) continue;
        const auto va = detail::const_row_block(v + off[k] * hv(), n, hv());
        seq_view<const T> g = dY[k];
        if (sb.softmax) {
            seq_view<const T> y = detail::dense_rows<const T>(keep ? sb.ys + off[k] * o : y_tmp.data(), n, o);
            if (!keep) {
                const seq_view<T> yt = detail::dense_rows(y_tmp.data(), n, o);
                backend::head_scores(va, t, rows + off[k], o, yt);
                detail::softmax_rows(yt);
            }
            const seq_view<T> d = detail::dense_rows(ds.data(), n, o);
            detail::softmax_rows_backward<T>(y, g, d);
            g = detail::read_only(d);
        }
        backend::head_scores_backward(va, t, rows + off[k], o, g, detail::row_block(dv.data() + off[k] * hv(), n, hv()),
                                      dt.data());
    }
    backward_projections(sb, u, v, dt.data(), dv.data(), du.data(), dX, packed.data());
}

// Per-sequence head lists of a padded `heads [b, L]` (integers; read through
// xtensor's indexing, any layout), copied into `flat` as int64.
template <class T>
template <class X3, class Lengths, class Heads2>
tracked_vector<span<const std::int64_t>> biaffine_scorer<T>::padded_head_lists(const X3& x, const Lengths& lengths,
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
