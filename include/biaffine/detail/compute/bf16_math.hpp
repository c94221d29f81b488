// biaffine/detail/compute/bf16_math.hpp - the arithmetic of compute_precision::bf16:
// the Math policies both bf16 paths run on, inference (bf16_forward.hpp) and
// training (bf16_train.hpp). Each rounds operands to bf16 (to nearest even)
// and sums in fp32; they differ in how:
//   bf16_emulated_math<FloatOps>  (every CPU): rounded values kept as floats,
//             Eigen's fp32 GEMM and FloatOps' fp32 per-split kernel. bf16 x
//             bf16 products are exact in fp32, so it agrees with the native
//             kinds up to the order of the fp32 sums (and their flushing of
//             denormals);
//   bf16_vnni_math (AVX512_BF16 targets): bf16 storage, bf16_gemm for the
//             row-wise products, bf16_dots (VDPBF16PS) per split;
//   bf16_amx_math<FloatOps> (AMX-BF16 targets): the row-wise products on AMX
//             tiles (amx_gemm; bf16_gemm where Linux withholds the tiles), V
//             and T as floats holding bf16 values for FloatOps' per-split
//             kernel (VDPBF16PS runs at half the fp32 rate there).
// FloatOps is an fp32 host backend (avx2_backend, eigen_backend<float>); which
// one, and which Math a build runs, backend.hpp chooses.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/compute/amx_bf16_gemm.hpp"
#include "biaffine/detail/compute/avx512_bf16_gemm.hpp"
#include "biaffine/detail/compute/bf16_emulated.hpp"
#include "biaffine/detail/compute/operands.hpp"
#include "biaffine/detail/eigen.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// k rounded up to pairs of bf16 (the depth of a packed row).
constexpr std::size_t bf16_pairs(std::size_t k) noexcept { return (k + 1) / 2 * 2; }

/// The per-split products on FloatOps' fp32 kernels: V and T kept as floats
/// that hold bf16 values, rows of hv (the emulated and the AMX arithmetic).
template <class FloatOps>
struct bf16_float_dots {
    using dot_elem = float;
    static std::size_t dot_depth(std::size_t k) noexcept { return k; }
    /// Floats of `packed` a split of up to max_len rows needs.
    static std::size_t score_packed(std::size_t hv, std::size_t max_len) noexcept
    {
        return FloatOps::split_packed_elements(hv, max_len);
    }
    /// A split's scores s [n, n o] (rows of V and T of stride hv).
    static void scores(const float* va, std::size_t n, const float* t, std::size_t o, std::size_t hv,
                       score_view<float> s, float* packed)
    {
        const const_row_map<float> v(va, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(hv),
                                     Eigen::OuterStride<>(static_cast<Eigen::Index>(hv)));
        FloatOps::split_scores(v, t, o, s, packed);
    }
    static void dots(const float* a, std::size_t lda, std::size_t n, const float* b, std::size_t ldb, std::size_t m,
                     std::size_t k, float* c, std::size_t ldc)
    {
        const auto P = [](std::size_t v) { return static_cast<std::ptrdiff_t>(v); };
        bf16_dots_emulated(a, P(lda), P(n), b, P(ldb), P(m), P(k), c, P(ldc));
    }
};

/// Rows (and B) in bf16 on every CPU: floats rounded to bf16, products in
/// fp32 on Eigen and FloatOps' per-split kernel.
template <class FloatOps>
struct bf16_emulated_math : bf16_float_dots<FloatOps> {
    /// Whether its products run on AMX tiles (their depth padded to 32).
    static constexpr bool amx_tiles = false;
    using in_elem = float;
    static constexpr const char* name = "emulated";
    static const char* active() noexcept { return "emulated (fp32 kernels on bf16-rounded operands)"; }
    static std::size_t depth(std::size_t k) noexcept { return bf16_pairs(k); }

