// biaffine/pairwise_bilinear.hpp - the pairwise bilinear kernel, forward and backward.
//
//   S[m, l, o] = sum_{i,j} u[l, i] * W[o, i, j] * v[m, j]
//
// rows m are dependents, columns l head candidates, labels last; u = [head, 1]
// when bias_u, v = [dep, 1] when bias_v. Computed per sequence as two GEMMs,
// T = u . W' and S_flat = v . T^T (see detail/bilinear_math.hpp, whose
// products these are: the same ones the scorer runs on Eigen).
//
// This header is the padded reference interface of the bilinear alone; the
// scorer (projections, masks, softmax) and the layers live elsewhere.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/bilinear_math.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

// Copies u [L, h] into ua [L, h + bias] with a trailing column of ones.
template <class T>
void augment(const T* u, std::size_t rows, std::size_t h, bool bias, T* ua)
{
    const std::size_t w = h + (bias ? 1 : 0);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < h; ++c) ua[r * w + c] = u[r * h + c];
        if (bias) ua[r * w + h] = T(1);
    }
}

template <class Array>
void check_bilinear_shapes(const Array& u, const Array& v, const Array& w, bool bias_u, bool bias_v)
{
    if (u.dimension() != 3 || v.dimension() != 3 || w.dimension() != 3) {
        throw shape_error("pairwise_bilinear: u, v must be [b, L, h] and W [o, h + bias_u, h + bias_v]");
    }
    if (u.shape() != v.shape()) {
        throw shape_error(msg("pairwise_bilinear: u is [", u.shape()[0], ", ", u.shape()[1], ", ", u.shape()[2],
                              "] but v is [", v.shape()[0], ", ", v.shape()[1], ", ", v.shape()[2], "]"));
    }
    const std::size_t h = u.shape()[2];
    if (w.shape()[1] != h + (bias_u ? 1 : 0) || w.shape()[2] != h + (bias_v ? 1 : 0)) {
        throw shape_error(msg("pairwise_bilinear: W is [", w.shape()[0], ", ", w.shape()[1], ", ", w.shape()[2],
                              "], expected [o, ", h + (bias_u ? 1 : 0), ", ", h + (bias_v ? 1 : 0), "]"));
    }
    // The output [b, L, L, o] and the per-sequence T [L, o * hv], checked
    // before xtensor multiplies the shapes out unchecked.
    using value_t = std::remove_const_t<std::remove_reference_t<decltype(*u.data())>>;
    const std::size_t b = u.shape()[0], L = u.shape()[1], o = w.shape()[0];
    to_index_size(checked_product("pairwise_bilinear output", b, L, L, o, sizeof(value_t)), "pairwise_bilinear output");
    to_index_size(checked_product("pairwise_bilinear T", L, o, w.shape()[2], sizeof(value_t)), "pairwise_bilinear T");
}

}  // namespace detail

/// Pairwise bilinear forward on padded batches (every position scored, no
/// lengths, as the reference module does).
/// `u, v: [b, L, h]`, `W: [o, h + bias_u, h + bias_v]` -> `[b, L, L, o]`.
template <class T>
tensor<T, 4> pairwise_bilinear(const tensor<T, 3>& u, const tensor<T, 3>& v, const tensor<T, 3>& w, bool bias_u,
                               bool bias_v)
{
    detail::check_bilinear_shapes(u, v, w, bias_u, bias_v);
    const std::size_t b = u.shape()[0], L = u.shape()[1], h = u.shape()[2], o = w.shape()[0];
    const std::size_t hu = w.shape()[1], hv = w.shape()[2];
    tensor<T, 4> y = tensor<T, 4>::from_shape({b, L, L, o});
    tensor<T, 2> ua = tensor<T, 2>::from_shape({L, hu});
    tensor<T, 2> va = tensor<T, 2>::from_shape({L, hv});
    tensor<T, 2> t = tensor<T, 2>::from_shape({L, o * hv});
    for (std::size_t s = 0; s < b; ++s) {
        detail::augment(u.data() + s * L * h, L, h, bias_u, ua.data());
        detail::augment(v.data() + s * L * h, L, h, bias_v, va.data());
        detail::bilinear_left<T>(detail::const_row_block(ua.data(), L, hu), w.data(), o, hv, detail::row_block(t.data(), L, o * hv));
        detail::bilinear_right<T>(detail::const_row_block(va.data(), L, hv), t.data(), o,
                                  score_view<T>{y.data() + s * L * L * o, L, o, static_cast<std::ptrdiff_t>(L * o)});
    }
    return y;
}

/// Gradients of pairwise_bilinear for `dy [b, L, L, o]`: returns `{du, dv}`
/// (`[b, L, h]` each) and accumulates into `dw [o, hu, hv]`.
template <class T>
std::pair<tensor<T, 3>, tensor<T, 3>> pairwise_bilinear_backward(const tensor<T, 3>& u, const tensor<T, 3>& v,
                                                                 const tensor<T, 3>& w, bool bias_u, bool bias_v,
                                                                 const tensor<T, 4>& dy, tensor<T, 3>& dw)
{
    detail::check_bilinear_shapes(u, v, w, bias_u, bias_v);
    const std::size_t b = u.shape()[0], L = u.shape()[1], h = u.shape()[2], o = w.shape()[0];
    const std::size_t hu = w.shape()[1], hv = w.shape()[2];
    if (dy.shape() != typename tensor<T, 4>::shape_type{b, L, L, o}) {
        throw shape_error(detail::msg("pairwise_bilinear_backward: dy must be [", b, ", ", L, ", ", L, ", ", o, "]"));
    }
    if (dw.shape() != w.shape()) {
        throw shape_error("pairwise_bilinear_backward: dw must have W's shape");
    }
    tensor<T, 3> du = tensor<T, 3>::from_shape({b, L, h});
    tensor<T, 3> dv = tensor<T, 3>::from_shape({b, L, h});
    tensor<T, 2> ua = tensor<T, 2>::from_shape({L, hu});
    tensor<T, 2> va = tensor<T, 2>::from_shape({L, hv});
    tensor<T, 2> t = tensor<T, 2>::from_shape({L, o * hv});
    tensor<T, 2> dt = tensor<T, 2>::from_shape({L, o * hv});
    tensor<T, 2> dua = tensor<T, 2>::from_shape({L, hu});
    tensor<T, 2> dva = tensor<T, 2>::from_shape({L, hv});
    for (std::size_t s = 0; s < b; ++s) {
        detail::augment(u.data() + s * L * h, L, h, bias_u, ua.data());
        detail::augment(v.data() + s * L * h, L, h, bias_v, va.data());
        detail::bilinear_left<T>(detail::const_row_block(ua.data(), L, hu), w.data(), o, hv, detail::row_block(t.data(), L, o * hv));
        detail::bilinear_right_backward<T>(
            detail::const_row_block(va.data(), L, hv), t.data(), o,
            score_view<const T>{dy.data() + s * L * L * o, L, o, static_cast<std::ptrdiff_t>(L * o)},
            detail::row_block(dva.data(), L, hv), dt.data());
        detail::bilinear_left_backward<T>(detail::const_row_block(ua.data(), L, hu), w.data(), o, hv,
                                          detail::const_row_block(dt.data(), L, o * hv), detail::row_block(dua.data(), L, hu),
                                          dw.data());
        for (std::size_t r = 0; r < L; ++r) {
            for (std::size_t c = 0; c < h; ++c) {
                du(s, r, c) = dua(r, c);
                dv(s, r, c) = dva(r, c);
            }
        }
    }
    return {std::move(du), std::move(dv)};
}

BIAFFINE_NAMESPACE_END
