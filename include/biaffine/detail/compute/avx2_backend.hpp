// biaffine/detail/compute/avx2_backend.hpp - the scorer's float compute on the
// AVX2/FMA kernel of avx2_kernel.hpp, where it measurably beats Eigen (tuned
// on an AVX2 AMD EPYC; see config.hpp for the numbers).
//
// What it changes against eigen_backend<float>:
//   - the projections read the splits' own rows by pointer (no gathered
//     copy of the batch; rows with a column stride are copied a row block at
//     a time), a row block for both projections at a time, and pack only
//     Wh^T and Wd^T; bias and relu are applied in registers before the one
//     store;
//   - T = U W' packs each label's block of W in turn (a last odd column
//     goes through a matrix-vector product);
//   - a split's scores S = Va Tr^T are computed as (Tr Va^T)^T with a
//     transposed store, so only Va^T is packed, never the n * o rows of Tr;
//     where the kernel's 16-column panels over n would be mostly empty, its
//     full panels take the kernel and row_dots the rows left over, or the
//     split goes to eigen_backend (kernel_score_rows);
//   - backward: dU = sum_k dT_k W_k^T, dW_k += Ua^T dT_k and the projections'
//     weight and input gradients through the kernel's accumulating epilogue;
//     the relu backward is one vectorised select with the bias sums.
// Declared only where the compiler targets AVX2 and FMA.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)

#include <algorithm>
#include <cstddef>

#include <immintrin.h>

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/avx2_kernel.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"

namespace biaffine {
namespace detail {

/// Whether the kernel takes a split's scores over this many 16-column panels
/// with many labels: not an odd number above one where it pairs panels (see
/// BIAFFINE_AVX2_SCORES_ODD_PANELS).
inline bool kernel_panel_count(Eigen::Index panels)
{
    return BIAFFINE_AVX2_SCORES_ODD_PANELS || panels <= 1 || panels % 2 == 0;
}

/// Whether a split of n tokens takes the kernel for its scores: past the
/// row_dots crossover, and where the kernel's panels are mostly full (see
/// BIAFFINE_AVX2_SCORES_* in config.hpp).
inline bool use_kernel_scores(Eigen::Index n, std::size_t labels)
{
    if (use_row_dots(n, labels)) return false;
    const auto panel = static_cast<Eigen::Index>(gemm_panel);
    const Eigen::Index panels = (n + panel - 1) / panel, cols = panels * panel;
    if (labels < BIAFFINE_AVX2_SCORES_MANY_LABELS) {
        return n >= BIAFFINE_AVX2_SCORES_MIN_N && 100 * n >= BIAFFINE_AVX2_SCORES_FILL_FEW * cols;
    }
    return 100 * n >= BIAFFINE_AVX2_SCORES_FILL_MANY * cols && kernel_panel_count(panels);
}

/// How many of a split's n rows of Va take the kernel for its scores: all
/// of them where use_kernel_scores says so; else its full 16-row panels
/// when the rows left over are few enough for row_dots to finish them (any n
/// >= 16 with few labels, at most BIAFFINE_AVX2_SCORES_DOTS_TAIL rows with
/// many, and a panel count kernel_panel_count allows); else none (row_dots
/// or Eigen's GEMM for the whole split).
inline Eigen::Index kernel_score_rows(Eigen::Index n, std::size_t labels)
{
    if (use_kernel_scores(n, labels)) return n;
    const auto panel = static_cast<Eigen::Index>(gemm_panel);
    const Eigen::Index full = n / panel * panel;
    if (full == 0) return 0;
    if (labels < BIAFFINE_AVX2_SCORES_MANY_LABELS) return full;
    return n - full <= BIAFFINE_AVX2_SCORES_DOTS_TAIL && kernel_panel_count(full / panel) ? full : 0;
}

/// See eigen_backend for what each operation computes; float only.
struct avx2_backend {
    using T = float;
    static constexpr const char* name = "avx2";
    /// What runs each operation, for benches and logs.
    static constexpr const char* operations =
        "projections (bias + ReLU fused), U.W' (every label's W packed once per batch, T a group of splits at a "
        "time, scored while in L2; a last odd column: one more product over all labels, or with few labels Eigen "
        "matrix-vector), dU, dW, input backward: "
        BIAFFINE_DETAIL_GEMM_KERNEL_NAME "; per-split scores: "
        "the kernel on all of a split's rows where its panels fill, else on its full 16-row panels with row_dots for "
        "the rows left over (kernel_score_rows), else row_dots (short splits: use_row_dots) or Eigen "
        "GEMM"
#if !BIAFFINE_AVX2_SCORES_ODD_PANELS
        " (with many labels Eigen GEMM for an odd number of panels above one, and for rows left over)"
#endif
        "; per-split score backward: row_dots or Eigen GEMM";
    /// Rows of the weight-gradient products summed per kernel call.
    static constexpr std::size_t dw_chunk = BIAFFINE_AVX2_DW_CHUNK;
    /// Row stride of a transposed chunk: 16 floats past dw_chunk, so that its
    /// rows (a power of two apart at the default 256 floats) do not all fall
    /// in the same few L1 sets, which made every 32-byte store of the
    /// transpose miss L1.
    static constexpr std::size_t dw_ld = dw_chunk + gemm_panel;

