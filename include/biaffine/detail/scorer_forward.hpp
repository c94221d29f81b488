// biaffine/detail/scorer_forward.hpp - the scorer's forward and backward over
// split lists: project the splits (gathered into packed rows first unless
// the backend reads them in place), T = U W' (a group of splits at a time
// where the backend groups), one score block per split; backward the same
// in reverse. One path for every output kind (full scores, labels at given
// heads: detail/output_kind.hpp). Each product is the compute backend's
// (detail/compute/backend.hpp); what is here is the order of operations,
// dropout, the softmax and what is kept for backward.
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
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

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
    predict_into<detail::full_scores_kind>(X, detail::no_heads{},
                                           [&](std::size_t k, std::size_t) { return detail::dense_scores<T>(Y[k]); },
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
    predict_into<detail::full_scores_kind>(
        X, detail::no_heads{}, [&](std::size_t, std::size_t n) { return score_view<T>{s.data(), n, o, static_cast<std::ptrdiff_t>(n * o)}; },
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
    backprop_type bp = forward_into<detail::full_scores_kind>(X, detail::no_heads{}, m, [&](std::size_t k, std::size_t) { return detail::dense_scores<T>(Y[k]); });
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

// The splits' outputs of one kind from the packed activations: full scores
// take T a group of splits at a time (the backend's bilinear_scores, T kept
// for every row when `keep_t`), labels at given heads take T for every row
// first (they read it at the heads, anywhere in the batch). Split k's output
// goes into `dest(k, n)`, then `each(k, y)`.
template <class T>
template <class Kind, class Dest, class Each>
void biaffine_scorer<T>::score_batch(const T* u, const T* v, const std::size_t* off, std::size_t count,
                                     const std::size_t* head_rows, T* t, bool keep_t, T* packed, Dest&& dest,
                                     Each&& each) const
{
    using backend = detail::compute_backend<T>;
    const std::size_t o = cfg_.labels;
    if constexpr (Kind::heads) {
        const std::size_t N = off[count];
        if (N != 0) backend::bilinear_left(dims(), w_.data(), u, N, t, packed);
        for (std::size_t k = 0; k < count; ++k) {
            const std::size_t n = off[k + 1] - off[k];
            seq_view<T> y = dest(k, n);
            if (n != 0) {
                backend::head_scores(detail::const_row_block(v + off[k] * hv(), n, hv()), t, head_rows + off[k], o, y);
            }
            each(k, y);
        }
    } else {
        (void)head_rows;
        score_splits(u, off, count, t, keep_t, packed, [&](std::size_t k, const T* t_rows, T* rest) {
            const std::size_t n = off[k + 1] - off[k];
            detail::prefetch_ahead(k, count, [&](std::size_t j) {
                detail::prefetch_rows(v + off[j] * hv(), (off[j + 1] - off[j]) * hv());
            });
            score_view<T> s = dest(k, n);
            backend::split_scores(detail::const_row_block(v + off[k] * hv(), n, hv()), t_rows, o, s, rest);
            each(k, s);
        });
    }
}

// Split k's output of a kind again, from T for every row (backward's
// recompute), and its backward: dV rows of the split, dT (at the split's
// rows, or accumulated at the heads).
template <class T>
template <class Kind>
void biaffine_scorer<T>::split_output(const saved_batch& sb, std::size_t k, const T* v, const T* t,
                                      typename Kind::template view<T> y, T* packed) const
{
    using backend = detail::compute_backend<T>;
    const std::size_t n = sb.off[k + 1] - sb.off[k], o = cfg_.labels;
    const auto va = detail::const_row_block(v + sb.off[k] * hv(), n, hv());
    if constexpr (Kind::heads) {
        (void)packed;
        backend::head_scores(va, t, sb.head_rows.data() + sb.off[k], o, y);
    } else {
        backend::split_scores(va, t + sb.off[k] * o * hv(), o, y, packed);
    }
}

template <class T>
template <class Kind>
void biaffine_scorer<T>::split_output_backward(const saved_batch& sb, std::size_t k, const T* v, const T* t,
                                               typename Kind::template view<const T> g, T* dv, T* dt,
                                               T* packed) const
{
    using backend = detail::compute_backend<T>;
    const std::size_t n = sb.off[k + 1] - sb.off[k], o = cfg_.labels;
    const auto va = detail::const_row_block(v + sb.off[k] * hv(), n, hv());
    const auto dva = detail::row_block(dv + sb.off[k] * hv(), n, hv());
    if constexpr (Kind::heads) {
        (void)packed;
        backend::head_scores_backward(va, t, sb.head_rows.data() + sb.off[k], o, g, dva, dt);
    } else {
        backend::split_scores_backward(va, t + sb.off[k] * o * hv(), o, g, dva, dt + sb.off[k] * o * hv(), packed);
    }
}

// Inference of one output kind: the activations in scratch, then each
// split's output into `dest(k, n)` and `done(k, y)` called once it is there.
template <class T>
template <class Kind, class Items, class Heads, class Dest, class Done>
void biaffine_scorer<T>::predict_into(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
{
    check_items(X);
    detail::check_kind_heads<Kind>("scorer", X, H);
    if (cfg_.precision == compute_precision::bf16) {
        predict_into_bf16<Kind>(X, H, dest, done);
        return;
    }
    const std::size_t count = X.size(), o = cfg_.labels;
    scratch<std::size_t> off(count + 1);
    const std::size_t N = fill_offsets(X, off.data());
    const std::size_t max_n = detail::max_split_rows(off.data(), count);
    scratch<std::size_t> rows(Kind::heads ? N : 0);
    if constexpr (Kind::heads) fill_head_rows(X, H, off.data(), rows.data());
    scratch<T> u(detail::packed_count<T>("packed U", N, hu()));
    scratch<T> v(detail::packed_count<T>("packed V", N, hv()));
    scratch<T> t(detail::packed_count<T>("packed T", Kind::heads ? N : eval_t_rows(N, max_n), o, hv()));
    scratch<T> packed(packed_elements(Kind::heads ? 0 : max_n));
    project_activations(X, off.data(), N, false, 0, u.data(), v.data(), packed.data());
    score_batch<Kind>(u.data(), v.data(), off.data(), count, rows.data(), t.data(), false, packed.data(), dest,
                      done);
}

// Training (or eval-mode) forward of one output kind: what backward needs
// goes into the saved batch that moves into the callback.
template <class T>
template <class Kind, class Items, class Heads, class Dest>
typename biaffine_scorer<T>::template kind_backprop<Kind> biaffine_scorer<T>::forward_into(const Items& X,
                                                                                         const Heads& H, mode m,
                                                                                         Dest&& dest)
{
    check_items(X);
    // Checked before the dropout seed is drawn: a bad call changes nothing.
    detail::check_kind_heads<Kind>("scorer", X, H);
    ensure_gradients();  // the callback accumulates into them
    const std::size_t count = X.size(), o = cfg_.labels;
    saved_batch sb;
    begin_saved(X, m, sb);
    const std::size_t N = sb.off[count];
    if constexpr (Kind::heads) {
        sb.head_rows.resize(N);
        fill_head_rows(X, H, sb.off.data(), sb.head_rows.data());
    }
    const bool keep_y = sb.softmax && sb.kept;
    std::size_t ys = 0;
    if (keep_y) {
        if constexpr (Kind::heads) {
            ys = detail::packed_count<T>("saved labels", N, o);  // split k's at off[k] * o
        } else {
            sb.y_off.resize(count + 1);
            std::uint64_t total = 0;
            for (std::size_t k = 0; k < count; ++k) {
                sb.y_off[k] = static_cast<std::size_t>(total);
                total = detail::checked_add(total, Kind::elements(sb.off[k + 1] - sb.off[k], o, "saved scores"),
                                            "saved scores");
            }
            sb.y_off[count] = ys = detail::packed_count<T>("saved scores", total);
        }
    }
    // Kept activations (and outputs) are one block that moves into the
    // callback; recomputed ones are workspace scratch that dies with this call.
    activations<saved_batch> act(*this, sb, ys);
    scratch<T> packed(packed_elements(Kind::heads ? 0 : detail::max_split_rows(sb.off.data(), count)));
    project_activations(X, sb.off.data(), N, sb.drop, sb.seed, act.u, act.v, packed.data());
    score_batch<Kind>(act.u, act.v, sb.off.data(), count, sb.head_rows.data(), act.t, true, packed.data(), dest,
                      [&](std::size_t k, typename Kind::template view<T> y) {
                          if (sb.softmax) Kind::softmax(y);
                          if (keep_y) Kind::copy(Kind::read_only(y), sb.ys + kept_output_offset<Kind>(sb, k));
                      });
    return kind_backprop<Kind>(
        [this, sb = std::move(sb)](span<const typename Kind::template view<const T>> dY, span<const seq_view<T>> dX) {
            backward<Kind>(sb, dY, dX);
        });
}

// Where split k's kept softmax outputs start in the saved block.
template <class T>
template <class Kind>
std::size_t biaffine_scorer<T>::kept_output_offset(const saved_batch& sb, std::size_t k) const noexcept
{
    if constexpr (Kind::heads) {
        return sb.off[k] * cfg_.labels;
    } else {
        return sb.y_off[k];
    }
}

template <class T>
template <class Kind>
void biaffine_scorer<T>::backward(const saved_batch& sb, span<const typename Kind::template view<const T>> dY,
                                  span<const seq_view<T>> dX)
{
    const std::size_t count = sb.views.size(), o = cfg_.labels;
    check_backward_args(sb, dY, dX, Kind::grad_name, [](auto&&... a) { Kind::template check_grad<T>(a...); });
    const std::size_t N = sb.off[count];
    const std::size_t* off = sb.off.data();
    const std::size_t max_n = detail::max_split_rows(off, count);
    const bool keep = sb.kept;
    const std::size_t n_u = detail::packed_count<T>("packed U", N, hu());
    const std::size_t n_v = detail::packed_count<T>("packed V", N, hv());
    const std::size_t n_t = detail::packed_count<T>("packed T", N, o, hv());
    const std::size_t n_y = detail::packed_count<T>(Kind::output_name, Kind::elements(max_n, o, Kind::output_name));
    // Recomputed activations (recompute_in_backward) live in scratch.
    activations<const saved_batch> act(*this, sb);
    scratch<T> y_tmp(keep || !sb.softmax ? 0 : n_y);
    scratch<T> packed(train_packed_elements(Kind::heads ? 0 : max_n, N));
    act.recompute(*this, sb, packed.data());
    const T *u = act.u, *v = act.v, *t = act.t;
    scratch<T> dt(n_t);
    scratch<T> dv(n_v);
    scratch<T> du(n_u);
    scratch<T> ds(sb.softmax ? n_y : 0);
    // Several dependents may share a head: dT accumulates.
    if (Kind::heads && N != 0) detail::row_block(dt.data(), N, o * hv()).setZero();
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t n = sb.views[k].rows;
        if (Kind::heads && n == 0) continue;
        if constexpr (!Kind::heads) {
            // A later split's operands, while this one computes: they come
            // from memory (kept since the forward, or the caller's), and the
            // loop took 7% less time with the next one's prefetched (100k
            // tokens, o = 1, AMD EPYC Zen 5, three alternated runs); see
            // BIAFFINE_PREFETCH_SPLITS_AHEAD for the distance.
            detail::prefetch_ahead(k, count, [&](std::size_t j) { prefetch_split(sb, dY[j], j, v, t); });
        }
        typename Kind::template view<const T> g = dY[k];
        if (sb.softmax) {
            auto y = Kind::dense(keep ? sb.ys + kept_output_offset<Kind>(sb, k) : static_cast<const T*>(nullptr), n, o);
            if (!keep) {
                const auto yt = Kind::dense(y_tmp.data(), n, o);
                split_output<Kind>(sb, k, v, t, yt, packed.data());
                Kind::softmax(yt);
                y = Kind::read_only(yt);
            }
            const auto d = Kind::dense(ds.data(), n, o);
            Kind::template softmax_backward<T>(y, g, d);
            g = Kind::read_only(d);
        }
        split_output_backward<Kind>(sb, k, v, t, g, dv.data(), dt.data(), packed.data());
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
