// biaffine/detail/scorer/padded.hpp - the scorer's padded interface, the
// reference module's: `x [b, L, n_in]` plus lengths in, `[b, L, L(, o)]` out.
// Each sequence becomes a view of its first `length` rows and runs through
// the split-list path, so padding costs no FLOPs; padded cells are filled
// with what the reference holds there.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

template <class T, class Backend, class Out>
template <class X3, class Lengths>
score_array<Out> biaffine_scorer<T, Backend, Out>::predict_padded(const X3& x, const Lengths& lengths) const
{
    return predict_padded_kind<detail::full_scores_kind>(padded_views(x, lengths), detail::no_heads{}, x.shape()[1]);
}

template <class T, class Backend, class Out>
template <class X3, class Lengths>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_padded(const X3& x, const Lengths& lengths, mode m)
{
    return forward_padded_kind<detail::full_scores_kind>(padded_views(x, lengths), detail::no_heads{}, x.shape()[1],
                                                         m);
}

// The padded output of a kind, `[b, L, L(, o)]` or `[b, L, o]`, padded cells
// not yet filled (labels at heads: zeros from the start).
template <class T, class Backend, class Out>
template <class Kind>
score_array<Out> biaffine_scorer<T, Backend, Out>::new_padded(std::size_t b, std::size_t L) const
{
    if constexpr (Kind::heads) {
        const std::size_t o = cfg_.labels;
        detail::to_index_size(detail::checked_product("padded labels", b, L, o, sizeof(Out)), "padded labels");
        return xt::zeros<Out>({b, L, o});
    } else {
        return score_array<Out>::from_shape(padded_shape(b, L));
    }
}

template <class T, class Backend, class Out>
template <class Kind, class Views, class Heads>
score_array<Out> biaffine_scorer<T, Backend, Out>::predict_padded_kind(const Views& views, const Heads& H, std::size_t L) const
{
    const std::size_t b = views.size(), o = cfg_.labels;
    score_array<Out> y = new_padded<Kind>(b, L);
    predict_into<Kind>(views, H, [&](std::size_t k, std::size_t n) { return Kind::padded(y.data(), k, n, L, o); },
                       [](std::size_t, const auto&) {});
    if constexpr (!Kind::heads) fill_padding(y, views, mode::eval);
    return y;
}

// Padded forward of a kind: `([b, L, ...], backprop)`, `backprop(dy)` of the
// output's shape -> `dx [b, L, n_in]` (zero at padded positions).
template <class T, class Backend, class Out>
template <class Kind, class Views, class Heads>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_padded_kind(const Views& views, const Heads& H, std::size_t L, mode m)
{
    const std::size_t b = views.size(), o = cfg_.labels, n_in = cfg_.n_in;
    score_array<Out> y = new_padded<Kind>(b, L);
    kind_backprop<Kind> inner =
        forward_into<Kind>(views, H, m, [&](std::size_t k, std::size_t n) { return Kind::padded(y.data(), k, n, L, o); });
    if constexpr (!Kind::heads) fill_padding(y, views, m);
    tracked_vector<std::size_t> lens(b);
    for (std::size_t k = 0; k < b; ++k) lens[k] = views[k].rows;
    auto shape = y.shape();
    padded_backprop_type bp([inner = std::move(inner), lens = std::move(lens), shape, L, o,
                             n_in](const score_array<Out>& dy) mutable {
        if (!std::equal(dy.shape().begin(), dy.shape().end(), shape.begin(), shape.end())) {
            throw shape_error(detail::msg(
                "forward_padded backprop: dy must have the output's shape ",
                detail::shape_str(std::vector<std::size_t>(shape.begin(), shape.end())), ", got ",
                detail::shape_str(std::vector<std::size_t>(dy.shape().begin(), dy.shape().end()))));
        }
        const std::size_t b = lens.size();
        detail::to_index_size(detail::checked_product("padded input gradient", b, L, n_in, sizeof(T)),
                              "padded input gradient");
        tensor<T, 3> dx = xt::zeros<T>({b, L, n_in});
        tracked_vector<typename Kind::template view<const Out>> dys(b);
        tracked_vector<seq_view<T>> dxs(b);
        for (std::size_t k = 0; k < b; ++k) {
            dys[k] = Kind::padded(dy.data(), k, lens[k], L, o);
            dxs[k] = {dx.data() + k * L * n_in, lens[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1};
        }
        inner(span<const typename Kind::template view<const Out>>(dys.data(), b), span<const seq_view<T>>(dxs.data(), b));
        return dx;
    });
    return {std::move(y), std::move(bp)};
}

template <class T, class Backend, class Out>
typename score_array<Out>::shape_type biaffine_scorer<T, Backend, Out>::padded_shape(std::size_t b, std::size_t L) const
{
    detail::checked_product("padded scores", b, L, L, cfg_.labels, sizeof(Out));
    if (cfg_.labels == 1) return {b, L, L};
    return {b, L, L, cfg_.labels};
}

template <class T, class Backend, class Out>
template <class X3, class Lengths>
tracked_vector<seq_view<const T>> biaffine_scorer<T, Backend, Out>::padded_views(const X3& x, const Lengths& lengths) const
{
    if (x.dimension() != 3) {
        throw shape_error(detail::msg("padded input: expected x [b, L, n_in], got ", x.dimension(), " dimensions"));
    }
    const std::size_t b = x.shape()[0], L = x.shape()[1];
    if (x.shape()[2] != cfg_.n_in) {
        throw shape_error(detail::msg("padded input: x is [", b, ", ", L, ", ", x.shape()[2],
                                      "] but the scorer expects n_in = ", cfg_.n_in));
    }
    if (static_cast<std::size_t>(lengths.size()) != b) {
        throw shape_error(detail::msg("padded input: ", lengths.size(), " lengths for a batch of ", b));
    }
    tracked_vector<seq_view<const T>> views(b);
    const auto st = x.strides();
    for (std::size_t k = 0; k < b; ++k) {
        const auto len = lengths[k];
        if (len < 0 || static_cast<std::size_t>(len) > L) {
            throw length_error(detail::msg("padded input: sequence ", k, " has length ", len, ", expected 0..", L));
        }
        views[k] = {x.data() + x.data_offset() + static_cast<std::ptrdiff_t>(k) * st[0], static_cast<std::size_t>(len),
                    cfg_.n_in, L > 1 ? static_cast<std::ptrdiff_t>(st[1]) : static_cast<std::ptrdiff_t>(cfg_.n_in),
                    cfg_.n_in > 1 ? static_cast<std::ptrdiff_t>(st[2]) : 1};
    }
    return views;
}

// Padded cells: 0 where the output is a softmax (what it gives a masked
// head), else the mask value (what a masked logit is).
template <class T, class Backend, class Out>
template <class Views>
void biaffine_scorer<T, Backend, Out>::fill_padding(score_array<Out>& y, const Views& views, mode m) const
{
    const std::size_t b = y.shape()[0], L = y.shape()[1], o = cfg_.labels;
    // The mask as T would hold it, converted as the outputs are.
    const Out pad = softmax_in(m) ? Out(0) : static_cast<Out>(mask_value<T>());
    for (std::size_t k = 0; k < b; ++k) {
        const std::size_t n = views[k].rows;
        Out* base = y.data() + k * L * L * o;
        for (std::size_t r = 0; r < L; ++r) {
            Out* row = base + r * L * o;
            const std::size_t first = r < n ? n * o : 0;
            std::fill(row + first, row + L * o, pad);
        }
    }
}

BIAFFINE_NAMESPACE_END