    /// The packed block of inference: Wh^T and Wd^T (and a row block of
    /// copied inputs); one label's block of W (bilinear_left); or, when there
    /// are split scores (max_len > 0), every label's block of W with one
    /// split's Va^T beside it (bilinear_scores), one at a time.
    static std::size_t packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        const std::size_t scores =
            max_len == 0 ? 0 : left_packed_elements(d) + last_packed_elements(d) + gemm_packed_size(d.hv(), max_len);
        return std::max({projection_elements(d), gemm_packed_size(d.hu(), d.hv()), scores});
    }

    /// The packed block of training: the forward's; for dU = dT W^T one
    /// label's W^T; for dW += Ua^T dT a chunk of Ua^T and the tail of dT's
    /// panels; for dW += dZ^T X a chunk of dZ^T and that chunk of X packed;
    /// for dX = dZu Wh + dZv Wd, Wh and Wd.
    static std::size_t train_packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        const std::size_t h = d.hidden, panel = gemm_panel;
        return std::max({packed_elements(d, max_len), gemm_packed_size(d.hv(), d.hu()),
                         d.hu() * dw_ld + gemm_packed_size(dw_chunk, d.hv() % panel),
                         h * dw_ld + gemm_packed_size(dw_chunk, d.n_in), 2 * gemm_packed_size(h, d.n_in)});
    }

    // Both weights packed at once, then U and V by row blocks of X, so each
    // block is read from memory once for both projections.
    static void projections(const scorer_dims& d, const weights_ref<T>& w, const T* xp, std::size_t N, T* u, T* v,
                            T* packed)
    {
        const std::size_t n_in = d.n_in;
        project_rows(d, w, N, u, v, packed, [&](std::size_t r0, std::size_t rn, const T** rows) {
            for (std::size_t q = 0; q < rn; ++q) rows[q] = xp + (r0 + q) * n_in;
        });
    }

    /// The projections of the splits X (off: their first packed rows) read
    /// from the splits' own memory: no gathered copy of the batch's inputs
    /// (the copy took 3-7% of the projections' time over 100k tokens in
    /// batches of 8192, one process, AVX2 EPYC). Rows with a column stride
    /// are copied a row block at a time into `packed`.
    static constexpr bool reads_items = true;
    template <class Items>
    static void project_items(const scorer_dims& d, const weights_ref<T>& w, const Items& X, const std::size_t* off,
                              std::size_t N, T* u, T* v, T* packed)
    {
        if (N == 0) return;  // X may be empty: no X[0] then
        const std::size_t n_in = d.n_in;
        T* copies = packed + 2 * gemm_packed_size(n_in, d.hidden);
        std::size_t k = 0;  // the split of the next row, and the row in it
        std::size_t i = 0;
        auto x = read_only(X[0]);
        project_rows(d, w, N, u, v, packed, [&](std::size_t, std::size_t rn, const T** rows) {
            for (std::size_t q = 0; q < rn; ++q, ++i) {
                if (off[k] + i >= off[k + 1]) {
                    while (off[k] + i >= off[k + 1]) {  // past split k (or an empty one)
                        ++k;
                        i = 0;
                    }
                    x = read_only(X[k]);
                }
                if (x.col_stride == 1) {
                    rows[q] = x.data + static_cast<std::ptrdiff_t>(i) * x.row_stride;
                } else {
                    T* c = copies + q * n_in;
                    copy_rows(x.rows_view(i, 1), c);
                    rows[q] = c;
                }
            }
        });
    }

