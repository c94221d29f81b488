// biaffine/detail/compute/avx2_backend.hpp - the scorer's float compute on the
// AVX2/FMA kernel of avx2_kernel.hpp, where it measurably beats Eigen (tuned
// on an AVX2 AMD EPYC; see config.hpp for the numbers).
//
// What it changes against eigen_backend<float>:
//   - the projections read X in place and pack only Wh^T / Wd^T; bias and
//     relu are applied in registers before the one store;
//   - T = U W' reads each label's block of W in place (its last hv % 16
//     columns packed);
//   - a split's scores S = Va Tr^T are computed as (Tr Va^T)^T with a
//     transposed store, so only Va^T is packed, never the n * o rows of Tr;
//     where the kernel's 16-column panels over n would be mostly empty the
//     split goes to eigen_backend (use_kernel_scores);
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

/// Whether a split of n tokens takes the kernel for its scores: past the
/// row_dots crossover, and where the kernel's panels are mostly full (see
/// BIAFFINE_AVX2_SCORES_* in config.hpp).
inline bool use_kernel_scores(Eigen::Index n, std::size_t labels)
{
    if (use_row_dots(n, labels)) return false;
    const Eigen::Index cols = (n + static_cast<Eigen::Index>(gemm_panel) - 1) / static_cast<Eigen::Index>(gemm_panel) *
                              static_cast<Eigen::Index>(gemm_panel);
    return labels >= BIAFFINE_AVX2_SCORES_MANY_LABELS ? 100 * n >= BIAFFINE_AVX2_SCORES_FILL_MANY * cols
                                                      : n >= BIAFFINE_AVX2_SCORES_MIN_N &&
                                                            100 * n >= BIAFFINE_AVX2_SCORES_FILL_FEW * cols;
}

/// See eigen_backend for what each operation computes; float only.
struct avx2_backend {
    using T = float;
    static constexpr const char* name = "avx2";
    /// What runs each operation, for benches and logs.
    static constexpr const char* operations =
        "projections (bias + ReLU fused), U.W', dU, dW, input backward: AVX2/FMA 6x16 kernel; per-split scores: "
        "row_dots (n <= BIAFFINE_ROW_DOTS_MAX_N), the kernel where its panels fill (use_kernel_scores), else Eigen "
        "GEMM; per-split score backward: row_dots or Eigen GEMM";
    /// Rows of the weight-gradient products summed per kernel call.
    static constexpr std::size_t dw_chunk = BIAFFINE_AVX2_DW_CHUNK;

