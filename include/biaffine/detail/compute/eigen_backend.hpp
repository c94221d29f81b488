// biaffine/detail/compute/eigen_backend.hpp - the scorer's compute on Eigen's
// products: every scalar type, every CPU.
//
// The bilinear part is two GEMMs per split and no transposed copies: T = Ua
// W' with W' = [hu, o * hv] (one GEMM per label straight from W's memory, so
// the weights are never copied), then T viewed as `[n * o, hv]` gives S_flat
// = Va T^T, which is S[m, l, o] row-major. The first GEMM is row-wise, so it
// runs on the packed rows of a whole batch; only the second needs the split
// boundaries. Short splits skip the GEMM's packing (row_dots.hpp).
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/detail/bilinear_math.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// bilinear_scores for a backend that computes T for the whole batch in one
/// call (its score_group_rows is the largest size_t).
template <class Backend, class T, class Each>
void bilinear_scores_whole(const scorer_dims& d, const T* w, const T* u, const std::size_t* off, std::size_t count,
                           T* t, T* packed, Each&& each)
{
    const std::size_t ldt = d.labels * d.hv();
    Backend::bilinear_left(d, w, u, off[count], t, packed);
    for (std::size_t k = 0; k < count; ++k) each(k, static_cast<const T*>(t) + off[k] * ldt, packed);
}

/// Rows of T a forward holds at once for N packed rows whose longest split
/// has max_len: a group of at most group_rows rows or one split, never more
/// than the batch.
inline std::size_t t_group_rows(std::size_t group_rows, std::size_t N, std::size_t max_len) noexcept
{
    return std::min(N, std::max(group_rows, max_len));
}

/// The scorer's compute on Eigen. Every operation of a backend, with the
/// shapes the scorer passes (N packed rows of a batch, h = hidden). The
/// scorer calls none of the products for a batch of only empty splits
/// (N = 0, when its buffers may be null): backends need no check for it.
///
///   packed_elements(d, max_len)        scratch elements the inference path carves for `packed`
///   train_packed_elements(d, max_len, rows)  the same for training (forward and backward) of a
///                                      batch of up to `rows` rows
///   projections(d, w, xp, N, u, v, packed)
///       u [N, hu] = relu(xp Wh^T + bh) | 1,  v [N, hv] = relu(xp Wd^T + bd) | 1
///   reads_items                        true: the scorer calls project_items(d, w, X, off, N, u, v,
///                                      packed) instead, on the splits' own rows (no gathered xp),
///                                      and input_backward reads them too (its xp is null)
///   bilinear_left(d, w, u, N, t, packed)           t [N, o * hv] = u W'
///   score_group_rows(d)                rows of T bilinear_scores computes before scoring their
///                                      splits (the largest size_t: the whole batch)
///   bilinear_scores(d, w, u, off, count, t, keep_t, packed, each)
///       T = u W' a group of splits at a time, then each(k, t_rows, packed_rest) for each of
///       the group's splits k (t_rows: its rows of T; packed_rest: what bilinear_scores
///       leaves of `packed` for split_scores). keep_t: t holds [N, o * hv] and keeps every
///       row; else t holds t_group_rows(...) rows, reused per group
///   split_scores(va, t_rows, o, s, packed)          one split's s [n, n * o] = va Tr^T
///   split_scores_backward(va, t_rows, o, ds, dva, dt_rows, packed)
///   head_scores(va, t, head_rows, o, y)             one split's y [n, o] at given heads
///   head_scores_backward(va, t, head_rows, o, dy, dva, dt)   dva overwritten, dt += (packed rows)
///   bilinear_left_backward(d, w, u, N, dt, du, dw, packed)   du = dT W'^T, dW += u^T dT; du's bias
///                                      column (U's ones) may be left unwritten: nothing reads it
///   relu_backward(d, a, width, N, scale, dz, db)   dz through relu (and dropout's scale), db += sums
///   input_backward(d, w, g, X, off, N, a, dau, dav, xp, packed, dX)
///       dZu, dZv = dAu, dAv through relu at a (relu_backward; dau, dav may be overwritten),
///       dbh, dbd += their sums, dWh += dZu^T X, dWd += dZv^T X, dX[k] = split k's rows of
///       dZu Wh + dZv Wd; xp [N, n_in] is scratch unless reads_items (then null)
template <class T>
struct eigen_backend {
    static constexpr const char* name = "eigen";
    /// What runs each operation, for benches and logs.
    static constexpr const char* operations =
        "projections, U.W', every backward product: Eigen GEMM; per-split scores and their backward: row_dots "
        "(short splits: use_row_dots), else Eigen GEMM";

    static std::size_t packed_elements(const scorer_dims&, std::size_t) noexcept { return 0; }
    static std::size_t train_packed_elements(const scorer_dims&, std::size_t, std::size_t) noexcept { return 0; }
    /// The projections and the input backward read a gathered copy of the
    /// inputs (Eigen's GEMM needs one matrix).
    static constexpr bool reads_items = false;

    static void projections(const scorer_dims& d, const weights_ref<T>& w, const T* xp, std::size_t N, T* u, T* v,
                            T*)
    {
        project(d, xp, N, w.wh, w.bh, d.bias_u, u);
        project(d, xp, N, w.wd, w.bd, d.bias_v, v);
    }

    static void bilinear_left(const scorer_dims& d, const T* w, const T* u, std::size_t N, T* t, T*)
    {
        detail::bilinear_left<T>(const_row_block(u, N, d.hu()), w, d.labels, d.hv(),
                                 row_block(t, N, d.labels * d.hv()));
    }