    /// dst [n, depth(k)] = src [n, k] (any strides) rounded, zeros after k.
    static void round_rows(const seq_view<const float>& src, float* dst, std::size_t ldd)
    {
        for (std::size_t i = 0; i < src.rows; ++i) {
            for (std::size_t p = 0; p < src.cols; ++p) dst[i * ldd + p] = round_to_bfloat16(src(i, p));
            std::fill(dst + i * ldd + src.cols, dst + i * ldd + depth(src.cols), 0.0f);
        }
    }
    /// B [K, M] (element (k, m) = at(k, m)) rounded, kept row-major
    /// [depth(K), M] with zero rows past K.
    template <class At>
    static void pack_b(At&& at, std::size_t K, std::size_t M, tracked_vector<float>& out)
    {
        out.assign(depth(K) * M, 0.0f);
        for (std::size_t k = 0; k < K; ++k)
            for (std::size_t m = 0; m < M; ++m) out[k * M + m] = round_to_bfloat16(static_cast<float>(at(k, m)));
    }
    /// Elements pack_b allocates.
    static std::size_t packed_size(std::size_t K, std::size_t M) noexcept { return depth(K) * M; }
    /// c [N, M] (row stride ldc) = round(relu?(a [N, K] B + bias)); NaN kept by the ReLU.
    static void gemm(const float* a, std::size_t lda, std::size_t N, std::size_t K, const tracked_vector<float>& b,
                     std::size_t M, const float* bias, bool relu, float* c, std::size_t ldc)
    {
        using Stride = Eigen::OuterStride<>;
        const auto n = static_cast<Eigen::Index>(N), k = static_cast<Eigen::Index>(depth(K)),
                   m = static_cast<Eigen::Index>(M);
        Eigen::Map<const row_matrix<float>, Eigen::Unaligned, Stride> A(a, n, k, Stride(static_cast<Eigen::Index>(lda)));
        Eigen::Map<const row_matrix<float>> B(b.data(), k, m);
        Eigen::Map<row_matrix<float>, Eigen::Unaligned, Stride> C(c, n, m, Stride(static_cast<Eigen::Index>(ldc)));
        C.noalias() = A * B;
        for (Eigen::Index i = 0; i < n; ++i)
            for (Eigen::Index j = 0; j < m; ++j) {
                float z = C(i, j) + (bias != nullptr ? bias[j] : 0.0f);
                if (relu && z < 0.0f) z = 0.0f;
                C(i, j) = round_to_bfloat16(z);
            }
    }

    // Training's products (bf16_train): fp32 results of rounded operands.
    /// C [N, M] (row stride ldc) = epilogue(A [N, depth(K)] . B [depth(K), M]).
    static void product(const float* a, std::size_t lda, std::size_t N, std::size_t K, const float* b,
                        std::size_t M, const bf16_gemm_epilogue& ep, float* c, std::size_t ldc)
    {
        using Stride = Eigen::OuterStride<>;
        const auto I = [](std::size_t v) { return static_cast<Eigen::Index>(v); };
        Eigen::Map<const row_matrix<float>, Eigen::Unaligned, Stride> A(a, I(N), I(depth(K)), Stride(I(lda)));
        Eigen::Map<const row_matrix<float>> B(b, I(depth(K)), I(M));
        Eigen::Map<row_matrix<float>, Eigen::Unaligned, Stride> C(c, I(N), I(M), Stride(I(ldc)));
        if (ep.accumulate) {
            C.noalias() += A * B;
        } else {
            C.noalias() = A * B;
        }
        if (ep.bias == nullptr && !ep.relu && !ep.round) return;
        for (std::size_t i = 0; i < N; ++i) {
            float* r = c + i * ldc;
            for (std::size_t j = 0; j < M; ++j) {
                float y = r[j] + (ep.bias != nullptr ? ep.bias[j] : 0.0f);
                if (ep.relu && y < 0.0f) y = 0.0f;  // NaN kept
                r[j] = ep.round ? round_to_bfloat16(y) : y;
            }
        }
    }
    /// B [K, M] from K rows of floats (row(k): M of them), rounded,
    /// [depth(K), M] with zero rows past K.
    template <class Row>
    static void pack_pairs(Row&& row, std::size_t K, std::size_t M, float* out)
    {
        const std::size_t depth = bf16_emulated_math::depth(K);
        for (std::size_t k = 0; k < depth; ++k) {
            float* o = out + k * M;
            if (k >= K) {
                std::fill(o, o + M, 0.0f);
                continue;
            }
            const float* s = row(k);
            for (std::size_t m = 0; m < M; ++m) o[m] = round_to_bfloat16(s[m]);
        }
    }
    /// a [M, depth(K)] (row stride lda) = src^T rounded, zeros past K.
    static void pack_transposed(const float* src, std::size_t ld, std::size_t K, std::size_t M, float* a,
                                std::size_t lda)
    {
        const std::size_t depth = bf16_emulated_math::depth(K);
        for (std::size_t m = 0; m < M; ++m) {
            float* r = a + m * lda;
            for (std::size_t k = 0; k < K; ++k) r[k] = round_to_bfloat16(src[k * ld + m]);
            std::fill(r + K, r + depth, 0.0f);
        }
    }
};