    /// Elements of `packed` the projections use: both weights, and the
    /// copies of one row block.
    static std::size_t projection_elements(const scorer_dims& d) noexcept
    {
        return 2 * gemm_packed_size(d.n_in, d.hidden) + BIAFFINE_AVX2_ROW_BLOCK * d.n_in;
    }

    // Columns of a label's block of W through the kernel: all but a last
    // odd one (see bilinear_left).
    static std::size_t kernel_columns(const scorer_dims& d) noexcept
    {
        const std::size_t hv = d.hv(), full = hv / gemm_panel * gemm_panel;
        return hv - full == 1 && full != 0 ? full : hv;
    }
    static std::size_t label_packed_elements(const scorer_dims& d) noexcept
    {
        return gemm_packed_size(d.hu(), kernel_columns(d));
    }
    // Every label's block of W, packed (bilinear_scores).
    static std::size_t left_packed_elements(const scorer_dims& d) noexcept
    {
        return d.labels * label_packed_elements(d);
    }
    // The last odd column of every label's block as one packed [hu, o]
    // block, with BIAFFINE_AVX2_LAST_COLUMN_PANEL_LABELS labels or more.
    static std::size_t last_packed_elements(const scorer_dims& d) noexcept
    {
        return kernel_columns(d) == d.hv() || d.labels < BIAFFINE_AVX2_LAST_COLUMN_PANEL_LABELS
                   ? 0
                   : gemm_packed_size(d.hu(), d.labels);
    }
    static void pack_label(const scorer_dims& d, const T* w, std::size_t k, T* packed)
    {
        const std::size_t hu = d.hu(), hv = d.hv();
        gemm_pack_b(w + k * hu * hv, static_cast<std::ptrdiff_t>(hv), 1, hu, kernel_columns(d), packed);
    }
    // T's columns of label k for rows u [N, hu] from its packed block:
    // the kernel, and the last odd column as a matrix-vector product unless
    // the caller computes it for every label at once (last_column false).
    static void left_label(const scorer_dims& d, const T* w, std::size_t k, const T* packed, const T* u,
                           std::size_t N, T* t, bool last_column = true)
    {
        const std::size_t hu = d.hu(), hv = d.hv(), m = kernel_columns(d);
        const auto ldt = static_cast<std::ptrdiff_t>(d.labels * hv);
        gemm_packed(u, static_cast<std::ptrdiff_t>(hu), N, hu, packed, m, gemm_epilogue{}, t + k * hv, ldt);
        if (m == hv || !last_column) return;
        Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>> col(
            t + k * hv + m, static_cast<Eigen::Index>(N), Eigen::InnerStride<>(ldt));
        col.noalias() =
            const_row_block(u, N, hu) * const_row_block(w + k * hu * hv, hu, hv).col(static_cast<Eigen::Index>(m));
    }

    // `block(r0, rn, rows)` points rows[0, rn) at rows r0, ..., r0 + rn - 1 of X.
    template <class Block>
    static void project_rows(const scorer_dims& d, const weights_ref<T>& w, std::size_t N, T* u, T* v, T* packed,
                             Block&& block)
    {
        if (N == 0) return;
        const std::size_t n_in = d.n_in, h = d.hidden, wsize = gemm_packed_size(n_in, h);
        const auto n_in_s = static_cast<std::ptrdiff_t>(n_in);
        gemm_pack_b(w.wh, 1, n_in_s, n_in, h, packed);  // W^T: (k, m) = W[m, k]
        gemm_pack_b(w.wd, 1, n_in_s, n_in, h, packed + wsize);
        const std::size_t wu = d.hu(), wv = d.hv();
        constexpr std::size_t rows = BIAFFINE_AVX2_ROW_BLOCK;
        const T* at[rows];
        const auto row = [&](std::size_t r) { return at[r]; };  // r counts from the block's first row
        gemm_epilogue ep;
        ep.relu = true;
        for (std::size_t r0 = 0; r0 < N; r0 += rows) {
            const std::size_t rn = std::min(rows, N - r0);
            block(r0, rn, at);
            ep.bias = w.bh;
            gemm_packed_rows(row, rn, n_in, packed, h, ep, u + r0 * wu, static_cast<std::ptrdiff_t>(wu));
            ep.bias = w.bd;
            gemm_packed_rows(row, rn, n_in, packed + wsize, h, ep, v + r0 * wv, static_cast<std::ptrdiff_t>(wv));
        }
        if (d.bias_u) {
            for (std::size_t r = 0; r < N; ++r) u[r * wu + h] = T(1);
        }
        if (d.bias_v) {
            for (std::size_t r = 0; r < N; ++r) v[r * wv + h] = T(1);
        }
    }

