// biaffine/detail/scorer/forward.hpp - the scorer's forward and backward over
// split lists: one path for every output kind (full scores, labels at given
// heads: detail/output_kind.hpp). The compute backend object (backend_,
// detail/compute/interface.hpp) does the batch's work: projections (and the
// gather), dropout, every split's output with its softmax, and the same
// backward; it allocates the batch's activations (U, V, T, the kept
// outputs) and the scorer holds only handles to them. What is here is the
// order of its calls, the host scratch, which outputs are kept for
// backward, and preparing the backend when the parameters changed.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/tensor.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
// ------------------------------------------------------------ public calls

template <class T, class Backend, class Out>
template <class Items>
score_list<Out> biaffine_scorer<T, Backend, Out>::predict(const Items& X) const
{
    return predict_as<detail::full_scores_kind>(X, detail::no_heads{});
}

template <class T, class Backend, class Out>
template <class Items, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_stream(const Items& X, Sink&& sink) const
{
    predict_stream_as<detail::full_scores_kind>(X, detail::no_heads{}, sink);
}

template <class T, class Backend, class Out>
template <class Items, class Dest, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_stream_into(const Items& X, Dest&& dest, Sink&& sink) const
{
    stream_into<detail::full_scores_kind>(X, detail::no_heads{}, dest, sink);
}

template <class T, class Backend, class Out>
template <class Items>
std::pair<score_list<Out>, typename biaffine_scorer<T, Backend, Out>::backprop_type>
biaffine_scorer<T, Backend, Out>::forward(const Items& X, mode m)
{
    return forward_as<detail::full_scores_kind>(X, detail::no_heads{}, m);
}

// -------------------------------------------------- any output kind

template <class T, class Backend, class Out>
template <class Kind, class Items, class Args>
score_list<Out> biaffine_scorer<T, Backend, Out>::predict_as(const Items& X, const Args& a) const
{
    const std::size_t o = cfg_.labels;
    score_list<Out> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(Kind::template new_output<Out>(X[k].rows, o));
    predict_into<Kind>(
        X, a, [&](std::size_t k, std::size_t n) { return Kind::dense(Y[k].data(), n, o); },
        [](std::size_t, const typename Kind::template view<Out>&) {});
    return Y;
}

template <class T, class Backend, class Out>
template <class Kind, class Items, class Args, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_stream_as(const Items& X, const Args& a, Sink&& sink) const
{
    const char* what = "stream";
    scratch<Out> s(detail::packed_count<Out>(what, Kind::elements(detail::max_item_rows(X), cfg_.labels, what)));
    stream_into<Kind>(X, a, [&](std::size_t, std::size_t) { return s.data(); }, sink);
}

template <class T, class Backend, class Out>
template <class Kind, class Items, class Args, class Dest, class Sink>
void biaffine_scorer<T, Backend, Out>::predict_stream_into_as(const Items& X, const Args& a, Dest&& dest,
                                                              Sink&& sink) const
{
    stream_into<Kind>(X, a, dest, sink);
}

template <class T, class Backend, class Out>
template <class Kind, class Items, class Args>
std::pair<score_list<Out>, typename biaffine_scorer<T, Backend, Out>::template kind_backprop<Kind>>
biaffine_scorer<T, Backend, Out>::forward_as(const Items& X, const Args& a, mode m)
{
    const std::size_t o = cfg_.labels;
    score_list<Out> Y;
    Y.reserve(X.size());
    for (std::size_t k = 0; k < X.size(); ++k) Y.push_back(Kind::template new_output<Out>(X[k].rows, o));
    kind_backprop<Kind> bp =
        forward_into<Kind>(X, a, m, [&](std::size_t k, std::size_t n) { return Kind::dense(Y[k].data(), n, o); });
    return {std::move(Y), std::move(bp)};
}

// ---------------------------------------------------------------- helpers

// The streams of either kind: split k's output goes where `dest(k, n)`
// says, then `sink(k, view)` reads it there.
template <class T, class Backend, class Out>
template <class Kind, class Items, class Heads, class Dest, class Sink>
void biaffine_scorer<T, Backend, Out>::stream_into(const Items& X, const Heads& H, Dest&& dest, Sink&& sink) const
{
    const std::size_t o = cfg_.labels;
    predict_into<Kind>(
        X, H,
        [&](std::size_t k, std::size_t n) {
            return detail::caller_destination<Kind>("scorer stream", static_cast<Out*>(dest(k, n)), k, n, o);
        },
        [&](std::size_t k, typename Kind::template view<Out> y) { sink(k, Kind::read_only(y)); });
}

template <class T, class Backend, class Out>
template <class Items>
void biaffine_scorer<T, Backend, Out>::check_items(const Items& X) const
{
    for (std::size_t k = 0; k < X.size(); ++k) {
        if (X[k].cols != cfg_.n_in) {
            throw shape_error(detail::msg("scorer: split ", k, " has width ", X[k].cols,
                                          ", the weights expect n_in = ", cfg_.n_in));
        }
    }
}

