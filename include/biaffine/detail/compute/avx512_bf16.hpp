// biaffine/detail/compute/avx512_bf16.hpp - a split's scores S = Va Tr^T on
// VDPBF16PS (AVX512_BF16): bf16 operands, fp32 accumulation.
//
// The shape of zmm_dots (avx512_small.hpp): 4 x 4 dots at a time, 16
// accumulators, one transposing reduction and a 4-float store per row, a
// last partial block moved back over the one before it. What differs is
// the depth: operands are rows of bf16 *pairs* (k elements padded to an
// even count with a zero, e.g. hv = 129 -> 130), and each VDPBF16PS adds
// 16 lanes x 2 products, so a depth of 130 takes 5 steps (the last one
// through a lane mask of pairs) where fp32's 129 takes 9. bench_bf16 (Zen
// 4, one thread): 1.7-3.1x zmm_dots over every split of 100k tokens at n =
// 5-100 (o = 1) and 20k at o = 50; oneDNN's bf16 matmul called per split
// catches up at n = 50 and leads at n = 100 (bench/results/bf16.txt).
//
// Rounding: bf16 x bf16 products are exact in fp32; VDPBF16PS adds them
// into fp32 lanes with round-to-nearest-even, ignores MXCSR and treats
// denormal inputs and outputs as zero. Packing (pack_bf16_rows, on
// VCVTNE2PS2BF16) rounds to nearest even as biaffine::bfloat16 does, except
// that it flushes denormal floats to a signed zero (which VDPBF16PS would
// read as zero anyway).
//
// Declared only where the compiler targets AVX512_BF16 (and avx512_small's
// helpers exist: BIAFFINE_AVX512_SMALL_PRODUCTS); elsewhere the emulated
// path (bf16_emulated.hpp) gives the same results to within the order of
// the fp32 accumulation.
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/compute/avx512_small.hpp"

#if defined(__AVX512BF16__) && BIAFFINE_DETAIL_ZMM_SMALL
#define BIAFFINE_DETAIL_ZMM_BF16 1

#include <cstddef>
#include <cstdint>

#include <immintrin.h>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// bf16 elements of a packed row of depth k: k rounded up to pairs.
constexpr std::ptrdiff_t bf16_packed_depth(std::ptrdiff_t k) noexcept
{
    return (k + 1) / 2 * 2;
}

/// dst [n, bf16_packed_depth(k)] (row stride ldd bf16, even, >= the packed
/// depth) = src [n, k] (row stride lds floats) rounded to bf16, a zero
/// after an odd k; 32 floats per VCVTNE2PS2BF16. Once per batch: the
/// packed rows feed every split's bf16_dots.
inline void pack_bf16_rows(const float* src, std::ptrdiff_t lds, std::ptrdiff_t n, std::ptrdiff_t k,
                           bfloat16* dst, std::ptrdiff_t ldd)
{
    using zmm_small::first_lanes;
    const std::ptrdiff_t kp = bf16_packed_depth(k);
    for (std::ptrdiff_t i = 0; i < n; ++i) {
        const float* s = src + i * lds;
        bfloat16* d = dst + i * ldd;
        for (std::ptrdiff_t p = 0; p < kp; p += 32) {
            // Masked-off floats load as zero: the pad element of an odd k.
            const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(k - p), s + p);
            const __m512 hi = _mm512_maskz_loadu_ps(p + 16 < k ? first_lanes(k - p - 16) : __mmask16(0), s + p + 16);
            const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            const std::ptrdiff_t left = kp - p;
            const __mmask16 pairs = first_lanes(left / 2);
            _mm512_mask_storeu_epi32(d + p, pairs, packed);
        }
    }
}

