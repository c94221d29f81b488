// biaffine/detail/compute/avx512_bf16_gemm.hpp - the row-wise products of a
// bf16 scorer (projections with bias + ReLU, U W') on VDPBF16PS: A in bf16
// rows, B packed once into bf16 pair panels, fp32 accumulation, a fused
// epilogue that stores fp32 or bf16.
//
// The layout is the one VDPBF16PS wants: each 32-bit lane multiplies a pair
// of bf16 along k, so B is packed as panels of 32 columns, and within a
// panel, for each pair of rows (k, k + 1) of B, 32 columns x 2 bf16 (64
// bf16, two registers). A row of A is read a pair at a time, broadcast to
// every lane. A block of up to six rows x 32 columns keeps twelve
// accumulators, as the fp32 kernel (avx2_kernel.hpp) does; each step does
// twice the multiply-adds of an fp32 FMA step, which is where the factor of
// two of bf16 comes from (bench/bench_bf16.cpp measures it against the fp32
// kernel and oneDNN's bf16 matmul on the scorer's shapes).
//
// Rounding: operands are rounded to bf16 once (A by pack_bf16_rows, B by
// bf16_gemm_pack_b, both to nearest even); products of bf16 are exact in
// fp32 and are summed in fp32 (VDPBF16PS: round to nearest even, denormals
// as zero), in a different order from the fp32 kernel's. Declared where the
// compiler targets AVX512_BF16 (BIAFFINE_DETAIL_ZMM_BF16).
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/detail/compute/avx512_bf16.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// What bf16_gemm does with a block of results: + bias [M] (or none),
/// ReLU (NaN kept), then stored as fp32 (`c`, row stride ldc floats) or, with
/// `c16` set, rounded to bf16 (row stride ldc16 bf16 elements: e.g. rows
/// that feed the next bf16 product, packed as pack_bf16_rows packs them).
struct bf16_gemm_epilogue {
    const float* bias = nullptr;
    bool relu = false;
    /// fp32 out only: add to what `c` holds (gradients summed over chunks
    /// of tokens), and round the stored value to a bf16 value (activations
    /// that are the next product's operands; bf16_train.hpp).
    bool accumulate = false;
    bool round = false;
};

}  // namespace detail
BIAFFINE_NAMESPACE_END

// Its stores need AVX512BW and VL too (a unit built with -mavx512bf16 over
// an AVX2 -march has neither).
#if BIAFFINE_DETAIL_ZMM_BF16 && defined(__AVX512BW__) && defined(__AVX512VL__)
#define BIAFFINE_DETAIL_BF16_GEMM 1

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Columns of one packed panel of B.
constexpr std::size_t bf16_gemm_panel = 32;

/// bf16 elements of B [K, M] packed by bf16_gemm_pack_b: ceil(M / 32)
/// panels of bf16_packed_depth(K) / 2 pairs x 32 columns x 2.
/// (`depth`: the packed depth, at least that; AMX wants multiples of 32.)
inline std::size_t bf16_gemm_packed_size(std::size_t K, std::size_t M, std::size_t depth = 0) noexcept
{
    return (M + bf16_gemm_panel - 1) / bf16_gemm_panel * bf16_gemm_panel *
           std::max(depth, static_cast<std::size_t>(bf16_packed_depth(static_cast<std::ptrdiff_t>(K))));
}

/// Packs B [K, M] (element (k, m) = at(k, m), a float), rounded to bf16,
/// into pair panels; rows past K (an odd K's pad) and columns past M are
/// zero, and so are rows up to `depth` where it is larger (AMX's tiles read
/// the depth in steps of 32). Weights: once per parameter version.
template <class At>
void bf16_gemm_pack(At&& at, std::size_t K, std::size_t M, bfloat16* out, std::size_t depth = 0)
{
    const std::size_t pairs =
        std::max(depth, static_cast<std::size_t>(bf16_packed_depth(static_cast<std::ptrdiff_t>(K)))) / 2;
    for (std::size_t j0 = 0; j0 < M; j0 += bf16_gemm_panel) {
        bfloat16* panel = out + j0 * pairs * 2;
        const std::size_t w = std::min(bf16_gemm_panel, M - j0);
        for (std::size_t p = 0; p < pairs; ++p) {
            bfloat16* dst = panel + p * bf16_gemm_panel * 2;
            for (std::size_t j = 0; j < bf16_gemm_panel; ++j) {
                for (std::size_t e = 0; e < 2; ++e) {
                    const std::size_t k = 2 * p + e;
                    dst[2 * j + e] = bfloat16(j < w && k < K ? static_cast<float>(at(k, j0 + j)) : 0.0f);
                }
            }
        }
    }
}