    /// The packed block of inference: Wh^T or Wd^T, the last hv % 16 columns
    /// of one label's block of W, or one split's Va^T, one at a time.
    static std::size_t packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        return std::max({gemm_packed_size(d.n_in, d.hidden), gemm_packed_size(d.hu(), d.hv() % gemm_panel),
                         gemm_packed_size(d.hv(), max_len)});
    }

    /// The packed block of training: the forward's; for dU = dT W^T one
    /// label's W^T; for dW += Ua^T dT a chunk of Ua^T and the tail of dT's
    /// panels; for dWh^T += X^T dZ the tail of dZ's; for dX = dZ W, Wh or Wd.
    static std::size_t train_packed_elements(const scorer_dims& d, std::size_t max_len) noexcept
    {
        const std::size_t h = d.hidden, panel = gemm_panel;
        return std::max({packed_elements(d, max_len), gemm_packed_size(d.hv(), d.hu()),
                         d.hu() * dw_chunk + gemm_packed_size(dw_chunk, d.hv() % panel),
                         gemm_packed_size(dw_chunk, h % panel), gemm_packed_size(h, d.n_in)});
    }

    static void projections(const scorer_dims& d, const weights_ref<T>& w, const T* xp, std::size_t N, T* u, T* v,
                            T* packed)
    {
        if (N == 0) return;
        const std::size_t n_in = d.n_in, h = d.hidden;
        const auto n_in_s = static_cast<std::ptrdiff_t>(n_in);
        for (int which = 0; which < 2; ++which) {
            const T* wm = which == 0 ? w.wh : w.wd;
            const T* b = which == 0 ? w.bh : w.bd;
            const bool bias = which == 0 ? d.bias_u : d.bias_v;
            T* out = which == 0 ? u : v;
            const std::size_t width = h + (bias ? 1 : 0);
            gemm_pack_b(wm, 1, n_in_s, n_in, h, packed);  // W^T: (k, m) = W[m, k]
            gemm_bias_relu(xp, n_in_s, N, n_in, packed, h, b, true, out, static_cast<std::ptrdiff_t>(width));
            if (bias) {
                for (std::size_t r = 0; r < N; ++r) out[r * width + h] = T(1);
            }
        }
    }

    static void bilinear_left(const scorer_dims& d, const T* w, const T* u, std::size_t N, T* t, T* packed)
    {
        if (N == 0) return;  // t may be null then: no offsets into it
        const std::size_t hu = d.hu(), hv = d.hv(), o = d.labels;
        for (std::size_t k = 0; k < o; ++k) {  // label k's [hu, hv] block of W, read in place
            gemm_rowmajor_b(u, static_cast<std::ptrdiff_t>(hu), N, hu, w + k * hu * hv, static_cast<std::ptrdiff_t>(hv),
                            hv, packed, t + k * hv, static_cast<std::ptrdiff_t>(o * hv));
        }
    }

    static void split_scores(const_row_map<T> va, const T* t_rows, std::size_t labels, score_view<T> s, T* packed)
    {
        const auto n = va.rows();
        if (n != 0 && use_kernel_scores(n, labels)) {
            const auto hv = static_cast<std::size_t>(va.cols());
            const auto nn = static_cast<std::size_t>(n);
            gemm_pack_b(va.data(), 1, va.outerStride(), hv, nn, packed);  // Va^T: (k, m) = Va[m, k]
            gemm_store_transposed(t_rows, static_cast<std::ptrdiff_t>(hv), nn * labels, hv, packed, nn, s.data,
                                  s.row_stride);
            return;
        }
        eigen_backend<T>::split_scores(va, t_rows, labels, s, packed);
    }

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
        T* tail = packed + hu * dw_chunk;
        for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {
            const std::size_t kc = std::min(dw_chunk, N - k0);
            row_block(packed, hu, kc) = const_row_block(u + k0 * hu, kc, hu).transpose();
            for (std::size_t k = 0; k < o; ++k) {
                gemm_rowmajor_b(packed, static_cast<std::ptrdiff_t>(kc), hu, kc, dt + k0 * o * hv + k * hv, ldt, hv,
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

    // dWh^T += X^T dZu and dWd^T += X^T dZv in chunks of dw_chunk rows (X
    // gathered transposed into `xp`, [n_in, N], so both sides are read in
    // place), then dX = dZu Wh + dZv Wd into `xp` ([N, n_in]) with Wh, Wd
    // packed in turn.
    template <class Items>
    static void input_backward(const scorer_dims& d, const weights_ref<T>& w, const grads_ref<T>& g, const Items& X,
                               const std::size_t* off, std::size_t N, const T* dzu, const T* dzv, T* xp, T* packed)
    {
        const std::size_t h = d.hidden, n_in = d.n_in;
        auto xt = row_block(xp, n_in, N);
        for (std::size_t k = 0; k < X.size(); ++k) {
            const auto v = read_only(X[k]);
            if (v.rows == 0) continue;
            xt.middleCols(static_cast<Eigen::Index>(off[k]), static_cast<Eigen::Index>(v.rows)) = v.map().transpose();
        }
        const auto N_s = static_cast<std::ptrdiff_t>(N), n_in_s = static_cast<std::ptrdiff_t>(n_in);
        // One operand table for both passes: dZ, its row width, its weight and gradient.
        struct side {
            const T* dz;
            std::size_t width;
            const T* w;
            T* dw;
        };
        const side sides[2] = {{dzu, d.hu(), w.wh, g.wh}, {dzv, d.hv(), w.wd, g.wd}};
        gemm_epilogue sum_t;  // into dW [h, n_in], stored as its transpose
        sum_t.accumulate = true;
        sum_t.trans = true;
        for (const side& sd : sides) {
            for (std::size_t k0 = 0; k0 < N; k0 += dw_chunk) {
                const std::size_t kc = std::min(dw_chunk, N - k0);
                gemm_rowmajor_b(xp + k0, N_s, n_in, kc, sd.dz + k0 * sd.width, static_cast<std::ptrdiff_t>(sd.width),
                                h, packed, sd.dw, n_in_s, sum_t);
            }
        }
        gemm_epilogue add;
        add.accumulate = true;
        for (int which = 0; which < 2; ++which) {
            const side& sd = sides[which];
            gemm_pack_b(sd.w, n_in_s, 1, h, n_in, packed);  // W [h, n_in]
            gemm_packed(sd.dz, static_cast<std::ptrdiff_t>(sd.width), N, h, packed, n_in,
                        which == 0 ? gemm_epilogue{} : add, xp, n_in_s);
        }
    }
};

}  // namespace detail
}  // namespace biaffine

#endif  // __AVX2__ && __FMA__
