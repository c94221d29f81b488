// biaffine/detail/scorer_forward.hpp - the scorer's forward and backward over
// split lists: project the splits (gathered into packed rows first unless
// the backend reads them in place), T = U W' (a group of splits at a time
// where the backend groups), one score block per split; backward the same
// in reverse. Each product is
// the compute backend's (detail/compute/backend.hpp); what is here is the
// order of operations, dropout, the softmax and what is kept for backward.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/softmax.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// In-place softmax of one split's scores over the last axis: heads when there
// is one label, labels otherwise.
template <class T>
void softmax_last_axis(score_view<T> s)
{
    const std::size_t group = s.labels == 1 ? s.n : s.labels;
    const std::size_t groups_per_row = s.labels == 1 ? 1 : s.n;
    for (std::size_t m = 0; m < s.n; ++m) {
        T* row = s.data + static_cast<std::ptrdiff_t>(m) * s.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) softmax_group(row + g * group, group);
    }
}

// dS = Y * (dY - sum(dY * Y)) over the softmax axis, into `ds` (dense).
template <class T>
void softmax_backward(score_view<const T> y, score_view<const T> dy, score_view<T> ds)
{
    const std::size_t group = y.labels == 1 ? y.n : y.labels;
    const std::size_t groups_per_row = y.labels == 1 ? 1 : y.n;
    for (std::size_t m = 0; m < y.n; ++m) {
        const T* yr = y.data + static_cast<std::ptrdiff_t>(m) * y.row_stride;
        const T* dyr = dy.data + static_cast<std::ptrdiff_t>(m) * dy.row_stride;
        T* dsr = ds.data + static_cast<std::ptrdiff_t>(m) * ds.row_stride;
        for (std::size_t g = 0; g < groups_per_row; ++g) {
            using array = Eigen::Array<T, Eigen::Dynamic, 1>;
            const auto len = static_cast<Eigen::Index>(group);
            const Eigen::Map<const array> yg(yr + g * group, len), dyg(dyr + g * group, len);
            Eigen::Map<array>(dsr + g * group, len) = yg * (dyg - (yg * dyg).sum());
        }
    }
}

// Asks for `count` elements from `p` on to be brought into cache: a later
// split's rows of V while this one is scored (the projections wrote them
// long before). 1M tokens, o = 1, 2 threads: 1.008 / 1.045 / 1.000 s
// against 1.038 / 1.044 / 1.032 (alternated, Zen 4 EPYC, AVX-512).
template <class T>
inline void prefetch_rows(const T* p, std::size_t count) noexcept
{
#if defined(__GNUC__) || defined(__clang__)
    const char* b = reinterpret_cast<const char*>(p);
    for (std::size_t i = 0; i < count * sizeof(T); i += 64) __builtin_prefetch(b + i, 0, 2);
#else
    (void)p;
    (void)count;
#endif
}

// The per-split loops' prefetch: at split k, fetch(j) for the split
// BIAFFINE_PREFETCH_SPLITS_AHEAD on (and, at k = 0, for the ones before it).
template <class Fetch>
inline void prefetch_ahead(std::size_t k, std::size_t count, Fetch&& fetch)
{
    constexpr std::size_t ahead = BIAFFINE_PREFETCH_SPLITS_AHEAD;
    if (ahead == 0) return;
    if (k == 0) {
        for (std::size_t j = 1; j < ahead && j < count; ++j) fetch(j);
    }
    if (k + ahead < count) fetch(k + ahead);
}

// A dense `[n, n, o]` view of one split's owned scores.
template <class T, class S>
score_view<T> dense_scores(S& s)
{
    const std::size_t n = s.shape()[0];
    const std::size_t o = s.dimension() == 3 ? s.shape()[2] : 1;
    return {s.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
}

}  // namespace detail

// ------------------------------------------------------------ public calls

template <class T>
template <class Items>
score_list<T> biaffine_scorer<T>::predict(const Items& X) const
{
    score_list<T> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(new_scores(X[k].rows));
    predict_into(X, [&](std::size_t k, std::size_t) { return detail::dense_scores<T>(Y[k]); },
                 [](std::size_t, score_view<T>) {});
    return Y;
}

