// biaffine/detail/compute/avx512_small.hpp - a split's small products in
// 512-bit registers, nothing packed: its scores S = Va Tr^T as blocks of dot
// products (zmm_dots), their backward dVa = dS Tr and dTr = dS^T Va as
// combinations of whole rows (zmm_combos).
//
// At one label most splits have 10-30 tokens. The GEMM kernel pads n to its
// 16-column panels and packs an operand per split; row_dots spends as long
// on each dot's horizontal sum as on its FMAs. Here:
//   zmm_dots:   4 x 4 dots at a time, 16 accumulators over k (a last
//               partial packet through a lane mask), then one transposing
//               reduction of all 16 (15 adds) and a 4-float store per row; a
//               last partial block of rows or columns overlaps the one
//               before it (its dots computed twice, identically) instead of
//               running on fewer accumulators.
//   zmm_combos: 3 rows of C by up to 9 registers (a row of hv = 129 floats:
//               8 and one masked) at a time, B's rows read in place, A by
//               any strides, so dS^T is never copied out transposed.
// Measured against the kernel and row_dots in config.hpp
// (BIAFFINE_AVX512_SMALL_PRODUCTS). Shuffles in their masked forms, as in
// avx2_kernel.hpp: the unmasked ones pass g++ 12 an undefined operand
// (its bug 105593) and fail -Werror.
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/config.hpp"

#if defined(__AVX512F__) && BIAFFINE_AVX512_SMALL_PRODUCTS
#define BIAFFINE_DETAIL_ZMM_SMALL 1

#include <cstddef>

#include <immintrin.h>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {
namespace zmm_small {

constexpr __mmask16 all_lanes = 0xffff;

inline __mmask16 first_lanes(std::ptrdiff_t n) noexcept
{
    return n >= 16 ? all_lanes : static_cast<__mmask16>((1u << n) - 1u);
}

// The horizontal sums of acc[0], ..., acc[15], in that order, in one
// register: pairs folded into each other at every level (unpack within
// 128-bit lanes twice, then across lanes twice).
[[gnu::always_inline]] inline __m512 sums_of(const __m512 (&acc)[16])
{
    __m512 l1[8], l2[4], l3[2];
    for (int i = 0; i < 8; ++i) {
        const __m512 x = acc[2 * i], y = acc[2 * i + 1];
        l1[i] = _mm512_add_ps(_mm512_mask_unpacklo_ps(x, all_lanes, x, y), _mm512_mask_unpackhi_ps(x, all_lanes, x, y));
    }
    for (int i = 0; i < 4; ++i) {
        const __m512d x = _mm512_castps_pd(l1[2 * i]), y = _mm512_castps_pd(l1[2 * i + 1]);
        l2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_mask_unpacklo_pd(x, 0xff, x, y)),
                              _mm512_castpd_ps(_mm512_mask_unpackhi_pd(x, 0xff, x, y)));
    }
    const auto fold = [](const __m512& x, const __m512& y) {
        return _mm512_add_ps(_mm512_mask_shuffle_f32x4(x, all_lanes, x, y, 0x88),
                             _mm512_mask_shuffle_f32x4(x, all_lanes, x, y, 0xdd));
    };
    l3[0] = fold(l2[0], l2[1]);
    l3[1] = fold(l2[2], l2[3]);
    return fold(l3[0], l3[1]);
}

// 128-bit lane r of s (r a constant once the caller's loop is unrolled).
[[gnu::always_inline]] inline __m128 lane_of(const __m512& s, int r)
{
    const __m128 z = _mm_setzero_ps();
    switch (r) {
    case 0: return _mm512_mask_extractf32x4_ps(z, 0xf, s, 0);
    case 1: return _mm512_mask_extractf32x4_ps(z, 0xf, s, 1);
    case 2: return _mm512_mask_extractf32x4_ps(z, 0xf, s, 2);
    default: return _mm512_mask_extractf32x4_ps(z, 0xf, s, 3);
    }
}