// Row offsets of the splits in the packed batch; returns the total.
template <class T, class Backend, class Out>
template <class Items>
std::size_t biaffine_scorer<T, Backend, Out>::fill_offsets(const Items& X, std::size_t* off) const
{
    return detail::split_offsets(X, off);
}

// The backend with this scorer's current parameters: prepared again
// exactly when the parameter version moved since it last was.
template <class T, class Backend, class Out>
const Backend& biaffine_scorer<T, Backend, Out>::prepared_backend() const
{
    const std::uint64_t v = parameter_version();
    if (backend_.prepared_version() != v) backend_.prepare(v, weights());
    return backend_;
}

// U, V (after relu and dropout) and T = U W' for every packed row
// (backward's recompute).
template <class T, class Backend, class Out>
template <class Items>
void biaffine_scorer<T, Backend, Out>::forward_activations(const Items& X, const std::size_t* off, std::size_t N,
                                                           bool drop, std::uint64_t seed,
                                                           const typename Backend::acts& a, T* packed) const
{
    const Backend& be = prepared_backend();
    be.project(X, off, N, a, packed);
    if (drop) be.dropout(cfg_.dropout, seed, a, off, X.size());
    be.bilinear_left(a, N, packed);
}

// Inference of one output kind: each split's output into `dest(k, n)` (a
// view of Out) and `done(k, y)` called once it is there. With an output type
// apart from T, the backend writes each split into one split of T scratch,
// converted into dest as it is stored.
template <class T, class Backend, class Out>
template <class Kind, class Items, class Heads, class Dest, class Done>
void biaffine_scorer<T, Backend, Out>::predict_into(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
{
    check_items(X);
    detail::check_kind_heads<Kind>("scorer", X, H);
    if constexpr (converts) {
        const std::size_t max_n = detail::max_item_rows(X);
        const std::size_t o = cfg_.labels;
        scratch<T> buf(detail::packed_count<T>(Kind::output_name, Kind::elements(max_n, o, Kind::output_name)));
        predict_compute<Kind>(
            X, H, [&](std::size_t, std::size_t n) { return Kind::dense(buf.data(), n, o); },
            [&](std::size_t k, typename Kind::template view<T> y) {
                auto yo = dest(k, Kind::tokens(y));
                Kind::convert(yo, Kind::read_only(y));
                done(k, yo);
            });
    } else {
        predict_compute<Kind>(X, H, dest, done);
    }
}

// predict_into's computation, in T: the backend's inference (every
// precision's), each split's output into `dest(k, n)` and `done(k, y)`.
template <class T, class Backend, class Out>
template <class Kind, class Items, class Heads, class Dest, class Done>
void biaffine_scorer<T, Backend, Out>::predict_compute(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
{
    prepared_backend().template predict<Kind>(X, H, dest, done);
}

// Training (or eval-mode) forward of one output kind: what backward needs
// goes into the saved batch that moves into the callback.
template <class T, class Backend, class Out>
template <class Kind, class Items, class Heads, class Dest>
typename biaffine_scorer<T, Backend, Out>::template kind_backprop<Kind> biaffine_scorer<T, Backend, Out>::forward_into(
    const Items& X, const Heads& H, mode m, Dest&& dest)
{
    check_items(X);
    // Checked before the dropout seed is drawn: a bad call changes nothing.
    detail::check_kind_heads<Kind>("scorer", X, H);
    ensure_gradients();  // the callback accumulates into them
    const Backend& be = prepared_backend();
    const std::size_t count = X.size(), o = cfg_.labels;
    saved_batch sb;
    begin_saved(X, m, sb);
    const std::size_t N = sb.off[count];
    if constexpr (Kind::gathers_rows) sb.head_rows.resize(N);
    Kind::fill_rows(X, H, sb.off.data(), sb.head_rows.data());
    const bool keep_y = sb.softmax && sb.kept;
    std::size_t ys = 0;
    if (keep_y) {
        if constexpr (Kind::per_row) {
            // split k's at off[k] * (one row's elements)
            ys = detail::packed_count<T>(Kind::saved_name, N, Kind::elements(1, o, Kind::saved_name));
        } else {
            sb.y_off.resize(count + 1);
            std::uint64_t total = 0;
            for (std::size_t k = 0; k < count; ++k) {
                sb.y_off[k] = static_cast<std::size_t>(total);
                total = detail::checked_add(total, Kind::elements(sb.off[k + 1] - sb.off[k], o, Kind::saved_name),
                                            Kind::saved_name);
            }
            sb.y_off[count] = ys = detail::packed_count<T>(Kind::saved_name, total);
        }
    }
    // Kept activations (and outputs) are held by the backend and move into
    // the callback; recomputed ones are its scratch that dies with this call
    // (none carved when kept).
    if (sb.kept) sb.held = be.hold(N, ys);
    const auto carved = be.carve(sb.kept ? 0 : N);
    const auto& act = sb.kept ? sb.held.acts() : carved.acts();
    const std::size_t max_n = detail::max_split_rows(sb.off.data(), count);
    // An output type apart from T: each split's output in T here, converted
    // into dest once the backend has finished it (softmax and kept copy in T).
    scratch<T> buf(converts ? detail::packed_count<T>(Kind::output_name, Kind::elements(max_n, o, Kind::output_name))
                            : 0);
    scratch<T> packed(be.packed_elements(Kind::gathers_rows ? 0 : max_n));
    be.project(X, sb.off.data(), N, act, packed.data());
    if (sb.drop) be.dropout(cfg_.dropout, sb.seed, act, sb.off.data(), count);
    const auto keep = [&](std::size_t k) { return keep_y ? kept_output_offset<Kind>(sb, k) : detail::no_kept; };
    if constexpr (converts) {
        be.template score_outputs<Kind>(
            act, sb.off.data(), count, sb.head_rows.data(), true, sb.softmax, packed.data(),
            [&](std::size_t, std::size_t n) { return Kind::dense(buf.data(), n, o); }, keep,
            [&](std::size_t k, typename Kind::template view<T> y) {
                Kind::convert(dest(k, Kind::tokens(y)), Kind::read_only(y));
            });
    } else {
        be.template score_outputs<Kind>(act, sb.off.data(), count, sb.head_rows.data(), true, sb.softmax,
                                        packed.data(), dest, keep,
                                        [](std::size_t, typename Kind::template view<T>) {});
    }
    return kind_backprop<Kind>(
        [this, sb = std::move(sb)](span<const typename Kind::template view<const Out>> dY, span<const seq_view<T>> dX) {
            backward<Kind>(sb, dY, dX);
        });
}

// Where split k's kept softmax outputs start in the saved block.
template <class T, class Backend, class Out>
template <class Kind>
std::size_t biaffine_scorer<T, Backend, Out>::kept_output_offset(const saved_batch& sb, std::size_t k) const noexcept
{
    if constexpr (Kind::per_row) {
        return sb.off[k] * static_cast<std::size_t>(Kind::elements(1, cfg_.labels, Kind::saved_name));
    } else {
        return sb.y_off[k];
    }
}

template <class T, class Backend, class Out>
template <class Kind>
void biaffine_scorer<T, Backend, Out>::backward(const saved_batch& sb,
                                                span<const typename Kind::template view<const Out>> dY,
                                                span<const seq_view<T>> dX)
{
    const std::size_t count = sb.views.size(), o = cfg_.labels;
    check_backward_args(sb, dY, dX, Kind::grad_name, [](auto&&... a) { Kind::template check_grad<Out>(a...); });
    const Backend& be = prepared_backend();
    const std::size_t N = sb.off[count];
    const std::size_t* off = sb.off.data();
    const std::size_t max_n = detail::max_split_rows(off, count);
    const bool keep = sb.kept;
    const std::size_t n_u = detail::packed_count<T>("packed U", N, hu());
    const std::size_t n_v = detail::packed_count<T>("packed V", N, hv());
    const std::size_t n_t = detail::packed_count<T>("packed T", N, o, hv());
    const std::size_t n_y = detail::packed_count<T>(Kind::output_name, Kind::elements(max_n, o, Kind::output_name));
    // Recomputed activations (recompute_in_backward): the backend's scratch.
    const auto carved = be.carve(keep ? 0 : N);
    const auto& act = keep ? sb.held.acts() : carved.acts();
    scratch<T> y_tmp(keep || !sb.softmax ? 0 : n_y);
    scratch<T> packed(be.train_packed_elements(Kind::gathers_rows ? 0 : max_n, N));
    if (!keep) forward_activations(sb.views, off, N, sb.drop, sb.seed, act, packed.data());
    scratch<T> dt(n_t);
    scratch<T> dv(n_v);
    scratch<T> du(n_u);
    scratch<T> ds(sb.softmax ? n_y : 0);
    be.template outputs_backward<Kind>(
        act, off, count, sb.head_rows.data(), dY, sb.softmax,
        [&](std::size_t k) { return keep ? kept_output_offset<Kind>(sb, k) : detail::no_kept; }, y_tmp.data(),
        ds.data(), dv.data(), dt.data(), packed.data());
    be.projections_backward(sb.views, off, N, act, dt.data(), dv.data(), du.data(), sb.drop ? cfg_.dropout : 0.0,
                            grads(), dX, packed.data());
}

// Offsets, views, mode flags and the dropout seed of one training forward
// (the same draw for full scores and labels at given heads).
template <class T, class Backend, class Out>
template <class Items>
void biaffine_scorer<T, Backend, Out>::begin_saved(const Items& X, mode m, saved_batch& sb)
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
