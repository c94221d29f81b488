// biaffine/detail/scorer/padded.hpp - the scorer's padded interface, the
// reference module's: `x [b, L, n_in]` plus lengths in, `[b, L, L(, o)]` out.
// Each sequence becomes a view of its first `length` rows and runs through
// the split-list path, so padding costs no FLOPs; padded cells are filled
// with what the reference holds there.
#pragma once

#include "biaffine/abi.hpp"

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
    return predict_padded_as<detail::full_scores_kind>(x, lengths, detail::no_heads{});
}

template <class T, class Backend, class Out>
template <class X3, class Lengths>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_padded(const X3& x, const Lengths& lengths, mode m)
{
    return forward_padded_as<detail::full_scores_kind>(x, lengths, detail::no_heads{}, m);
}

// The padded output of a kind, `[b, L, L(, o)]` or `[b, L, o]`, its padded
// cells filled (Kind::fill_padding); the kind's padded arguments `a` become
// per-sequence ones (Kind::padded_split_args: heads `[b, L]` -> lists).
template <class T, class Backend, class Out>
template <class Kind, class X3, class Lengths, class Args>
score_array<Out> biaffine_scorer<T, Backend, Out>::predict_padded_as(const X3& x, const Lengths& lengths,
                                                                     const Args& a) const
{
    const auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto H = Kind::padded_split_args(x, lengths, a, flat);
    const std::size_t b = views.size(), L = x.shape()[1], o = cfg_.labels;
    score_array<Out> y = Kind::template new_padded<Out>(b, L, o);
    predict_into<Kind>(views, H, [&](std::size_t k, std::size_t n) { return Kind::padded(y.data(), k, n, L, o); },
                       [](std::size_t, const auto&) {});
    Kind::fill_padding(y, views, padding<Out>(mode::eval));
    return y;
}

// Padded forward of a kind: `([b, L, ...], backprop)`, `backprop(dy)` of the
// output's shape -> `dx [b, L, n_in]` (zero at padded positions).
template <class T, class Backend, class Out>
template <class Kind, class X3, class Lengths, class Args>
std::pair<score_array<Out>, typename biaffine_scorer<T, Backend, Out>::padded_backprop_type>
biaffine_scorer<T, Backend, Out>::forward_padded_as(const X3& x, const Lengths& lengths, const Args& a, mode m)
{
    const auto views = padded_views(x, lengths);
    tracked_vector<std::int64_t> flat;
    const auto H = Kind::padded_split_args(x, lengths, a, flat);
    const std::size_t b = views.size(), L = x.shape()[1], o = cfg_.labels, n_in = cfg_.n_in;
    score_array<Out> y = Kind::template new_padded<Out>(b, L, o);
    kind_backprop<Kind> inner =
        forward_into<Kind>(views, H, m, [&](std::size_t k, std::size_t n) { return Kind::padded(y.data(), k, n, L, o); });
    Kind::fill_padding(y, views, padding<Out>(m));
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

// What a padded cell holds: 0 where the output is a softmax (what it gives a
// masked head), else the mask value (what a masked logit is), as T would
// hold it, converted as the outputs are.
template <class T, class Backend, class Out>
template <class O>
O biaffine_scorer<T, Backend, Out>::padding(mode m) const
{
    return softmax_in(m) ? O(0) : static_cast<O>(mask_value<T>());
}

BIAFFINE_NAMESPACE_END