#if BIAFFINE_DETAIL_BF16_GEMM
/// bf16 rows for A (and, in bf16_vnni_math, for the per-split products).
template <std::size_t Step>
struct bf16_rows_math {
    using in_elem = bfloat16;
    static constexpr bool amx_tiles = Step == 32;
    static std::size_t depth(std::size_t k) noexcept { return (k + Step - 1) / Step * Step; }

    static void round_rows(const seq_view<const float>& src, bfloat16* dst, std::size_t ldd)
    {
        const auto P = [](std::size_t v) { return static_cast<std::ptrdiff_t>(v); };
        std::size_t written = src.cols;  // then zeros up to the depth
        if (src.col_stride == 1) {
            pack_bf16_rows(src.data, src.row_stride, P(src.rows), P(src.cols), dst, P(ldd));
            written = bf16_pairs(src.cols);
        } else {
            for (std::size_t i = 0; i < src.rows; ++i)
                for (std::size_t p = 0; p < src.cols; ++p) dst[i * ldd + p] = bfloat16(src(i, p));
        }
        for (std::size_t i = 0; i < src.rows; ++i)
            std::fill(dst + i * ldd + written, dst + i * ldd + depth(src.cols), bfloat16(0.0f));
    }
    template <class At>
    static void pack_b(At&& at, std::size_t K, std::size_t M, tracked_vector<bfloat16>& out)
    {
        out.assign(packed_size(K, M), bfloat16(0.0f));
        bf16_gemm_pack(at, K, M, out.data(), depth(K));
    }
    static std::size_t packed_size(std::size_t K, std::size_t M) noexcept
    {
        return bf16_gemm_packed_size(K, M, depth(K));
    }