template <class T>
template <class Items, class Sink>
void biaffine_scorer<T>::predict_stream(const Items& X, Sink&& sink) const
{
    std::size_t max_n = 0;
    for (std::size_t k = 0; k < X.size(); ++k) max_n = std::max(max_n, X[k].rows);
    const std::size_t o = cfg_.labels;
    scratch<T> s(detail::to_index_size(detail::checked_product("stream", max_n, max_n, o), "stream"));
    predict_into(
        X, [&](std::size_t, std::size_t n) { return score_view<T>{s.data(), n, o, static_cast<std::ptrdiff_t>(n * o)}; },
        [&](std::size_t k, score_view<T> y) { sink(k, score_view<const T>{y.data, y.n, y.labels, y.row_stride}); });
}

template <class T>
template <class Items>
std::pair<score_list<T>, typename biaffine_scorer<T>::backprop_type> biaffine_scorer<T>::forward(const Items& X,
                                                                                                  mode m)
{
    score_list<T> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(new_scores(X[k].rows));
    backprop_type bp = forward_into(X, m, [&](std::size_t k, std::size_t) { return detail::dense_scores<T>(Y[k]); });
    return {std::move(Y), std::move(bp)};
}

// ---------------------------------------------------------------- helpers

// One split's `[n, n(, o)]` output; its size is checked before xtensor
// multiplies the shape out unchecked.
template <class T>
score_tensor<T> biaffine_scorer<T>::new_scores(std::size_t n) const
{
    detail::to_index_size(detail::checked_product("split scores", n, n, cfg_.labels, sizeof(T)), "split scores");
    return score_tensor<T>(score_shape(n));
}

template <class T>
template <class Items>
void biaffine_scorer<T>::check_items(const Items& X) const
{
    for (std::size_t k = 0; k < X.size(); ++k) {
        if (X[k].cols != cfg_.n_in) {
            throw shape_error(detail::msg("scorer: split ", k, " has width ", X[k].cols,
                                          ", the weights expect n_in = ", cfg_.n_in));
        }
    }
}

// Row offsets of the splits in the packed batch; returns the total.
template <class T>
template <class Items>
std::size_t biaffine_scorer<T>::fill_offsets(const Items& X, std::size_t* off) const
{
    std::uint64_t total = 0;
    for (std::size_t k = 0; k < X.size(); ++k) {
        off[k] = static_cast<std::size_t>(total);
        total = detail::checked_add(total, X[k].rows, "packed rows");
    }
    off[X.size()] = static_cast<std::size_t>(total);
    return detail::to_index_size(total, "packed rows");
}

// One mask per split and feature, shared over the split's tokens; kept units
// scaled by 1 / (1 - p). Drawn from a per-batch seed so backward can redraw
// the same masks when it recomputes the forward.
template <class T>
void biaffine_scorer<T>::dropout(std::uint64_t seed, T* u, T* v, const std::size_t* off, std::size_t count) const
{
    std::mt19937_64 gen(seed);
    const double p = cfg_.dropout;
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    tracked_vector<T> mask(cfg_.hidden);
    for (T* a : {u, v}) {
        const std::size_t width = a == u ? hu() : hv();
        for (std::size_t k = 0; k < count; ++k) {
            for (auto& m : mask) m = detail::uniform01(gen) < p ? T(0) : scale;
            for (std::size_t r = off[k]; r < off[k + 1]; ++r) {
                for (std::size_t j = 0; j < cfg_.hidden; ++j) a[r * width + j] *= mask[j];
            }
        }
    }
}

// U and V (after relu and dropout) for the packed rows of X; `packed` holds
// packed_elements(max_len) (the backend's scratch).
template <class T>
template <class Items>
void biaffine_scorer<T>::project_activations(const Items& X, const std::size_t* off, std::size_t N, bool drop,
                                             std::uint64_t seed, T* u, T* v, T* packed) const
{
    using backend = detail::compute_backend<T>;
    if constexpr (backend::reads_items) {
        backend::project_items(dims(), weights(), X, off, N, u, v, packed);
    } else {
        scratch<T> xp(detail::to_index_size(detail::checked_mul(N, cfg_.n_in, "packed input"), "packed input"));
        detail::gather_rows(X, off, cfg_.n_in, xp.data());
        backend::projections(dims(), weights(), xp.data(), N, u, v, packed);
    }
    if (drop) dropout(seed, u, v, off, X.size());
}

