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
//   - on AVX-512 targets a short split's scores and most splits' score
//     backward in 512-bit registers with nothing packed (zmm_dots,
//     zmm_combos of avx512_small.hpp: use_zmm_dots, use_zmm_combos);
//   - backward: on AVX-512 targets a longer split's dVa = dS Tr and dTr =
//     dS^T Va on the kernel, Tr and Va read in place; dU = sum_k dT_k W_k^T, dW_k +=
//     Ua^T dT_k and the projections' weight and input gradients through the
//     kernel's accumulating epilogue (a last odd column of hv apart); the
//     relu backward (a vectorised select with the bias sums), dW and dX of
//     the projections a chunk of rows at a time, X read in place, dX written
//     out by streamed stores.
// Declared only where the compiler targets AVX2 and FMA.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "biaffine/config.hpp"
#include "biaffine/detail/compute/avx2_kernel.hpp"
#include "biaffine/detail/compute/avx512_small.hpp"
#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/tensor.hpp"

// A macro's value as a string literal (the `operations` text).
#define BIAFFINE_DETAIL_STRINGIFY_(x) #x
#define BIAFFINE_DETAIL_STRINGIFY(x) BIAFFINE_DETAIL_STRINGIFY_(x)

BIAFFINE_NAMESPACE_BEGIN
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

/// Whether a split of n tokens takes zmm_dots for its scores: on AVX-512
/// targets (BIAFFINE_AVX512_SMALL_PRODUCTS) up to
/// BIAFFINE_AVX512_DOTS_MAX_N tokens or BIAFFINE_AVX512_DOTS_MAX_ROWS rows
/// of Tr.
inline bool use_zmm_dots(Eigen::Index n, std::size_t labels)
{
    return BIAFFINE_DETAIL_ZMM_SMALL && n > 0 &&
           (n <= BIAFFINE_AVX512_DOTS_MAX_N ||
            static_cast<std::size_t>(n) * labels <= static_cast<std::size_t>(BIAFFINE_AVX512_DOTS_MAX_ROWS));
}

