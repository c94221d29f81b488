// biaffine/detail/bilinear_math.hpp - the bilinear products as free math on
// Eigen maps: T = Ua W' and its backward, one split's scores S = Va Tr^T and
// their backward, labels at given heads and their backward. The Eigen
// backend (detail/compute/eigen_backend.hpp) runs on them, and so does the
// public pairwise_bilinear.hpp, which must not depend on a backend.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/row_dots.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
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

/// Whether a split's scores skip the packed GEMM for row_dots (forward) and
/// row_combos (backward): see BIAFFINE_ROW_DOTS_MAX_N in config.hpp.
inline bool use_row_dots(Eigen::Index n, std::size_t labels)
{
    const std::size_t rows = static_cast<std::size_t>(n) * labels;
    return (n <= BIAFFINE_ROW_DOTS_MAX_N && rows <= BIAFFINE_ROW_DOTS_MAX_ROWS) || rows <= BIAFFINE_ROW_DOTS_SMALL_ROWS;
}
inline bool use_row_combos(Eigen::Index n, std::size_t labels)
{
    return n <= BIAFFINE_ROW_DOTS_MAX_N && static_cast<std::size_t>(n) * labels <= BIAFFINE_ROW_COMBOS_MAX_ROWS;
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

/// Label scores at given heads for one split: `y [n, o]`, row m =
/// `T[head_rows[m]]` viewed `[o, hv]` times `va[m]`. `head_rows` index the
/// packed rows of T (the split's offset included), so each dependent costs
/// o * hv multiply-adds and no `[n, n, o]` block is ever formed.
template <class T>
void head_scores(const_row_map<T> va, const T* t, const std::size_t* head_rows, std::size_t labels, seq_view<T> y)
{
    const auto hv = va.cols();
    const auto o = static_cast<Eigen::Index>(labels);
    auto ym = y.map();
    for (Eigen::Index m = 0; m < va.rows(); ++m) {
        Eigen::Map<const row_matrix<T>> tm(t + head_rows[m] * labels * static_cast<std::size_t>(hv), o, hv);
        ym.row(m).noalias() = va.row(m) * tm.transpose();
    }
}

/// Backward of head_scores: `dVa[m] = dy[m] . T[head_rows[m]]` (overwritten)
/// and `dT[head_rows[m]] += dy[m]^T . va[m]` (accumulated: several dependents
/// may share a head).
template <class T>
void head_scores_backward(const_row_map<T> va, const T* t, const std::size_t* head_rows, std::size_t labels,
                          seq_view<const T> dy, row_map<T> dva, T* dt)
{
    const auto hv = va.cols();
    const auto o = static_cast<Eigen::Index>(labels);
    const auto dym = dy.map();
    for (Eigen::Index m = 0; m < va.rows(); ++m) {
        const std::size_t at = head_rows[m] * labels * static_cast<std::size_t>(hv);
        Eigen::Map<const row_matrix<T>> tm(t + at, o, hv);
        Eigen::Map<row_matrix<T>> dtm(dt + at, o, hv);
        dva.row(m).noalias() = dym.row(m) * tm;
        dtm.noalias() += dym.row(m).transpose() * va.row(m);
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