// C[r, q] = A[r, :] . B[q, :] for r < R, q < C (R, C <= 4); accumulator
// r * 4 + q, so row r's sums land in 128-bit lane r.
template <int R, int C>
[[gnu::always_inline]] inline void dots_block(const float* a, std::ptrdiff_t lda, const float* b, std::ptrdiff_t ldb,
                                              std::ptrdiff_t k, float* c, std::ptrdiff_t ldc)
{
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (std::ptrdiff_t p = 0; p < k; p += 16) {
        const __mmask16 m = first_lanes(k - p);
        __m512 bq[C];
        for (int q = 0; q < C; ++q) bq[q] = _mm512_maskz_loadu_ps(m, b + q * ldb + p);
        for (int r = 0; r < R; ++r) {
            const __m512 ar = _mm512_maskz_loadu_ps(m, a + r * lda + p);
            for (int q = 0; q < C; ++q) acc[r * 4 + q] = _mm512_fmadd_ps(ar, bq[q], acc[r * 4 + q]);
        }
    }
    const __m512 s = sums_of(acc);
    for (int r = 0; r < R; ++r) {
        const __m128 row = lane_of(s, r);
        if (C == 4) {
            _mm_storeu_ps(c + r * ldc, row);
        } else {
            alignas(16) float t[4];
            _mm_store_ps(t, row);
            for (int q = 0; q < C; ++q) c[r * ldc + q] = t[q];
        }
    }
}

// Rows [0, n) of A against C rows of B: blocks of 4 rows, the last one
// moved back to end at row n; n < 4 in one block of n rows.
template <int C>
inline void dots_rows(const float* a, std::ptrdiff_t lda, std::ptrdiff_t n, const float* b, std::ptrdiff_t ldb,
                      std::ptrdiff_t k, float* c, std::ptrdiff_t ldc)
{
    switch (n) {
    case 0: return;
    case 1: dots_block<1, C>(a, lda, b, ldb, k, c, ldc); return;
    case 2: dots_block<2, C>(a, lda, b, ldb, k, c, ldc); return;
    case 3: dots_block<3, C>(a, lda, b, ldb, k, c, ldc); return;
    default: break;
    }
    for (std::ptrdiff_t i = 0;; i += 4) {
        if (i + 4 > n) i = n - 4;
        dots_block<4, C>(a + i * lda, lda, b, ldb, k, c + i * ldc, ldc);
        if (i + 4 == n) return;
    }
}

// Rows of C per block of zmm_combos over V registers of columns: R * V
// accumulators, R broadcasts and one register of B within the 32.
template <int V>
constexpr int combo_rows = V >= 7 ? 3 : V == 6 ? 4 : V == 5 ? 5 : 6;