/// The same for B at b[k * rs + m * cs] (K x M floats).
inline void bf16_gemm_pack_b(const float* b, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t K, std::size_t M,
                             bfloat16* out, std::size_t depth = 0)
{
    bf16_gemm_pack(
        [&](std::size_t k, std::size_t m) {
            return b[static_cast<std::ptrdiff_t>(k) * rs + static_cast<std::ptrdiff_t>(m) * cs];
        },
        K, M, out, depth);
}


namespace zmm_bf16 {

// A pair of bf16 of row r at pair p, broadcast to every 32-bit lane.
[[gnu::always_inline]] inline __m512bh pair_of(const bfloat16* a, std::size_t p)
{
    std::int32_t v;
    std::memcpy(&v, a + 2 * p, sizeof v);
    return (__m512bh)_mm512_set1_epi32(v);
}

// Each lane rounded to nearest even to the float of a bf16 value.
[[gnu::always_inline]] inline __m512 bf16_values(__m512 y)
{
    const __m256i b = (__m256i)_mm512_cvtneps_pbh(y);
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, b), 16));  // maskz: g++ 12 warns on the plain forms
}

template <int R>
[[gnu::always_inline]] inline void store_rows(const __m512 (&acc)[6][2], const bf16_gemm_epilogue& ep,
                                              std::size_t cols, float* c, std::ptrdiff_t ldc, bfloat16* c16,
                                              std::ptrdiff_t ldc16)
{
    const __m512 zero = _mm512_setzero_ps();
    const auto lanes = [&](std::size_t h) {
        const std::size_t left = cols > 16 * h ? cols - 16 * h : 0;
        return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
    };
    const __mmask16 m0 = lanes(0), m1 = lanes(1);
    const __m512 b0 = ep.bias != nullptr ? _mm512_maskz_loadu_ps(m0, ep.bias) : zero;
    const __m512 b1 = ep.bias != nullptr ? _mm512_maskz_loadu_ps(m1, ep.bias + 16) : zero;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
        __m512 y0 = _mm512_add_ps(acc[r][0], b0);
        __m512 y1 = _mm512_add_ps(acc[r][1], b1);
        if (ep.relu) {
            // maxps returns its second operand on NaN: NaN kept (masked form:
            // g++ 12's bug 105593 on the unmasked one, see avx2_kernel.hpp).
            y0 = _mm512_mask_max_ps(y0, 0xffff, zero, y0);
            y1 = _mm512_mask_max_ps(y1, 0xffff, zero, y1);
        }
        if (c16 != nullptr) {
            bfloat16* row = c16 + r * ldc16;
            _mm256_mask_storeu_epi16(row, m0, (__m256i)_mm512_cvtneps_pbh(y0));
            if (m1 != 0) _mm256_mask_storeu_epi16(row + 16, m1, (__m256i)_mm512_cvtneps_pbh(y1));
        } else {
            float* row = c + r * ldc;
            if (ep.accumulate) {
                y0 = _mm512_add_ps(y0, _mm512_maskz_loadu_ps(m0, row));
                y1 = _mm512_add_ps(y1, _mm512_maskz_loadu_ps(m1, row + 16));
            }
            if (ep.round) {
                y0 = bf16_values(y0);
                y1 = bf16_values(y1);
            }
            _mm512_mask_storeu_ps(row, m0, y0);
            if (m1 != 0) _mm512_mask_storeu_ps(row + 16, m1, y1);
        }
    }
}

// `blocks` blocks of R rows (rows a + i * lda) x one panel (32 columns, of
// which `cols` are stored): the pair loop with twelve named accumulators.
template <int R>
[[gnu::noinline]] void gemm_block_rows(const bfloat16* a, std::ptrdiff_t lda, std::size_t blocks, const bfloat16* panel,
                                       std::size_t pairs, const bf16_gemm_epilogue& ep, std::size_t cols, float* c,
                                       std::ptrdiff_t ldc, bfloat16* c16, std::ptrdiff_t ldc16)
{
    static_assert(R >= 1 && R <= 6, "one to six rows");
    for (std::size_t blk = 0; blk < blocks; ++blk) {
        const bfloat16* a0 = a + static_cast<std::ptrdiff_t>(blk) * R * lda;
        __m512 acc[6][2];
        for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
        const bfloat16* bp = panel;
        for (std::size_t p = 0; p < pairs; ++p, bp += 2 * bf16_gemm_panel) {
            const __m512bh lo = (__m512bh)_mm512_loadu_si512(bp);
            const __m512bh hi = (__m512bh)_mm512_loadu_si512(bp + bf16_gemm_panel);
#pragma GCC unroll 6
            for (int r = 0; r < R; ++r) {
                const __m512bh x = pair_of(a0 + r * lda, p);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, lo);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, hi);
            }
        }
        const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(blk) * R;
        store_rows<R>(acc, ep, cols, c != nullptr ? c + row * ldc : nullptr, ldc,
                      c16 != nullptr ? c16 + row * ldc16 : nullptr, ldc16);
    }
}