    // Label k's [hu, hv] block of W packed (aligned panels: 4-5% faster than
    // reading its rows in place at 129 floats apart, AVX2 EPYC). When hv is
    // one past a multiple of 16 (the bias column at h = 128), its last column
    // is a matrix-vector product rather than a 16-column panel of which one
    // column is used (1/9 of the product's FMAs at h = 128).
    static void bilinear_left(const scorer_dims& d, const T* w, const T* u, std::size_t N, T* t, T* packed)
    {
        for (std::size_t k = 0; k < d.labels; ++k) {
            pack_label(d, w, k, packed);
            left_label(d, w, k, packed, u, N, t);
        }
    }

    /// Rows of T per group of bilinear_scores: T and V of a group in
    /// BIAFFINE_AVX2_SCORE_GROUP_BYTES.
    static std::size_t score_group_rows(const scorer_dims& d) noexcept
    {
        return std::max<std::size_t>(1, BIAFFINE_AVX2_SCORE_GROUP_BYTES / ((d.labels + 1) * d.hv() * sizeof(T)));
    }

    // Every label's block of W packed once, then T for a group of splits
    // (score_group_rows) and their scores while that part of T is in L2.
    template <class Each>
    static void bilinear_scores(const scorer_dims& d, const T* w, const T* u, const std::size_t* off,
                                std::size_t count, T* t, bool keep_t, T* packed, Each&& each)
    {
        const std::size_t o = d.labels, hv = d.hv(), ldt = o * hv, hu = d.hu(), lsize = label_packed_elements(d);
        const std::size_t m = kernel_columns(d);
        T* last = packed + left_packed_elements(d);
        T* rest = last + last_packed_elements(d);
        for (std::size_t k = 0; k < o; ++k) pack_label(d, w, k, packed + k * lsize);
        const bool last_panel = last_packed_elements(d) != 0;
        // Column m of every label: (a, k) = W[k, a, m].
        if (last_panel) {
            gemm_pack_b(w + m, static_cast<std::ptrdiff_t>(hv), static_cast<std::ptrdiff_t>(hu * hv), hu, o, last);
        }
        gemm_epilogue strided;
        strided.col_stride = static_cast<std::ptrdiff_t>(hv);
        const std::size_t group = score_group_rows(d);
        for (std::size_t g0 = 0, g1 = 0; g0 < count; g0 = g1) {
            g1 = g0 + 1;
            while (g1 < count && off[g1 + 1] - off[g0] <= group) ++g1;
            const std::size_t r0 = off[g0], rn = off[g1] - r0;
            T* tg = keep_t ? t + r0 * ldt : t;
            const T* ug = u + r0 * hu;
            for (std::size_t k = 0; k < o; ++k) left_label(d, w, k, packed + k * lsize, ug, rn, tg, !last_panel);
            if (last_panel) {
                gemm_packed(ug, static_cast<std::ptrdiff_t>(hu), rn, hu, last, o, strided, tg + m,
                            static_cast<std::ptrdiff_t>(ldt));
            }
            for (std::size_t k = g0; k < g1; ++k) each(k, static_cast<const T*>(tg) + (off[k] - r0) * ldt, rest);
        }
    }

    // Rows [0, k) of S through the kernel (kernel_score_rows), the rest by
    // row_dots: S's rows are Va's, so the two parts write disjoint rows.
    static void split_scores(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s, T* packed)
    {
        const auto n = va.rows();
        const Eigen::Index k = n == 0 ? 0 : kernel_score_rows(n, labels);
        if (k == 0) {
            eigen_backend<T>::split_scores(va, t_rows, labels, s, packed);
            return;
        }
        const auto hv = static_cast<std::size_t>(va.cols());
        const std::size_t m = static_cast<std::size_t>(n) * labels, kk = static_cast<std::size_t>(k);
        gemm_pack_b(va.data(), 1, va.outerStride(), hv, kk, packed);  // Va^T: (k, m) = Va[m, k]
        gemm_store_transposed(t_rows, static_cast<std::ptrdiff_t>(hv), m, hv, packed, kk, s.data, s.row_stride);
        if (k < n) {
            row_dots(va.data() + k * va.outerStride(), va.outerStride(), n - k, t_rows,
                     static_cast<std::ptrdiff_t>(hv), static_cast<std::ptrdiff_t>(m), static_cast<std::ptrdiff_t>(hv),
                     s.data + k * s.row_stride, s.row_stride);
        }
    }