// C[r, :16 V] = sum_p A(r, p) B[p, :] for r < R, the last register through
// the lane mask `last`.
template <int R, int V>
[[gnu::always_inline]] inline void combos_block(const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs,
                                                std::ptrdiff_t p_count, const float* b, std::ptrdiff_t ldb,
                                                __mmask16 last, float* c, std::ptrdiff_t ldc)
{
    __m512 acc[R][V];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    for (std::ptrdiff_t p = 0; p < p_count; ++p) {
        __m512 ap[R];
        for (int r = 0; r < R; ++r) ap[r] = _mm512_set1_ps(a[r * a_rs + p * a_cs]);
        const float* bp = b + p * ldb;
        for (int v = 0; v < V; ++v) {
            __m512 bv = v + 1 < V ? _mm512_loadu_ps(bp + 16 * v) : _mm512_maskz_loadu_ps(last, bp + 16 * v);
#if defined(__GNUC__)
            // In a register for all R rows: g++ folded the load into each
            // FMA instead, R loads per vector (Tr's rows, 129 floats apart,
            // mostly across two cache lines), and the backward of a 100k-token
            // document's splits ran at 128 GFLOP/s against 218.
            __asm__("" : "+v"(bv));
#endif
            for (int r = 0; r < R; ++r) acc[r][v] = _mm512_fmadd_ps(ap[r], bv, acc[r][v]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int v = 0; v + 1 < V; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (V - 1), last, acc[r][V - 1]);
    }
}

// Rows [0, n) of C over V registers of columns: blocks of combo_rows<V>,
// then the rows left over in one block of their count.
template <int V, int R = combo_rows<V>>
inline void combos_rows(const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, std::ptrdiff_t n,
                        std::ptrdiff_t p_count, const float* b, std::ptrdiff_t ldb, __mmask16 last, float* c,
                        std::ptrdiff_t ldc)
{
    std::ptrdiff_t i = 0;
    for (; i + R <= n; i += R) combos_block<R, V>(a + i * a_rs, a_rs, a_cs, p_count, b, ldb, last, c + i * ldc, ldc);
    if constexpr (R > 1) {
        if (i < n) combos_rows<V, R - 1>(a + i * a_rs, a_rs, a_cs, n - i, p_count, b, ldb, last, c + i * ldc, ldc);
    }
}

}  // namespace zmm_small

/// `C [n, m] = A [n, k] . B [m, k]^T`, row-major with unit column stride
/// and leading dimensions lda, ldb, ldc (floats); C is overwritten (see
/// row_dots, which computes the same).
inline void zmm_dots(const float* a, std::ptrdiff_t lda, std::ptrdiff_t n, const float* b, std::ptrdiff_t ldb,
                     std::ptrdiff_t m, std::ptrdiff_t k, float* c, std::ptrdiff_t ldc)
{
    using namespace zmm_small;
    switch (m) {
    case 0: return;
    case 1: dots_rows<1>(a, lda, n, b, ldb, k, c, ldc); return;
    case 2: dots_rows<2>(a, lda, n, b, ldb, k, c, ldc); return;
    case 3: dots_rows<3>(a, lda, n, b, ldb, k, c, ldc); return;
    default: break;
    }
    for (std::ptrdiff_t j = 0;; j += 4) {
        if (j + 4 > m) j = m - 4;
        dots_rows<4>(a, lda, n, b + j * ldb, ldb, k, c + j, ldc);
        if (j + 4 == m) return;
    }
}

/// `C [n, k] = A [n, p] . B [p, k]`: B and C row-major with unit column
/// stride and leading dimensions ldb, ldc; A's entry (i, q) at
/// a[i * a_rs + q * a_cs] (a transposed A is swapped strides). C is
/// overwritten (see row_combos, which computes the same).
inline void zmm_combos(const float* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs, std::ptrdiff_t n,
                       std::ptrdiff_t p_count, const float* b, std::ptrdiff_t ldb, std::ptrdiff_t k, float* c,
                       std::ptrdiff_t ldc)
{
    using namespace zmm_small;
    std::ptrdiff_t j = 0;
    for (; k - j > 144; j += 128) combos_rows<8>(a, a_rs, a_cs, n, p_count, b + j, ldb, all_lanes, c + j, ldc);
    const std::ptrdiff_t left = k - j;
    const __mmask16 last = first_lanes(left - (left - 1) / 16 * 16);
    b += j;
    c += j;
    switch ((left + 15) / 16) {
    case 9: combos_rows<9>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 8: combos_rows<8>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 7: combos_rows<7>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 6: combos_rows<6>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 5: combos_rows<5>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 4: combos_rows<4>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 3: combos_rows<3>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 2: combos_rows<2>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    case 1: combos_rows<1>(a, a_rs, a_cs, n, p_count, b, ldb, last, c, ldc); break;
    default: break;  // k == 0
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END

#else
#define BIAFFINE_DETAIL_ZMM_SMALL 0
#endif