    // Eigen's GEMM packs W on every call: T for the whole batch at once.
    static std::size_t score_group_rows(const scorer_dims&) noexcept { return static_cast<std::size_t>(-1); }
    template <class Each>
    static void bilinear_scores(const scorer_dims& d, const T* w, const T* u, const std::size_t* off,
                                std::size_t count, T* t, bool, T* packed, Each&& each)
    {
        bilinear_scores_whole<eigen_backend>(d, w, u, off, count, t, packed, each);
    }

    /// Elements of `packed` split_scores needs for rows of hv over a split
    /// of up to max_len rows (the bf16 arithmetic's float dots use it too).
    static std::size_t split_packed_elements(std::size_t /*hv*/, std::size_t /*max_len*/) noexcept { return 0; }
    static void split_scores(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s, T*)
    {
        bilinear_right<T>(va, t_rows, labels, s);
    }

    static void split_scores_backward(const_row_map<T> va, const T* t_rows, std::size_t labels,
                                      score_view<const T> ds, row_map<T> dva, T* dt_rows, T*)
    {
        bilinear_right_backward<T>(va, t_rows, labels, ds, dva, dt_rows);
    }

    static void head_scores(const_row_map<T> va, const T* t, const std::size_t* head_rows, std::size_t labels,
                            seq_view<T> y)
    {
        detail::head_scores<T>(va, t, head_rows, labels, y);
    }

    static void head_scores_backward(const_row_map<T> va, const T* t, const std::size_t* head_rows,
                                     std::size_t labels, seq_view<const T> dy, row_map<T> dva, T* dt)
    {
        detail::head_scores_backward<T>(va, t, head_rows, labels, dy, dva, dt);
    }

    static void bilinear_left_backward(const scorer_dims& d, const T* w, const T* u, std::size_t N, const T* dt,
                                       T* du, T* dw, T*)
    {
        detail::bilinear_left_backward<T>(const_row_block(u, N, d.hu()), w, d.labels, d.hv(),
                                          const_row_block(dt, N, d.labels * d.hv()), row_block(du, N, d.hu()), dw);
    }

    /// dZ = dA where the unit came out positive (scaled like the kept units
    /// under dropout), else 0 - a select, so a NaN or infinite dA of a dead
    /// unit gives 0 - in place over the first h of each row of `dz` ([N,
    /// width], like `a`); db += the column sums of dZ.
    static void relu_backward(const scorer_dims& d, const T* a, std::size_t width, std::size_t N, T scale, T* dz,
                              T* db)
    {
        for (std::size_t r = 0; r < N; ++r) {
            const T* ar = a + r * width;
            T* dr = dz + r * width;
            for (std::size_t j = 0; j < d.hidden; ++j) {
                const T g = ar[j] > T(0) ? dr[j] * scale : T(0);
                dr[j] = g;
                db[j] += g;
            }
        }
    }

    /// relu_backward of both sides, in place: the first step of input_backward.
    static void relu_backward_both(const scorer_dims& d, const grads_ref<T>& g, std::size_t N, const relu_ref<T>& a,
                                   T* dzu, T* dzv)
    {
        relu_backward(d, a.u, d.hu(), N, a.scale, dzu, g.bh);
        relu_backward(d, a.v, d.hv(), N, a.scale, dzv, g.bd);
    }

    template <class Items>
    static void input_backward(const scorer_dims& d, const weights_ref<T>& w, const grads_ref<T>& g, const Items& X,
                               const std::size_t* off, std::size_t N, const relu_ref<T>& a, T* dzu, T* dzv, T* xp,
                               T*, span<const seq_view<T>> dX)
    {
        relu_backward_both(d, g, N, a, dzu, dzv);
        const auto h = static_cast<Eigen::Index>(d.hidden), n_in = static_cast<Eigen::Index>(d.n_in);
        gather_rows(X, off, d.n_in, xp);
        const auto x = const_row_block(xp, N, d.n_in);
        const auto zu = const_row_block(dzu, N, d.hu()).leftCols(h);
        const auto zv = const_row_block(dzv, N, d.hv()).leftCols(h);
        Eigen::Map<row_matrix<T>> dwh(g.wh, h, n_in), dwd(g.wd, h, n_in);
        dwh.noalias() += zu.transpose() * x;
        dwd.noalias() += zv.transpose() * x;
        // dX = dZu Wh + dZv Wd, into the packed buffer X no longer needs.
        Eigen::Map<const row_matrix<T>> wh(w.wh, h, n_in), wd(w.wd, h, n_in);
        auto dxp = row_block(xp, N, d.n_in);
        dxp.noalias() = zu * wh;
        dxp.noalias() += zv * wd;
        scatter_rows<T>(xp, off, d.n_in, dX);
    }

private:
    // out [N, h + bias] = relu(xp W^T + b), with the trailing column of ones.
    static void project(const scorer_dims& d, const T* xp, std::size_t N, const T* w, const T* b, bool bias, T* out)
    {
        if (N == 0) return;
        const std::size_t h = d.hidden, width = h + (bias ? 1 : 0);
        auto o = row_block(out, N, width);
        Eigen::Map<const row_matrix<T>> wm(w, static_cast<Eigen::Index>(h), static_cast<Eigen::Index>(d.n_in));
        Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(b, static_cast<Eigen::Index>(h));
        auto left = o.leftCols(static_cast<Eigen::Index>(h));
        left.noalias() = const_row_block(xp, N, d.n_in) * wm.transpose();
        left = (left.rowwise() + bv).cwiseMax(T(0));
        if (bias) o.col(static_cast<Eigen::Index>(h)).setOnes();
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END