    // Training's products (bf16_train): fp32 results on VDPBF16PS.
    /// C [N, M] (row stride ldc) = epilogue(A [N, depth(K)] . B), B packed
    /// by pack_b or pack_pairs.
    static void product(const bfloat16* a, std::size_t lda, std::size_t N, std::size_t K, const bfloat16* b,
                        std::size_t M, const bf16_gemm_epilogue& ep, float* c, std::size_t ldc)
    {
        bf16_gemm(a, static_cast<std::ptrdiff_t>(lda), N, depth(K), b, M, ep, c, static_cast<std::ptrdiff_t>(ldc));
    }
    /// B [K, M] from K rows of floats (row(k): M of them, dense) in pair
    /// panels (two rows to a 32-bit lane), zeros past K and past M.
    template <class Row>
    static void pack_pairs(Row&& row, std::size_t K, std::size_t M, bfloat16* out)
    {
        const std::size_t depth = bf16_rows_math::depth(K);
        const std::size_t pairs = depth / 2;
        const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        for (std::size_t p = 0; p < pairs; ++p) {
            const float* r0 = 2 * p < K ? row(2 * p) : nullptr;
            const float* r1 = 2 * p + 1 < K ? row(2 * p + 1) : nullptr;
            for (std::size_t j0 = 0; j0 < M; j0 += bf16_gemm_panel) {
                bfloat16* dst = out + j0 * pairs * 2 + p * 2 * bf16_gemm_panel;
                for (std::size_t half = 0; half < 2; ++half) {
                    const std::size_t c0 = j0 + 16 * half;
                    const __mmask16 m = lanes(c0 < M ? M - c0 : 0);
                    const __m512 x0 = r0 != nullptr ? _mm512_maskz_loadu_ps(m, r0 + c0) : _mm512_setzero_ps();
                    const __m512 x1 = r1 != nullptr ? _mm512_maskz_loadu_ps(m, r1 + c0) : _mm512_setzero_ps();
                    const __m512 lo = _mm512_permutex2var_ps(x0, lo_idx, x1);
                    const __m512 hi = _mm512_permutex2var_ps(x0, hi_idx, x1);
                    _mm512_storeu_si512(dst + 32 * half, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
                }
            }
        }
    }
    /// a [M, depth(K)] (row stride lda, even) = src^T rounded: row m holds
    /// src[k * ld + m] for the K rows of src, then zeros up to the depth.
    static void pack_transposed(const float* src, std::size_t ld, std::size_t K, std::size_t M, bfloat16* a,
                                std::size_t lda)
    {
        const std::size_t depth = bf16_rows_math::depth(K);
        // 16 pairs of tokens x 16 columns at a time: each pair of rows
        // interleaved and rounded into 16 lanes (one column's pair
        // each), then the 16 x 16 block of 32-bit pairs transposed
        // through the stack.
        const std::size_t pairs = depth / 2;
        const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        alignas(64) std::uint32_t blk[16][16];
        for (std::size_t p0 = 0; p0 < pairs; p0 += 16) {
            const std::size_t np = std::min<std::size_t>(16, pairs - p0);
            for (std::size_t m0 = 0; m0 < M; m0 += 16) {
                const std::size_t nm = std::min<std::size_t>(16, M - m0);
                const __mmask16 mask = lanes(nm);
                for (std::size_t q = 0; q < np; ++q) {
                    const std::size_t k = 2 * (p0 + q);
                    const __m512 x0 = k < K ? _mm512_maskz_loadu_ps(mask, src + k * ld + m0) : _mm512_setzero_ps();
                    const __m512 x1 =
                        k + 1 < K ? _mm512_maskz_loadu_ps(mask, src + (k + 1) * ld + m0) : _mm512_setzero_ps();
                    const __m512 lo = _mm512_permutex2var_ps(x0, lo_idx, x1);
                    const __m512 hi = _mm512_permutex2var_ps(x0, hi_idx, x1);
                    _mm512_store_si512(blk[q], (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
                }
                for (std::size_t f = 0; f < nm; ++f) {
                    bfloat16* r = a + (m0 + f) * lda + 2 * p0;
                    for (std::size_t q = 0; q < np; ++q) std::memcpy(r + 2 * q, &blk[q][f], sizeof(std::uint32_t));
                }
            }
        }
    }

private:
    static __mmask16 lanes(std::size_t n) noexcept
    {
        return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
    }
};

/// bf16 storage and VDPBF16PS: bf16_gemm, bf16_dots (AVX512_BF16 CPUs
/// without AMX: Zen 4, Zen 5).
struct bf16_vnni_math : bf16_rows_math<2> {
    using dot_elem = bfloat16;
    static constexpr const char* name = "avx512_bf16";
    static const char* active() noexcept { return "avx512_bf16 (VDPBF16PS)"; }
    static std::size_t dot_depth(std::size_t k) noexcept { return bf16_pairs(k); }
    static std::size_t score_packed(std::size_t, std::size_t) noexcept { return 0; }
    static void scores(const bfloat16* va, std::size_t n, const bfloat16* t, std::size_t o, std::size_t hv,
                       score_view<float> s, float*)
    {
        const auto P = [](std::size_t v) { return static_cast<std::ptrdiff_t>(v); };
        const std::size_t ld = dot_depth(hv);
        bf16_dots(va, P(ld), P(n), t, P(ld), P(n * o), P(hv), s.data, s.row_stride);
    }
    template <class Out>
    static void gemm(const bfloat16* a, std::size_t lda, std::size_t N, std::size_t K, const tracked_vector<bfloat16>& b,
                     std::size_t M, const float* bias, bool relu, Out* c, std::size_t ldc)
    {
        static_assert(std::is_same<Out, bfloat16>::value, "bf16_vnni_math keeps every row in bf16");
        bf16_gemm(a, static_cast<std::ptrdiff_t>(lda), N, K, b.data(), M, bf16_gemm_epilogue{bias, relu}, nullptr, 0,
                  c, static_cast<std::ptrdiff_t>(ldc));
    }
    static void dots(const bfloat16* a, std::size_t lda, std::size_t n, const bfloat16* b, std::size_t ldb,
                     std::size_t m, std::size_t k, float* c, std::size_t ldc)
    {
        const auto P = [](std::size_t v) { return static_cast<std::ptrdiff_t>(v); };
        bf16_dots(a, P(lda), P(n), b, P(ldb), P(m), P(k), c, P(ldc));
    }
};
#endif

#if BIAFFINE_DETAIL_AMX_BF16
/// AMX tiles for the row-wise products (depth in steps of 32); V and T as
/// floats holding bf16 values for FloatOps' per-split kernel.
template <class FloatOps>
struct bf16_amx_math : bf16_rows_math<32>, bf16_float_dots<FloatOps> {
    static constexpr const char* name = "amx_bf16";
    static const char* active() noexcept
    {
        return amx_usable() ? "amx_bf16 (AMX tiles; per-split products on the fp32 kernels)"
                            : "avx512_bf16 (VDPBF16PS: Linux withholds the AMX tiles)";
    }
    template <class Out>
    static void gemm(const bfloat16* a, std::size_t lda, std::size_t N, std::size_t K, const tracked_vector<bfloat16>& b,
                     std::size_t M, const float* bias, bool relu, Out* c, std::size_t ldc)
    {
        const auto L = static_cast<std::ptrdiff_t>(lda), C = static_cast<std::ptrdiff_t>(ldc);
        const bf16_gemm_epilogue ep{bias, relu};
        constexpr bool to_bf16 = std::is_same<Out, bfloat16>::value;
        if (amx_usable()) {
            if constexpr (to_bf16) amx_gemm(a, L, N, depth(K), b.data(), M, ep, false, nullptr, 0, c, C);
            else amx_gemm(a, L, N, depth(K), b.data(), M, ep, true, c, C);
            return;
        }
        // Tiles withheld: the same products on VDPBF16PS (zeros past K add nothing).
        if constexpr (to_bf16) {
            bf16_gemm(a, L, N, depth(K), b.data(), M, ep, nullptr, 0, c, C);
        } else {
            bf16_gemm(a, L, N, depth(K), b.data(), M, ep, c, C);
            for (std::size_t i = 0; i < N; ++i)
                for (std::size_t j = 0; j < M; ++j) c[i * ldc + j] = round_to_bfloat16(c[i * ldc + j]);
        }
    }

    /// Training's products on AMX tiles (VDPBF16PS where Linux withholds them).
    static void product(const bfloat16* a, std::size_t lda, std::size_t N, std::size_t K, const bfloat16* b,
                        std::size_t M, const bf16_gemm_epilogue& ep, float* c, std::size_t ldc)
    {
        if (amx_usable()) {
            amx_gemm(a, static_cast<std::ptrdiff_t>(lda), N, K, b, M, ep, false, c, static_cast<std::ptrdiff_t>(ldc));
            return;
        }
        bf16_rows_math<32>::product(a, lda, N, K, b, M, ep, c, ldc);
    }
};
#endif

}  // namespace detail
BIAFFINE_NAMESPACE_END