    // Eigen's: the kernel here (dVa = dS Tr with Tr read in place, dTr =
    // dS^T Va with dS transposed) beat it in isolation, data in L1 (one
    // label, n = 13-100: 40-76 against 35-59 GFLOP/s), but not in the
    // pipeline: a training step over 100k tokens took 0.93-1.17 s with it
    // against 0.92-1.15 without (four alternated rounds, AVX2 EPYC).
    static void split_scores_backward(const_row_map<T> va, const T* t_rows, std::size_t labels,
                                      score_view<const T> ds, row_map<T> dva, T* dt_rows)
    {
        eigen_backend<T>::split_scores_backward(va, t_rows, labels, ds, dva, dt_rows);
    }

    // dU = sum_k dT_k W_k^T with each label's W_k^T packed, then dW_k +=
    // Ua^T dT_k over chunks of dw_chunk rows, each chunk of Ua transposed
    // into `packed` and dT read in place.
    // Labels at given heads: o * hv per dependent on gathered rows of T,
    // no GEMM to pack for; Eigen's products serve it.
    static constexpr auto head_scores = &eigen_backend<float>::head_scores;
    static constexpr auto head_scores_backward = &eigen_backend<float>::head_scores_backward;

    static void bilinear_left_backward(const scorer_dims& d, const T* w, const T* u, std::size_t N, const T* dt,
                                       T* du, T* dw, T* packed)
    {
        const std::size_t hu = d.hu(), hv = d.hv(), o = d.labels;
        const auto ldt = static_cast<std::ptrdiff_t>(o * hv);
        const auto hu_s = static_cast<std::ptrdiff_t>(hu), hv_s = static_cast<std::ptrdiff_t>(hv);
        gemm_epilogue add;
        add.accumulate = true;
        for (std::size_t k = 0; k < o; ++k) {
            gemm_pack_b(w + k * hu * hv, 1, hv_s, hv, hu, packed);  // (j, i) = W_k[i, j]
            gemm_packed(dt + k * hv, ldt, N, hv, packed, hu, k == 0 ? gemm_epilogue{} : add, du, hu_s);
        }
        T* tail = packed + hu * dw_ld;
        const auto ld = static_cast<std::ptrdiff_t>(dw_ld);
        for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {
            const std::size_t kc = std::min(dw_chunk, N - k0);
            transpose_block(u + k0 * hu, hu_s, kc, hu, packed, ld);
            for (std::size_t k = 0; k < o; ++k) {
                gemm_rowmajor_b(packed, ld, hu, kc, dt + k0 * o * hv + k * hv, ldt, hv,
                                tail, dw + k * hu * hv, hv_s, add);
            }
        }
    }