namespace zmm_bf16 {

// C[r, q] = A[r, :] . B[q, :] over `pairs` bf16 pairs, r < R, q < C (R, C
// <= 4); accumulator r * 4 + q, so row r's sums land in 128-bit lane r
// (zmm_small::sums_of).
template <int R, int C>
[[gnu::always_inline]] inline void dots_block(const bfloat16* a, std::ptrdiff_t lda, const bfloat16* b,
                                              std::ptrdiff_t ldb, std::ptrdiff_t pairs, float* c, std::ptrdiff_t ldc)
{
    using namespace zmm_small;
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (std::ptrdiff_t p = 0; p < pairs; p += 16) {
        const __mmask16 m = first_lanes(pairs - p);
        __m512bh bq[C];
        for (int q = 0; q < C; ++q) bq[q] = (__m512bh)_mm512_maskz_loadu_epi32(m, b + q * ldb + 2 * p);
        for (int r = 0; r < R; ++r) {
            const __m512bh ar = (__m512bh)_mm512_maskz_loadu_epi32(m, a + r * lda + 2 * p);
            for (int q = 0; q < C; ++q) acc[r * 4 + q] = _mm512_dpbf16_ps(acc[r * 4 + q], ar, bq[q]);
        }
    }
    // Row r's C sums are lanes 4r.. of s: compressed down to lane 0 and
    // stored through a mask of C lanes, one masked store per row.
    const __m512 s = sums_of(acc);
    for (int r = 0; r < R; ++r) {
        const __m512 row = _mm512_maskz_compress_ps(static_cast<__mmask16>(0xfu << (4 * r)), s);
        _mm512_mask_storeu_ps(c + r * ldc, static_cast<__mmask16>((1u << C) - 1u), row);
    }
}

// Blocks of up to 4 x 4 over [n, m]: a block of R x C for each (R, C) the
// edges need, a last block of 4 moved back to end at n (or m).
template <int C>
inline void dots_rows(const bfloat16* a, std::ptrdiff_t lda, std::ptrdiff_t n, const bfloat16* b, std::ptrdiff_t ldb,
                      std::ptrdiff_t pairs, float* c, std::ptrdiff_t ldc)
{
    if (n < 4) {
        if (n == 3) dots_block<3, C>(a, lda, b, ldb, pairs, c, ldc);
        if (n == 2) dots_block<2, C>(a, lda, b, ldb, pairs, c, ldc);
        if (n == 1) dots_block<1, C>(a, lda, b, ldb, pairs, c, ldc);
        return;
    }
    for (std::ptrdiff_t i = 0; i < n; i += 4) {
        const std::ptrdiff_t r = i + 4 > n ? n - 4 : i;
        dots_block<4, C>(a + r * lda, lda, b, ldb, pairs, c + r * ldc, ldc);
    }
}

}  // namespace zmm_bf16

/// `C [n, m] = A [n, k] . B [m, k]^T` with A and B packed by pack_bf16_rows
/// (bf16 rows of bf16_packed_depth(k) elements, row strides lda, ldb in
/// bf16, even), C fp32 row-major with row stride ldc; C is overwritten.
/// Computes what zmm_dots computes on the bf16-rounded operands, summed in
/// another order.
inline void bf16_dots(const bfloat16* a, std::ptrdiff_t lda, std::ptrdiff_t n, const bfloat16* b,
                      std::ptrdiff_t ldb, std::ptrdiff_t m, std::ptrdiff_t k, float* c, std::ptrdiff_t ldc)
{
    using namespace zmm_bf16;
    const std::ptrdiff_t pairs = bf16_packed_depth(k) / 2;
    if (m < 4) {
        if (m == 3) dots_rows<3>(a, lda, n, b, ldb, pairs, c, ldc);
        if (m == 2) dots_rows<2>(a, lda, n, b, ldb, pairs, c, ldc);
        if (m == 1) dots_rows<1>(a, lda, n, b, ldb, pairs, c, ldc);
        return;
    }
    for (std::ptrdiff_t j = 0; j < m; j += 4) {
        const std::ptrdiff_t q = j + 4 > m ? m - 4 : j;
        dots_rows<4>(a, lda, n, b + q * ldb, ldb, pairs, c + q, ldc);
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END

#else
#define BIAFFINE_DETAIL_ZMM_BF16 0
#endif