template <class F>
void with_rows(std::size_t rows, F&& f)
{
    switch (rows) {
    case 6: f(std::integral_constant<int, 6>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    default: f(std::integral_constant<int, 1>()); break;
    }
}

}  // namespace zmm_bf16

/// C [N, M] = epilogue(A [N, K] . B): A in bf16 rows as pack_bf16_rows
/// packs them (bf16_packed_depth(K) elements, row stride lda bf16, even), B
/// packed by bf16_gemm_pack_b. The result goes to `c` (fp32, row stride
/// ldc) or, when `c16` is given, to c16 in bf16 (row stride ldc16; columns
/// past M untouched, so a caller pads them itself).
inline void bf16_gemm(const bfloat16* a, std::ptrdiff_t lda, std::size_t N, std::size_t K, const bfloat16* packed,
                      std::size_t M, const bf16_gemm_epilogue& ep, float* c, std::ptrdiff_t ldc,
                      bfloat16* c16 = nullptr, std::ptrdiff_t ldc16 = 0)
{
    using namespace zmm_bf16;
    const std::size_t pairs = static_cast<std::size_t>(bf16_packed_depth(static_cast<std::ptrdiff_t>(K))) / 2;
    // Rows in blocks that stay in L1 while the panels of a column block pass
    // over them; the column block (panels of about 256 KiB in all) stays in
    // L2 while every row block passes over it. Without column blocks, U W'
    // at 50 labels (6450 columns, 1.7 MB of panels) ran 1.70x the fp32
    // kernel against oneDNN's 2.39x (20k rows, Zen 4, one thread).
    constexpr std::size_t row_block = 96;
    const std::size_t panel_bytes = pairs * 2 * bf16_gemm_panel * sizeof(bfloat16);
    const std::size_t col_block = std::max<std::size_t>(1, (256u << 10) / panel_bytes) * bf16_gemm_panel;
    for (std::size_t c0 = 0; c0 < M; c0 += col_block)
    for (std::size_t r0 = 0; r0 < N; r0 += row_block) {
        const std::size_t rn = std::min(row_block, N - r0);
        // As few blocks of at most six rows as will do, of even heights
        // (the fp32 kernel's rule: fewer than four rows leave the
        // multiply-add pipes idle).
        const std::size_t blocks = (rn + 5) / 6, low = rn / blocks, high_blocks = rn % blocks;
        for (std::size_t j0 = c0; j0 < std::min(M, c0 + col_block); j0 += bf16_gemm_panel) {
            const std::size_t cols = std::min(bf16_gemm_panel, M - j0);
            const bfloat16* panel = packed + j0 * pairs * 2;
            bf16_gemm_epilogue e = ep;
            if (ep.bias != nullptr) e.bias = ep.bias + j0;
            for (std::size_t part = 0, r = 0; part < 2; ++part) {
                const std::size_t count = part == 0 ? high_blocks : blocks - high_blocks;
                if (count == 0) continue;
                const std::size_t R = low + (part == 0 ? 1 : 0);
                const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(r0 + r);
                with_rows(R, [&](auto rows_c) {
                    constexpr int Rc = decltype(rows_c)::value;
                    gemm_block_rows<Rc>(a + row * lda, lda, count, panel, pairs, e, cols,
                                        c != nullptr ? c + row * ldc + static_cast<std::ptrdiff_t>(j0) : nullptr, ldc,
                                        c16 != nullptr ? c16 + row * ldc16 + static_cast<std::ptrdiff_t>(j0) : nullptr,
                                        ldc16);
                });
                r += count * R;
            }
        }
    }
}

}  // namespace detail
BIAFFINE_NAMESPACE_END

#else
#define BIAFFINE_DETAIL_BF16_GEMM 0
#endif