// U, V and T = U W' for every packed row (labels at given heads, and
// backward's recompute).
template <class T>
template <class Items>
void biaffine_scorer<T>::forward_activations(const Items& X, const std::size_t* off, std::size_t N, bool drop,
                                             std::uint64_t seed, T* u, T* v, T* t, T* packed) const
{
    project_activations(X, off, N, drop, seed, u, v, packed);
    if (N == 0) return;  // no products for empty splits (see eigen_backend)
    detail::compute_backend<T>::bilinear_left(dims(), w_.data(), u, N, t, packed);
}

// The backend's bilinear_scores, which needs rows; with only empty splits
// (t may be null then) each split is scored from no rows of T.
template <class T>
template <class Each>
void biaffine_scorer<T>::score_splits(const T* u, const std::size_t* off, std::size_t count, T* t, bool keep_t,
                                      T* packed, Each&& each) const
{
    if (off[count] == 0) {
        for (std::size_t k = 0; k < count; ++k) each(k, static_cast<const T*>(nullptr), packed);
        return;
    }
    detail::compute_backend<T>::bilinear_scores(dims(), w_.data(), u, off, count, t, keep_t, packed,
                                                std::forward<Each>(each));
}

// Rows of T inference holds at once (the backend's group, or the batch).
template <class T>
std::size_t biaffine_scorer<T>::eval_t_rows(std::size_t N, std::size_t max_len) const noexcept
{
    return detail::t_group_rows(detail::compute_backend<T>::score_group_rows(dims()), N, max_len);
}

// Inference: the activations in scratch, T a group of splits at a time (the
// backend's bilinear_scores), then each split's scores into `dest(k, n)` and
// `done(k, scores)` called once they are there.
template <class T>
template <class Items, class Dest, class Done>
void biaffine_scorer<T>::predict_into(const Items& X, Dest&& dest, Done&& done) const
{
    using backend = detail::compute_backend<T>;
    check_items(X);
    const std::size_t count = X.size(), o = cfg_.labels;
    scratch<std::size_t> off(count + 1);
    const std::size_t N = fill_offsets(X, off.data());
    const std::size_t max_n = detail::max_split_rows(off.data(), count);
    scratch<T> u(detail::packed_count<T>("packed U", N, hu()));
    scratch<T> v(detail::packed_count<T>("packed V", N, hv()));
    scratch<T> t(detail::packed_count<T>("packed T", eval_t_rows(N, max_n), o, hv()));
    scratch<T> packed(packed_elements(max_n));
    project_activations(X, off.data(), N, false, 0, u.data(), v.data(), packed.data());
    const T* va = v.data();
    score_splits(u.data(), off.data(), count, t.data(), false, packed.data(),
                 [&](std::size_t k, const T* t_rows, T* rest) {
                     const std::size_t n = off[k + 1] - off[k];
                     detail::prefetch_ahead(k, count, [&](std::size_t j) {
                         detail::prefetch_rows(va + off[j] * hv(), (off[j + 1] - off[j]) * hv());
                     });
                     score_view<T> s = dest(k, n);
                     backend::split_scores(detail::const_row_block(va + off[k] * hv(), n, hv()), t_rows, o, s, rest);
                     done(k, s);
                 });
}