    // The select of eigen_backend::relu_backward, eight lanes at a time: the
    // compiler does not if-convert it by itself.
    static void relu_backward(const scorer_dims& d, const T* a, std::size_t width, std::size_t N, T scale, T* dz,
                              T* db)
    {
        const std::size_t h = d.hidden;
        const __m256 s = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
        for (std::size_t r = 0; r < N; ++r) {
            const T* ar = a + r * width;
            T* dr = dz + r * width;
            std::size_t j = 0;
            for (; j + 8 <= h; j += 8) {
                const __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(ar + j), zero, _CMP_GT_OQ);
                const __m256 g = _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(dr + j), s));
                _mm256_storeu_ps(dr + j, g);
                _mm256_storeu_ps(db + j, _mm256_add_ps(_mm256_loadu_ps(db + j), g));
            }
            for (; j < h; ++j) {
                const T g = ar[j] > T(0) ? dr[j] * scale : T(0);
                dr[j] = g;
                db[j] += g;
            }
        }
    }

    // dWh += dZu^T X and dWd += dZv^T X over chunks of dw_chunk rows: each
    // chunk of X packed as the kernel's right side for both products, from
    // the splits' own rows (a row with a column stride copied into `xp`
    // first; gathering all of X into `xp` was a copy of N x n_in floats, 2.7%
    // of the samples of a training step over 100k tokens, AVX-512 Xeon model
    // 207), each chunk of dZ
    // transposed into `packed`, so the store into dW is a plain vector
    // accumulate; then dX = dZu Wh + dZv Wd. (Transposing X instead, twice
    // as wide as dZ, and storing dW^T element by element ran at 53-58
    // GFLOP/s against 64-71 for this order: 100k tokens, AVX2 EPYC, one run.
    // Reading the chunk of X in place, its rows n_in = 256 floats apart fell
    // into few L1 sets: the product alone ran at 98-101 GFLOP/s against
    // 120-124 packed, packing included; AVX-512 Xeon, model 207.)
    // dX goes straight into each split's slot where its columns are dense
    // (a copy of N x n_in floats less); other slots get it through `xp`.
    template <class Items>
    static void input_backward(const scorer_dims& d, const weights_ref<T>& w, const grads_ref<T>& g, const Items& X,
                               const std::size_t* off, std::size_t N, const T* dzu, const T* dzv, T* xp, T* packed,
                               span<const seq_view<T>> dX)
    {
        const std::size_t h = d.hidden, n_in = d.n_in;
        const auto n_in_s = static_cast<std::ptrdiff_t>(n_in);
        // Row r of the batch, for r = 0, 1, ... in turn: split k's row i.
        std::size_t split = 0, i = 0;
        const auto next_row = [&](std::size_t r) {
            while (i >= X[split].rows) {  // past this split (or an empty one)
                ++split;
                i = 0;
            }
            const auto x = read_only(X[split]);
            const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(i++) * x.row_stride;
            if (x.col_stride == 1) return x.data + at;
            T* c = xp + r * n_in;
            for (std::size_t j = 0; j < n_in; ++j) c[j] = x.data[at + static_cast<std::ptrdiff_t>(j) * x.col_stride];
            return static_cast<const T*>(c);
        };
        // One operand table for both passes: dZ, its row width, its weight and gradient.
        struct side {
            const T* dz;
            std::size_t width;
            const T* w;
            T* dw;
        };
        const side sides[2] = {{dzu, d.hu(), w.wh, g.wh}, {dzv, d.hv(), w.wd, g.wd}};
        gemm_epilogue add;
        add.accumulate = true;
        T* x_chunk = packed + h * dw_ld;
        const auto ld = static_cast<std::ptrdiff_t>(dw_ld);
        for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {  // both sides while X's chunk is in cache
            const std::size_t kc = std::min(dw_chunk, N - k0);
            gemm_pack_b_rows([&](std::size_t q) { return next_row(k0 + q); }, kc, n_in, x_chunk);
            for (const side& sd : sides) {
                transpose_block(sd.dz + k0 * sd.width, static_cast<std::ptrdiff_t>(sd.width), kc, h, packed, ld);
                gemm_packed(packed, ld, h, kc, x_chunk, n_in, add, sd.dw, n_in_s);
            }
        }
        // dX by splits (row blocks of at most BIAFFINE_AVX2_ROW_BLOCK), both
        // weights packed at once, so each block of dX is still in cache when
        // the second product adds to it.
        const std::size_t wsize = gemm_packed_size(h, n_in);
        gemm_pack_b(w.wh, n_in_s, 1, h, n_in, packed);  // W [h, n_in]
        gemm_pack_b(w.wd, n_in_s, 1, h, n_in, packed + wsize);
        constexpr std::size_t rows = BIAFFINE_AVX2_ROW_BLOCK;
        for (std::size_t k = 0; k < dX.size(); ++k) {
            const seq_view<T>& slot = dX[k];
            const bool dense = slot.col_stride == 1;
            T* out = dense ? slot.data : xp + off[k] * n_in;
            const std::ptrdiff_t ld = dense ? slot.row_stride : n_in_s;
            const std::size_t n = slot.rows;
            for (std::size_t r0 = 0; r0 < n; r0 += rows) {
                const std::size_t rn = std::min(rows, n - r0);
                for (int which = 0; which < 2; ++which) {
                    const side& sd = sides[which];
                    gemm_packed(sd.dz + (off[k] + r0) * sd.width, static_cast<std::ptrdiff_t>(sd.width), rn, h,
                                packed + (which == 0 ? 0 : wsize), n_in, which == 0 ? gemm_epilogue{} : add,
                                out + static_cast<std::ptrdiff_t>(r0) * ld, ld);
                }
            }
            if (!dense) copy_rows(xp + off[k] * n_in, slot);
        }
    }
};

}  // namespace detail
}  // namespace biaffine

#endif  // __AVX2__ && __FMA__
