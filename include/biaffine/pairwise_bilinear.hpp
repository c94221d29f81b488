// biaffine/pairwise_bilinear.hpp - the pairwise bilinear kernel, forward and backward.
//
//   S[m, l, o] = sum_{i,j} u[l, i] * W[o, i, j] * v[m, j]
//
// rows m are dependents, columns l head candidates, labels last; u = [head, 1]
// when bias_u, v = [dep, 1] when bias_v. Evaluated as two GEMMs per split and
// no transposed copies: T = u . W' with W' = [hu, o * hv] (one GEMM per label
// straight from W's memory, so the weights are never copied), then T viewed as
// `[n * o, hv]` gives S_flat = v . T^T, which is S[m, l, o] row-major. The
// first GEMM is row-wise, so callers run it on the packed rows of a whole
// batch; only the second needs the split boundaries. For short splits the
// second product (and its backward) skips the GEMM's packing: see
// detail/row_dots.hpp and use_row_dots / use_row_combos below.
//
// This header is kernel math only; the layers (projections, masks, softmax,
// batching) live elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/gemm_kernel.hpp"
#include "biaffine/detail/row_dots.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/tensor.hpp"

namespace biaffine {
namespace detail {

/// T = Ua . W' : `Ua [N, hu]`, `W [o, hu, hv]` (row-major memory), `T [N, o * hv]`.
template <class T>
void bilinear_left(const_row_map<T> ua, const T* w, std::size_t labels, std::size_t hv, row_map<T> t)
{
    const auto hu = ua.cols();
    const auto hv_i = static_cast<Eigen::Index>(hv);
    for (std::size_t k = 0; k < labels; ++k) {
        Eigen::Map<const row_matrix<T>> wk(w + k * static_cast<std::size_t>(hu) * hv, hu, hv_i);
        t.middleCols(static_cast<Eigen::Index>(k) * hv_i, hv_i).noalias() = ua * wk;
    }
}

/// Backward of bilinear_left: `dUa = dT . W'^T` (overwritten) and
/// `dW += Ua^T . dT` (accumulated).
template <class T>
void bilinear_left_backward(const_row_map<T> ua, const T* w, std::size_t labels, std::size_t hv,
                            const_row_map<T> dt, row_map<T> dua, T* dw)
{
    const auto hu = ua.cols();
    const auto hv_i = static_cast<Eigen::Index>(hv);
    dua.setZero();
    for (std::size_t k = 0; k < labels; ++k) {
        const std::size_t off = k * static_cast<std::size_t>(hu) * hv;
        Eigen::Map<const row_matrix<T>> wk(w + off, hu, hv_i);
        Eigen::Map<row_matrix<T>> dwk(dw + off, hu, hv_i);
        const auto dtk = dt.middleCols(static_cast<Eigen::Index>(k) * hv_i, hv_i);
        dua.noalias() += dtk * wk.transpose();
        dwk.noalias() += ua.transpose() * dtk;
    }
}

/// When the per-split products skip the packed GEMM (row_dots.hpp): the
/// crossovers measured on AVX2 with bench_kernels (BM_bilinear_right and
/// BM_bilinear_right_backward, hv = 129): below them packing dominates the
/// GEMM; above, its cache-blocked micro-kernel wins.
inline bool use_row_dots(Eigen::Index n, std::size_t labels)
{
    return n <= 12 && static_cast<std::size_t>(n) * labels <= 256;
}
inline bool use_row_combos(Eigen::Index n, std::size_t labels)
{
    return n <= 12 && static_cast<std::size_t>(n) * labels <= 300;
}

/// Scores of one split: `S [n, n * o] = Va [n, hv] . Tr^T` with `Tr` the
/// split's rows of T viewed as `[n * o, hv]` (contiguous: T is row-major).
template <class T>
void bilinear_right(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s)
{
    const auto n = va.rows();
    const auto hv = va.cols();
    if (n == 0) return;
    const auto no = n * static_cast<Eigen::Index>(labels);
    if (use_row_dots(n, labels)) {
        // Short splits (most of a document's): dot products straight from the
        // operands beat a packed GEMM, see row_dots.hpp.
        row_dots(va.data(), va.outerStride(), n, t_rows, hv, no, hv, s.data, s.row_stride);
        return;
    }
    Eigen::Map<const row_matrix<T>> tr(t_rows, no, hv);
    s.map().noalias() = va * tr.transpose();
}

/// Where bilinear_right_kernel takes the GEMM kernel over Eigen's GEMM (and
/// row_dots): the kernel's 16-column panels run over the split's n tokens,
/// so it wins when they are mostly full. Measured on AVX2 (hv = 129): with
/// 4+ labels when at least 70% full, with fewer from n = 32 and 80% full
/// (n = 20, 24 and 25 lose by 10-35% with one label).
inline bool use_gemm_kernel(Eigen::Index n, std::size_t labels)
{
    if (use_row_dots(n, labels)) return false;
    const Eigen::Index cols = (n + 15) / 16 * 16;
    return labels >= 4 ? 10 * n >= 7 * cols : n >= 32 && 5 * n >= 4 * cols;
}

/// Floats of `packed` that bilinear_right_kernel needs for splits of up to
/// `n` tokens (0 where the kernel is not built).
template <class T>
std::size_t bilinear_right_packed_size(std::size_t hv, std::size_t n)
{
    return gemm_supported<T>() ? gemm_packed_size(hv, n) : 0;
}

/// bilinear_right through the GEMM kernel where it is built (float, AVX2 +
/// FMA) and the split is past the row_dots crossover: S is stored as
/// (Tr . Va^T)^T, so only Va^T is packed (into `packed`, at least
/// bilinear_right_packed_size(hv, n) floats), not the n * o rows of Tr.
/// Elsewhere the same as bilinear_right.
template <class T>
void bilinear_right_kernel(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s, T* packed)
{
    const auto n = va.rows();
    if constexpr (gemm_supported<T>()) {
        if (n != 0 && use_gemm_kernel(n, labels)) {
            const auto hv = static_cast<std::size_t>(va.cols());
            const auto nn = static_cast<std::size_t>(n);
            gemm_pack_b(va.data(), 1, va.outerStride(), hv, nn, packed);  // Va^T: (k, m) = Va[m, k]
            gemm_store_transposed(t_rows, static_cast<std::ptrdiff_t>(hv), nn * labels, hv, packed, nn, s.data,
                                  s.row_stride);
            return;
        }
    }
    (void)packed;
    bilinear_right<T>(va, t_rows, labels, s);
}

/// Backward of bilinear_right for one split: `dVa = dS . Tr` and
/// `dTr = dS^T . Va` (both overwritten).
template <class T>
void bilinear_right_backward(const_row_map<T> va, const T* t_rows, std::size_t labels,
                             score_view<const T> ds, row_map<T> dva, T* dt_rows)
{
    const auto n = va.rows();
    const auto hv = va.cols();
    if (n == 0) return;
    const auto no = n * static_cast<Eigen::Index>(labels);
    if (use_row_combos(n, labels)) {
        row_combos(ds.data, ds.row_stride, 1, n, no, t_rows, hv, hv, dva.data(), dva.outerStride());
        row_combos(ds.data, 1, ds.row_stride, no, n, va.data(), va.outerStride(), hv, dt_rows, hv);
        return;
    }
    Eigen::Map<const row_matrix<T>> tr(t_rows, no, hv);
    Eigen::Map<row_matrix<T>> dtr(dt_rows, no, hv);
    const auto dsm = ds.map();
    dva.noalias() = dsm * tr;
    dtr.noalias() = dsm.transpose() * va;
}

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

}  // namespace biaffine