template <class T>
template <class Items, class Dest>
typename biaffine_scorer<T>::backprop_type biaffine_scorer<T>::forward_into(const Items& X, mode m, Dest&& dest)
{
    using backend = detail::compute_backend<T>;
    check_items(X);
    ensure_gradients();  // the callback accumulates into them
    const std::size_t count = X.size(), o = cfg_.labels;
    saved_batch sb;
    begin_saved(X, m, sb);
    const std::size_t N = sb.off[count];
    const bool keep = sb.kept;
    const bool keep_y = sb.softmax && keep;
    if (keep_y) {
        sb.y_off.resize(count + 1);
        std::uint64_t total = 0;
        for (std::size_t k = 0; k < count; ++k) {
            sb.y_off[k] = static_cast<std::size_t>(total);
            const std::size_t n = sb.off[k + 1] - sb.off[k];
            total = detail::checked_add(total, detail::checked_product("saved scores", n, n, o), "saved scores");
        }
        sb.y_off[count] = detail::packed_count<T>("saved scores", total);
    }
    // Kept activations (and outputs) are one block that moves into the
    // callback; recomputed ones are workspace scratch that dies with this call.
    activations<saved_batch> act(*this, sb, keep_y ? sb.y_off[count] : 0);
    T *u = act.u, *v = act.v, *t = act.t;
    scratch<T> packed(packed_elements(detail::max_split_rows(sb.off.data(), count)));
    project_activations(X, sb.off.data(), N, sb.drop, sb.seed, u, v, packed.data());
    // T for every row (backward reads it), written a group at a time.
    score_splits(u, sb.off.data(), count, t, true, packed.data(), [&](std::size_t k, const T* t_rows, T* rest) {
        const std::size_t n = sb.off[k + 1] - sb.off[k];
        detail::prefetch_ahead(k, count, [&](std::size_t j) {
            detail::prefetch_rows(v + sb.off[j] * hv(), (sb.off[j + 1] - sb.off[j]) * hv());
        });
        score_view<T> s = dest(k, n);
        backend::split_scores(detail::const_row_block(v + sb.off[k] * hv(), n, hv()), t_rows, o, s, rest);
        if (sb.softmax) detail::softmax_last_axis(s);
        if (keep_y) detail::row_block(sb.ys + sb.y_off[k], n, n * o) = s.map();
    });
    return backprop_type([this, sb = std::move(sb)](span<const score_view<const T>> dY,
                                                    span<const seq_view<T>> dX) { backward(sb, dY, dX); });
}

template <class T>
void biaffine_scorer<T>::backward(const saved_batch& sb, span<const score_view<const T>> dY,
                                  span<const seq_view<T>> dX)
{
    using backend = detail::compute_backend<T>;
    const std::size_t count = sb.views.size(), o = cfg_.labels;
    check_backward_args(sb, dY, dX, "score", [](auto&&... a) { detail::check_score_grad<T>(a...); });
    const std::size_t N = sb.off[count];
    const std::size_t* off = sb.off.data();
    const std::size_t max_n = detail::max_split_rows(off, count);
    const bool keep = sb.kept;
    const std::size_t n_u = detail::packed_count<T>("packed U", N, hu());
    const std::size_t n_v = detail::packed_count<T>("packed V", N, hv());
    const std::size_t n_t = detail::packed_count<T>("packed T", N, o, hv());
    const std::size_t n_s = detail::packed_count<T>("split scores", max_n, max_n, o);
    // Recomputed activations (recompute_in_backward) live in scratch.
    activations<const saved_batch> act(*this, sb);
    scratch<T> y_tmp(keep || !sb.softmax ? 0 : n_s);
    scratch<T> packed(train_packed_elements(max_n, N));
    act.recompute(*this, sb, packed.data());
    const T *u = act.u, *v = act.v, *t = act.t;
    scratch<T> dt(n_t);
    scratch<T> dv(n_v);
    scratch<T> du(n_u);
    scratch<T> ds(sb.softmax ? n_s : 0);
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = sb.views[k].rows;
        // A later split's operands, while this one computes: they come from
        // memory (kept since the forward, or the caller's), and the loop
        // took 7% less time with the next one's prefetched (100k tokens, o =
        // 1, AMD EPYC Zen 5, three alternated runs); see
        // BIAFFINE_PREFETCH_SPLITS_AHEAD for the distance.
        detail::prefetch_ahead(k, count, [&](std::size_t j) { prefetch_split(sb, dY[j], j, v, t); });
        const auto va = detail::const_row_block(v + off[k] * hv(), n, hv());
        const T* t_rows = t + off[k] * o * hv();
        score_view<const T> g = dY[k];
        if (sb.softmax) {
            const auto dense = static_cast<std::ptrdiff_t>(n * o);
            score_view<const T> y{keep ? sb.ys + sb.y_off[k] : nullptr, n, o, dense};
            if (!keep) {
                score_view<T> yt{y_tmp.data(), n, o, dense};
                backend::split_scores(va, t_rows, o, yt, packed.data());
                detail::softmax_last_axis(yt);
                y = {yt.data, n, o, dense};
            }
            score_view<T> d{ds.data(), n, o, dense};
            detail::softmax_backward<T>(y, g, d);
            g = {d.data, n, o, dense};
        }
        backend::split_scores_backward(va, t_rows, o, g, detail::row_block(dv.data() + off[k] * hv(), n, hv()),
                                       dt.data() + off[k] * o * hv(), packed.data());
    }
    backward_projections(sb, u, v, dt.data(), dv.data(), du.data(), dX, packed.data());
}