/// Whether a split of n tokens takes zmm_combos for its score backward: on
/// AVX-512 targets up to BIAFFINE_AVX512_COMBOS_MAX_ROWS rows of Tr.
inline bool use_zmm_combos(Eigen::Index n, std::size_t labels)
{
    return BIAFFINE_DETAIL_ZMM_SMALL && n > 0 &&
           static_cast<std::size_t>(n) * labels <= static_cast<std::size_t>(BIAFFINE_AVX512_COMBOS_MAX_ROWS);
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
#if BIAFFINE_DETAIL_ZMM_SMALL
        "splits of up to " BIAFFINE_DETAIL_STRINGIFY(BIAFFINE_AVX512_DOTS_MAX_N) " tokens or "
        BIAFFINE_DETAIL_STRINGIFY(BIAFFINE_AVX512_DOTS_MAX_ROWS) " rows of Tr (use_zmm_dots) as 4 x 4 blocks of dot "
        "products in AVX-512 registers, longer ones "
#endif
        "the kernel on all of a split's rows where its panels fill, else on its full 16-row panels with row_dots for "
        "the rows left over (kernel_score_rows), else "
#if !BIAFFINE_DETAIL_ZMM_SMALL
        "row_dots (short splits: use_row_dots) or "
#endif
        "Eigen GEMM"
#if !BIAFFINE_AVX2_SCORES_ODD_PANELS
        " (with many labels Eigen GEMM for an odd number of panels above one, and for rows left over)"
#endif
        "; per-split score backward: "
#if BIAFFINE_DETAIL_ZMM_SMALL
        "splits of up to " BIAFFINE_DETAIL_STRINGIFY(BIAFFINE_AVX512_COMBOS_MAX_ROWS) " rows of Tr "
        "(use_zmm_combos) as combinations of whole rows in AVX-512 registers, longer ones "
#endif
#if BIAFFINE_AVX2_SCORES_BACKWARD
        BIAFFINE_DETAIL_GEMM_KERNEL_NAME " with B read in place"
#if !BIAFFINE_DETAIL_ZMM_SMALL
        " (short splits: row_combos)"
#endif
        ;
#else
        "row_combos or Eigen GEMM";
#endif
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

    /// The packed block of training over a batch of up to `rows` rows: the
    /// forward's; the per-split score backward's; for dU = dT W^T one
    /// label's W^T; for dW += Ua^T dT a chunk of Ua^T, one of dT packed and,
    /// apart, dT's last column and its sums; the input backward's
    /// (input_elements).
    static std::size_t train_packed_elements(const scorer_dims& d, std::size_t max_len, std::size_t rows) noexcept
    {
        const std::size_t m = kernel_columns(d);
        const std::size_t dw = d.hu() * dw_ld + gemm_packed_size(dw_chunk, m) + (m < d.hv() ? dw_chunk + d.hu() : 0);
        return std::max({packed_elements(d, max_len), score_backward_elements(d, max_len),
                         gemm_packed_size(d.hv(), d.hu()), dw, input_elements(d, rows)});
    }
    /// N rows in as few chunks of at most `most` as will do, their sizes
    /// differing by at most one (chunk i has size(i) rows): 2,615 rows in 11
    /// chunks of 238 or 237, not ten of 256 and one of 55 (the depth of the
    /// weight gradients' products).
    struct even_chunks {
        std::size_t count, base, extra;
        even_chunks(std::size_t N, std::size_t most) noexcept
            : count((N + most - 1) / most), base(count == 0 ? 0 : N / count), extra(count == 0 ? 0 : N % count)
        {
        }
        std::size_t size(std::size_t i) const noexcept { return base + (i < extra ? 1 : 0); }
    };
    /// The input backward's largest chunk of a batch of N rows, and its part of
    /// `packed`: [Wh; Wd] packed; the chunk's X packed, later its dX; dZ^T
    /// of one side; dZ of both.
    static std::size_t input_chunk(std::size_t N) noexcept { return std::min(dw_chunk, N); }
    static std::size_t input_elements(const scorer_dims& d, std::size_t N) noexcept
    {
        const std::size_t h = d.hidden, n_in = d.n_in, chunk = input_chunk(N);
        return gemm_packed_size(2 * h, n_in) + gemm_packed_size(chunk, n_in) + h * (chunk + gemm_panel) +
               2 * chunk * h;
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
    static void project_items(const scorer_dims& d, const weights_ref<T>& w, const Items& X, const std::size_t* /*off*/,
                              std::size_t N, T* u, T* v, T* packed)
    {
        if (N == 0) return;  // X may be empty: no X[0] then
        const std::size_t n_in = d.n_in;
        T* copies = packed + 2 * gemm_packed_size(n_in, d.hidden);
        auto rows_of = walk_rows([&](std::size_t k) { return read_only(X[k]); });
        project_rows(d, w, N, u, v, packed, [&](std::size_t, std::size_t rn, const T** rows) {
            for (std::size_t q = 0; q < rn;) {
                const auto run = rows_of.take(rn - q);
                for (std::size_t i = 0; i < run.rows; ++i, ++q) {
                    rows[q] = row_or_copy(run.x, run.first + i, copies + q * n_in);
                }
            }
        });
    }

    /// Row i of the split x where its columns are dense, else a copy of it
    /// in `copy` (x.cols floats).
    static const T* row_or_copy(const seq_view<const T>& x, std::size_t i, T* copy)
    {
        if (x.col_stride == 1) return x.data + static_cast<std::ptrdiff_t>(i) * x.row_stride;
        copy_rows(x.rows_view(i, 1), copy);
        return copy;
    }

    /// Elements of `packed` the projections use: both weights, and the
    /// copies of one row block.
    static std::size_t projection_elements(const scorer_dims& d) noexcept
    {
        return 2 * gemm_packed_size(d.n_in, d.hidden) + BIAFFINE_AVX2_ROW_BLOCK * d.n_in;
    }

    // Columns of a label's block of W through the kernel: all but a last
    // odd one (see bilinear_left).
    static std::size_t kernel_columns(std::size_t hv) noexcept
    {
        const std::size_t full = hv / gemm_panel * gemm_panel;
        return hv - full == 1 && full != 0 ? full : hv;
    }
    static std::size_t kernel_columns(const scorer_dims& d) noexcept { return kernel_columns(d.hv()); }
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

    /// Elements of `packed` split_scores needs for rows of hv over a split
    /// of up to max_len rows (the bf16 arithmetic's float dots use it too).
    static std::size_t split_packed_elements(std::size_t hv, std::size_t max_len) noexcept
    {
        return gemm_packed_size(hv, max_len);
    }
    // Short splits by zmm_dots (use_zmm_dots); else rows [0, k) of S
    // through the kernel (kernel_score_rows), the rest by row_dots: S's rows
    // are Va's, so the two parts write disjoint rows.
    static void split_scores(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s, T* packed)
    {
        const auto n = va.rows();
#if BIAFFINE_DETAIL_ZMM_SMALL
        if (use_zmm_dots(n, labels)) {
            const Eigen::Index hv = va.cols(), no = n * static_cast<Eigen::Index>(labels);
            zmm_dots(va.data(), va.outerStride(), n, t_rows, hv, no, hv, s.data, s.row_stride);
            return;
        }
#endif
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

    /// Elements of `packed` split_scores_backward uses for splits of up to
    /// max_len tokens: dS^T, and either the last panel of B or, where hv is
    /// one past a multiple of 16, a column of Tr and of Va and one of sums.
    static std::size_t score_backward_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        if (!BIAFFINE_AVX2_SCORES_BACKWARD || max_len == 0) return 0;
        const std::size_t no = max_len * d.labels;
        const std::size_t tail = kernel_columns(d) < d.hv()
                                     ? 2 * no
                                     : gemm_packed_size(std::max(no, max_len), d.hv() % gemm_panel);
        return no * max_len + tail;
    }

    // dVa = dS Tr and dTr = dS^T Va by zmm_combos (use_zmm_combos: dS read
    // by strides both ways), whatever BIAFFINE_AVX2_SCORES_BACKWARD says;
    // else on the kernel with Tr and Va read in place (gemm_rowmajor_b) and
    // dS transposed into `packed`, a last odd column of hv (the bias column
    // at h = 128, which would take a panel of its own) as two column
    // combinations. Of the rest, short splits (use_row_combos), and every
    // split where BIAFFINE_AVX2_SCORES_BACKWARD is 0, take eigen_backend's
    // row_combos or GEMM.
    static void split_scores_backward(const_row_map<T> va, const T* t_rows, std::size_t labels,
                                      score_view<const T> ds, row_map<T> dva, T* dt_rows, T* packed)
    {
        const Eigen::Index n = va.rows();
#if BIAFFINE_DETAIL_ZMM_SMALL
        if (use_zmm_combos(n, labels)) {
            const Eigen::Index hv = va.cols(), no = n * static_cast<Eigen::Index>(labels);
            zmm_combos(ds.data, ds.row_stride, 1, n, no, t_rows, hv, hv, dva.data(), dva.outerStride());
            zmm_combos(ds.data, 1, ds.row_stride, no, n, va.data(), va.outerStride(), hv, dt_rows, hv);
            return;
        }
#endif
        if (!BIAFFINE_AVX2_SCORES_BACKWARD || n == 0 || use_row_combos(n, labels)) {
            eigen_backend<T>::split_scores_backward(va, t_rows, labels, ds, dva, dt_rows, packed);
            return;
        }
        const auto nn = static_cast<std::size_t>(n), hv = static_cast<std::size_t>(va.cols());
        const std::size_t no = nn * labels, m = kernel_columns(hv);  // columns through the kernel
        const auto hv_s = static_cast<std::ptrdiff_t>(hv), n_s = static_cast<std::ptrdiff_t>(n);
        T* const dst = packed;          // dS^T [no, n]
        T* const rest = dst + no * nn;  // the last panel, or the last column's vectors
        transpose_block(ds.data, ds.row_stride, nn, no, dst, n_s);
        gemm_rowmajor_b(ds.data, ds.row_stride, nn, no, t_rows, hv_s, m, rest, dva.data(), dva.outerStride());
        gemm_rowmajor_b(dst, n_s, no, nn, va.data(), va.outerStride(), m, rest, dt_rows, hv_s);
        if (m == hv) return;
        // Column m: dVa[:, m] = dS Tr[:, m], dTr[:, m] = dS^T Va[:, m].
        T* const col = rest;        // [no] Tr's column, then Va's [n]
        T* const sums = rest + no;  // [no]
        for (std::size_t r = 0; r < no; ++r) col[r] = t_rows[r * hv + m];
        column_combination(dst, n_s, no, nn, col, sums);
        const auto last = static_cast<Eigen::Index>(m);
        for (Eigen::Index i = 0; i < n; ++i) dva(i, last) = sums[i];
        for (Eigen::Index i = 0; i < n; ++i) col[i] = va(i, last);
        column_combination(ds.data, ds.row_stride, nn, no, col, sums);
        for (std::size_t r = 0; r < no; ++r) dt_rows[r * hv + m] = sums[r];
    }

    // y [n] = sum_k x[k] a[k * lda, n): rows of A combined, eight lanes at
    // a time.
    static void column_combination(const T* a, std::ptrdiff_t lda, std::size_t K, std::size_t n, const T* x, T* y)
    {
        std::fill(y, y + n, T(0));
        const std::size_t n8 = n / 8 * 8;
        for (std::size_t k = 0; k < K; ++k) {
            const T* ak = a + static_cast<std::ptrdiff_t>(k) * lda;
            const __m256 xk = _mm256_set1_ps(x[k]);
            for (std::size_t i = 0; i < n8; i += 8) {
                _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(ak + i), xk, _mm256_loadu_ps(y + i)));
            }
            for (std::size_t i = n8; i < n; ++i) y[i] += ak[i] * x[k];
        }
    }

    // Labels at given heads: o * hv per dependent on gathered rows of T,
    // no GEMM to pack for; Eigen's products serve it.
    static constexpr auto head_scores = &eigen_backend<float>::head_scores;
    static constexpr auto head_scores_backward = &eigen_backend<float>::head_scores_backward;

    // dU = sum_k dT_k W_k^T with each label's W_k^T packed, then dW_k +=
    // Ua^T dT_k over chunks of dw_chunk rows, each chunk of Ua transposed
    // into `packed` and dT read in place.
    static void bilinear_left_backward(const scorer_dims& d, const T* w, const T* u, std::size_t N, const T* dt,
                                       T* du, T* dw, T* packed)
    {
        const std::size_t hu = d.hu(), hv = d.hv(), o = d.labels;
        const auto ldt = static_cast<std::ptrdiff_t>(o * hv);
        const auto hu_s = static_cast<std::ptrdiff_t>(hu), hv_s = static_cast<std::ptrdiff_t>(hv);
        gemm_epilogue add;
        add.accumulate = true;
        // dU's first h columns only: its bias column (the gradient of U's
        // ones) is never read, and with h = 128 it took a 16-column panel of
        // its own, a ninth of the product.
        const std::size_t h = d.hidden;
        for (std::size_t k = 0; k < o; ++k) {
            gemm_pack_b(w + k * hu * hv, 1, hv_s, hv, h, packed);  // (j, i) = W_k[i, j]
            gemm_packed(dt + k * hv, ldt, N, hv, packed, h, k == 0 ? gemm_epilogue{} : add, du, hu_s);
        }
        // dW's last column apart where hv is one past a multiple of 16
        // (kernel_columns): U^T times that column of dT, rather than a panel
        // of one column through the kernel. dT's chunk is packed: read in
        // place, its rows o * hv floats apart (not a multiple of 16 at hv =
        // 129) made most loads straddle two cache lines, and U W' backward
        // over 2,615 rows took 0.82-0.83 ms against 0.76-0.78 packed (AMD
        // EPYC Zen 5, alternated in one process).
        const std::size_t m = kernel_columns(d);
        T* const dt_packed = packed + hu * dw_ld;                  // dT's chunk, its first m columns
        T* const col = dt_packed + gemm_packed_size(dw_chunk, m);  // [dw_chunk] its last column (m < hv)
        T* const sums = col + dw_chunk;                            // [hu]
        const auto ld = static_cast<std::ptrdiff_t>(dw_ld);
        const even_chunks chunks(N, dw_chunk);
        for (std::size_t c = 0, k0 = 0; c < chunks.count; k0 += chunks.size(c), ++c) {
            const std::size_t kc = chunks.size(c);
            transpose_block(u + k0 * hu, hu_s, kc, hu, packed, ld);
            for (std::size_t k = 0; k < o; ++k) {
                const T* dtk = dt + k0 * o * hv + k * hv;
                T* dwk = dw + k * hu * hv;
                gemm_pack_b(dtk, ldt, 1, kc, m, dt_packed);
                gemm_packed(packed, ld, hu, kc, dt_packed, m, add, dwk, hv_s);
                if (m == hv) continue;
                // dW_k[i, m] += sum_r U[r, i] dT_k[r, m], as a combination of
                // U's rows into the column's hu sums.
                for (std::size_t r = 0; r < kc; ++r) col[r] = dtk[static_cast<std::ptrdiff_t>(r) * ldt + m];
                column_combination(u + k0 * hu, hu_s, kc, hu, col, sums);
                for (std::size_t i = 0; i < hu; ++i) dwk[i * hv + m] += sums[i];
            }
        }
    }

    // The select of eigen_backend::relu_backward, eight lanes at a time: the
    // compiler does not if-convert it by itself. Row r of dZ goes to
    // out[r * ldo] (in place when out is dz).
    static void relu_backward(const scorer_dims& d, const T* a, std::size_t width, std::size_t N, T scale, T* dz,
                              T* db)
    {
        relu_backward_to(d.hidden, a, width, N, scale, dz, db, dz, width);
    }
    static void relu_backward_to(std::size_t h, const T* a, std::size_t width, std::size_t N, T scale, const T* dz,
                                 T* db, T* out, std::size_t ldo)
    {
        const __m256 s = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
        // The vector bound first: with `j + 8 <= h` as the test g++ 12 warned
        // (-Waggressive-loop-optimizations) on the edge loop once a constant h
        // was inlined.
        const std::size_t h8 = h / 8 * 8;
        for (std::size_t r = 0; r < N; ++r) {
            const T* ar = a + r * width;
            const T* dr = dz + r * width;
            T* outr = out + r * ldo;
            std::size_t j = 0;
            for (; j < h8; j += 8) {
                const __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(ar + j), zero, _CMP_GT_OQ);
                const __m256 g = _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(dr + j), s));
                _mm256_storeu_ps(outr + j, g);
                _mm256_storeu_ps(db + j, _mm256_add_ps(_mm256_loadu_ps(db + j), g));
            }
            for (; j < h; ++j) {
                const T g = ar[j] > T(0) ? dr[j] * scale : T(0);
                outr[j] = g;
                db[j] += g;
            }
        }
    }

    // The relu backward and both projections' backward a chunk of dw_chunk
    // rows at a time, so dZ, U, V and X pass through memory once:
    //   dZ = relu'(dA) (relu_backward_to) into `z`, dbh and dbd += its sums;
    //   dWh += dZu^T X, dWd += dZv^T X: X's chunk packed once for both from
    //     the splits' own rows, dZ's chunk transposed, so the store into dW
    //     is a plain vector accumulate;
    //   dX = [dZu dZv] [Wh; Wd], one product of depth 2h ([Wh; Wd] packed
    //     once; dZu and dZv side by side in each row of the chunk's dZ),
    //     into the block that held X's chunk, then out to the splits' slots.
    // (As three passes over the batch - relu, the weight gradients, dX - dZ
    // streamed from memory three times and was written once more, and X was
    // gathered for strided splits. Transposing X instead, twice as wide as
    // dZ, and storing dW^T element by element ran at 53-58 GFLOP/s against
    // 64-71 for this order: 100k tokens, AVX2 EPYC. Reading the chunk of X
    // in place, its rows n_in = 256 floats apart fell into few L1 sets: the
    // product alone ran at 98-101 GFLOP/s against 120-124 packed, packing
    // included; AVX-512 Xeon model 207. As two products of depth h, the
    // second accumulating, dX ran 4% slower: 1.46 against 1.40 ms for 2,600
    // rows, AMD EPYC Zen 5.) dzu and dzv are only read; xp is null
    // (reads_items).
    template <class Items>
    static void input_backward(const scorer_dims& d, const weights_ref<T>& w, const grads_ref<T>& g, const Items& X,
                               const std::size_t* /*off*/, std::size_t N, const relu_ref<T>& a, T* dzu, T* dzv,
                               T* /*xp*/, T* packed, span<const seq_view<T>> dX)
    {
        if (N == 0) return;
        const std::size_t h = d.hidden, n_in = d.n_in, chunk = input_chunk(N);
        const auto n_in_s = static_cast<std::ptrdiff_t>(n_in);
        const auto ldt = static_cast<std::ptrdiff_t>(chunk + gemm_panel);  // see dw_ld
        // One operand table for both sides: activations, dA, row width, gradients, dZ.
        struct side {
            const T* a;
            const T* dz;
            std::size_t width;
            T* dw;
            T* db;
            T* z;
        };
        T* const w_packed = packed;                                  // [Wh; Wd]: K = 2h
        T* const x_chunk = w_packed + gemm_packed_size(2 * h, n_in);  // X's chunk packed, then dX [chunk, n_in]
        T* const zt = x_chunk + gemm_packed_size(chunk, n_in);        // dZ^T of one side [h, ldt]
        T* const z = zt + static_cast<std::size_t>(ldt) * h;          // [dZu dZv] [chunk, 2h]
        const auto ldz = static_cast<std::ptrdiff_t>(2 * h);
        const side sides[2] = {{a.u, dzu, d.hu(), g.wh, g.bh, z}, {a.v, dzv, d.hv(), g.wd, g.bd, z + h}};
        gemm_pack_b_rows(w.wh, n_in_s, 1, h, n_in, 2 * h, 0, w_packed);
        gemm_pack_b_rows(w.wd, n_in_s, 1, h, n_in, 2 * h, h, w_packed);
        gemm_epilogue add;
        add.accumulate = true;
        auto x_rows = walk_rows([&](std::size_t k) { return read_only(X[k]); });
        auto dx_rows = walk_rows([&](std::size_t k) { return dX[k]; });
        // X comes from memory: its rows two ahead prefetched while packing
        // took a training step over 100k tokens at one label from 0.2497 /
        // 0.2484 to 0.2478 / 0.2446 s (medians of 25 alternated steps, AMD
        // EPYC Zen 5; one and four ahead gained less).
        constexpr std::size_t x_ahead = 2;
        const even_chunks chunks(N, chunk);
        for (std::size_t c = 0, k0 = 0; c < chunks.count; k0 += chunks.size(c), ++c) {
            const std::size_t kc = chunks.size(c);
            for (std::size_t q = 0; q < kc;) {  // X's rows, run by run
                const auto run = x_rows.take(kc - q);
                gemm_pack_b_rows(run.x.data + static_cast<std::ptrdiff_t>(run.first) * run.x.row_stride,
                                 run.x.row_stride, run.x.col_stride, run.rows, n_in, kc, q, x_chunk, x_ahead);
                q += run.rows;
            }
            for (const side& sd : sides) {
                relu_backward_to(h, sd.a + k0 * sd.width, sd.width, kc, a.scale, sd.dz + k0 * sd.width, sd.db, sd.z,
                                 2 * h);
                transpose_block(sd.z, ldz, kc, h, zt, ldt);
                gemm_packed(zt, ldt, h, kc, x_chunk, n_in, add, sd.dw, n_in_s);
            }
            T* const dx = x_chunk;  // X's chunk is packed no more
            gemm_packed(z, ldz, kc, 2 * h, w_packed, n_in, gemm_epilogue{}, dx, n_in_s);
            for (std::size_t q = 0; q < kc;) {
                const auto run = dx_rows.take(kc - q);
                stream_rows(dx + q * n_in, run.x.rows_view(run.first, run.rows));
                q += run.rows;
            }
        }
        if (BIAFFINE_AVX2_STREAM_DX) _mm_sfence();  // the streamed stores before anyone reads dX
    }

    // copy_rows(src, v), with stores that bypass the caches where v's rows
    // are dense and 32-byte aligned and BIAFFINE_AVX2_STREAM_DX is 1: no
    // line of dX is read before it is overwritten, and dX does not push the
    // batch's operands out of L3.
    static void stream_rows(const T* src, const seq_view<T>& v)
    {
        const std::size_t cols = v.cols;
        const bool aligned = v.col_stride == 1 && cols % 8 == 0 && v.row_stride % 8 == 0 &&
                             reinterpret_cast<std::uintptr_t>(v.data) % 32 == 0;
        if (!BIAFFINE_AVX2_STREAM_DX || !aligned) {
            copy_rows(src, v);
            return;
        }
        for (std::size_t r = 0; r < v.rows; ++r) {
            T* dst = v.data + static_cast<std::ptrdiff_t>(r) * v.row_stride;
            const T* s = src + r * cols;
            for (std::size_t j = 0; j < cols; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(s + j));
        }
    }
};

}  // namespace detail
BIAFFINE_NAMESPACE_END

#endif  // __AVX2__ && __FMA__