// Prefetches split k's rows of V and T, its kept softmax outputs and its
// score gradient g: the first 16 KiB of each, so that with many labels (T's
// rows of a 100-token split at 50 labels: 2.6 MB) the prefetches do not
// push the current split's operands out of L2.
template <class T>
void biaffine_scorer<T>::prefetch_split(const saved_batch& sb, const score_view<const T>& g, std::size_t k,
                                        const T* v, const T* t) const
{
    constexpr std::size_t most = (16 << 10) / sizeof(T);
    const std::size_t n = sb.off[k + 1] - sb.off[k], o = cfg_.labels;
    detail::prefetch_rows(v + sb.off[k] * hv(), std::min(most, n * hv()));
    detail::prefetch_rows(t + sb.off[k] * o * hv(), std::min(most, n * o * hv()));
    if (sb.kept && sb.softmax) detail::prefetch_rows(sb.ys + sb.y_off[k], std::min(most, n * n * o));
    for (std::size_t i = 0, done = 0; i < n && done < most; ++i, done += n * o) {
        detail::prefetch_rows(g.data + static_cast<std::ptrdiff_t>(i) * g.row_stride, n * o);
    }
}

// The part of backward shared by full scores and labels at given heads: from
// dT and dV (packed rows) through W, relu, dropout and the projections to
// every parameter gradient and the splits' dX.
template <class T>
void biaffine_scorer<T>::backward_projections(const saved_batch& sb, const T* u, const T* v, T* dt, T* dv, T* du,
                                              span<const seq_view<T>> dX, T* packed)
{
    using backend = detail::compute_backend<T>;
    const std::size_t count = sb.views.size(), N = sb.off[count], n_in = cfg_.n_in;
    if (N == 0) return;
    const std::size_t* off = sb.off.data();
    // The input backward gathers X into xp where the backend cannot read the splits in place.
    scratch<T> xp(backend::reads_items ? 0 : detail::packed_count<T>("packed input", N, n_in));
    backend::bilinear_left_backward(dims(), w_.data(), u, N, dt, du, dw_.data(), packed);
    // Through relu and dropout (a unit passed gradient iff it came out
    // positive, scaled like the kept units), then the projections.
    const T scale = sb.drop ? static_cast<T>(1.0 / (1.0 - cfg_.dropout)) : T(1);
    const detail::relu_ref<T> a{u, v, scale};
    backend::input_backward(dims(), weights(), grads(), sb.views, off, N, a, du, dv, xp.data(), packed, dX);
}

// Offsets, views, mode flags and the dropout seed of one training forward
// (the same draw for full scores and labels at given heads).
template <class T>
template <class Items>
void biaffine_scorer<T>::begin_saved(const Items& X, mode m, saved_batch& sb)
{
    const std::size_t count = X.size();
    sb.off.resize(count + 1);
    fill_offsets(X, sb.off.data());
    sb.views.resize(count);
    for (std::size_t k = 0; k < count; ++k) sb.views[k] = detail::read_only(X[k]);
    sb.train = m == mode::train;
    sb.softmax = softmax_in(m);
    sb.drop = sb.train && cfg_.dropout > 0.0;
    sb.seed = sb.drop ? rng_() : 0;
    sb.kept = !cfg_.recompute_in_backward;
}

BIAFFINE_NAMESPACE_END
