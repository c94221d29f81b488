// biaffine/detail/compute/avx2_kernel.hpp - a register-blocked AVX2/FMA float
// GEMM with a fused bias + relu epilogue, for the row-wise products of the
// scorer (the micro-kernel of avx2_backend.hpp).
//
// Why not Eigen's product here: the projections are [N, n_in] x [n_in, h]
// with a small, fixed right side. Eigen packs the big left side (X) on every
// call and runs the bias and relu as separate passes over the output. This
// kernel reads X rows in place, packs only the small right side, and adds
// the bias and clamps in registers before the one store. With AVX2 + FMA it
// runs a 6 x 16 register block (12 accumulators), on AVX-512 targets a 6 x
// 32 block of 512-bit registers (12 accumulators, BIAFFINE_AVX2_KERNEL_ZMM),
// and a panel left without a partner as a block of up to 12 rows x 16.
// Declared only where the
// compiler targets AVX2 and FMA; whether the scorer uses it is decided in
// backend.hpp.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <type_traits>

#include <immintrin.h>

#include "biaffine/config.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// Columns of one packed panel of the right side.
constexpr std::size_t gemm_panel = 16;

/// Floats of the packed right side for K x M: ceil(M / 16) panels of [K, 16].
inline std::size_t gemm_packed_size(std::size_t K, std::size_t M) noexcept
{
    return (M + gemm_panel - 1) / gemm_panel * gemm_panel * K;
}

/// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols: 8 x 8 tiles
/// transposed in registers, the edges element by element. (Eigen's
/// assignment of a transposed row-major block moves two floats per step:
/// about 5% of a training step over 100k tokens went there, AVX2 EPYC.)
inline void transpose_block(const float* src, std::ptrdiff_t lds, std::size_t rows, std::size_t cols, float* dst,
                            std::ptrdiff_t ldd)
{
    const auto at = [](std::size_t a, std::ptrdiff_t ld, std::size_t b) {
        return static_cast<std::ptrdiff_t>(a) * ld + static_cast<std::ptrdiff_t>(b);
    };
    // Tile bounds computed first: with `j + 8 <= cols` as the loop test,
    // g++ 12 warned (-Waggressive-loop-optimizations) on the edge loop once
    // a constant `cols` was inlined.
    const std::size_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (std::size_t i = 0; i < rows8; i += 8) {
        for (std::size_t j = 0; j < cols8; j += 8) {
            __m256 r[8], t[8];
            for (std::size_t q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(src + at(i + q, lds, j));
            // Pairs of rows interleaved, then quads: t[q] holds column q of
            // rows 0-3 in its low half and column q + 4 in its high half
            // (rows 4-7 likewise in t[q + 4]).
            for (std::size_t q = 0; q < 8; q += 4) {
                const __m256 lo01 = _mm256_unpacklo_ps(r[q], r[q + 1]), hi01 = _mm256_unpackhi_ps(r[q], r[q + 1]);
                const __m256 lo23 = _mm256_unpacklo_ps(r[q + 2], r[q + 3]);
                const __m256 hi23 = _mm256_unpackhi_ps(r[q + 2], r[q + 3]);
                t[q] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(1, 0, 1, 0));
                t[q + 1] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(3, 2, 3, 2));
                t[q + 2] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(1, 0, 1, 0));
                t[q + 3] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(3, 2, 3, 2));
            }
            for (std::size_t q = 0; q < 4; ++q) {
                _mm256_storeu_ps(dst + at(j + q, ldd, i), _mm256_permute2f128_ps(t[q], t[q + 4], 0x20));
                _mm256_storeu_ps(dst + at(j + q + 4, ldd, i), _mm256_permute2f128_ps(t[q], t[q + 4], 0x31));
            }
        }
        for (std::size_t j = cols8; j < cols; ++j) {
            for (std::size_t q = 0; q < 8; ++q) dst[at(j, ldd, i + q)] = src[at(i + q, lds, j)];
        }
    }
    for (std::size_t i = rows8; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) dst[at(j, ldd, i)] = src[at(i, lds, j)];
    }
}

/// Packs B (element (k, m) at `b[k * rs + m * cs]`, K x M) into panels of 16
/// columns, each [K, 16] row-major, the last one zero-padded. With rs == 1
/// (B given as its row-major transpose, e.g. W^T or Va^T) each panel is a
/// transpose_block: element by element, the pack of Va^T for the per-split
/// scores was 3% of the time of 100k tokens, o = 1 (AVX2 EPYC). With cs ==
/// 1 (row-major B, e.g. every label's W per batch) a full panel's rows are
/// vector copies.
template <class T>
void gemm_pack_b(const T* b, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t K, std::size_t M, T* out)
{
    for (std::size_t j0 = 0; j0 < M; j0 += gemm_panel) {
        const std::size_t w = std::min(gemm_panel, M - j0);
        T* panel = out + j0 * K;
        if constexpr (std::is_same<T, float>::value) {
            if (rs == 1) {
                transpose_block(b + static_cast<std::ptrdiff_t>(j0) * cs, cs, w, K, panel,
                                static_cast<std::ptrdiff_t>(gemm_panel));
                for (std::size_t k = 0; w < gemm_panel && k < K; ++k) {
                    std::fill(panel + k * gemm_panel + w, panel + (k + 1) * gemm_panel, T(0));
                }
                continue;
            }
            if (cs == 1 && w == gemm_panel) {  // rows of 16 floats in a row: two vector copies each
                for (std::size_t k = 0; k < K; ++k) {
                    const float* src = b + static_cast<std::ptrdiff_t>(k) * rs + static_cast<std::ptrdiff_t>(j0);
                    _mm256_storeu_ps(panel + k * gemm_panel, _mm256_loadu_ps(src));
                    _mm256_storeu_ps(panel + k * gemm_panel + 8, _mm256_loadu_ps(src + 8));
                }
                continue;
            }
        }
        for (std::size_t k = 0; k < K; ++k) {
            T* dst = panel + k * gemm_panel;
            const T* src = b + static_cast<std::ptrdiff_t>(k) * rs + static_cast<std::ptrdiff_t>(j0) * cs;
            for (std::size_t j = 0; j < w; ++j) dst[j] = src[static_cast<std::ptrdiff_t>(j) * cs];
            for (std::size_t j = w; j < gemm_panel; ++j) dst[j] = T(0);
        }
    }
}

/// Rows k0, ..., k0 + n - 1 of a B of K rows and M columns packed as
/// gemm_pack_b packs it, from n rows that lie elsewhere: element (k0 + i, m)
/// at src[i * rs + m * cs] (a run of one split's rows, any strides), so the
/// splits of a batch are packed without being gathered first. Each row is
/// read once, front to back; with `ahead` > 0 (and unit column stride) row
/// i + ahead of the n is prefetched into L1 while row i is packed.
inline void gemm_pack_b_rows(const float* src, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t n, std::size_t M,
                             std::size_t K, std::size_t k0, float* out, std::size_t ahead = 0)
{
    const std::size_t full = M / gemm_panel * gemm_panel;
    for (std::size_t i = 0; i < n; ++i, src += rs) {
        float* dst = out + (k0 + i) * gemm_panel;
        if (ahead != 0 && cs == 1 && i + ahead < n) {
            const float* next = src + static_cast<std::ptrdiff_t>(ahead) * rs;
            for (std::size_t j = 0; j < M; j += 16) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T0);
        }
        if (cs == 1) {
            for (std::size_t j0 = 0; j0 < full; j0 += gemm_panel, dst += gemm_panel * K) {
                _mm256_storeu_ps(dst, _mm256_loadu_ps(src + j0));
                _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + j0 + 8));
            }
        } else {
            for (std::size_t j0 = 0; j0 < full; j0 += gemm_panel, dst += gemm_panel * K) {
                for (std::size_t j = 0; j < gemm_panel; ++j) {
                    dst[j] = src[static_cast<std::ptrdiff_t>(j0 + j) * cs];
                }
            }
        }
        if (full == M) continue;
        for (std::size_t j = full; j < M; ++j) dst[j - full] = src[static_cast<std::ptrdiff_t>(j) * cs];
        std::fill(dst + (M - full), dst + gemm_panel, 0.0f);
    }
}

/// What happens between the accumulators and the store: C = act(acc + bias
/// [+ C]); `accumulate` adds the destination's old value (a product split
/// over several calls, or a gradient summed into); `trans` stores element
/// (r, j) at c[j * ldc + r]; `col_stride` (when not 0) stores it at c[r * ldc
/// + j * col_stride].
struct gemm_epilogue {
    const float* bias = nullptr;
    bool relu = false;
    bool accumulate = false;
    bool trans = false;
    std::ptrdiff_t col_stride = 0;
    /// How far apart elements j and j + 1 of a row of the result are stored
    /// (ldc the destination's row stride), and rows r and r + 1.
    std::ptrdiff_t col_step(std::ptrdiff_t ldc) const noexcept
    {
        return trans ? ldc : col_stride != 0 ? col_stride : 1;
    }
    std::ptrdiff_t row_step(std::ptrdiff_t ldc) const noexcept { return trans ? 1 : ldc; }
};

// C[0..R, 0..cols) = epilogue(acc) for the accumulators of one block.
inline void gemm_store_block(int R, const __m256 (&acc)[6][2], const gemm_epilogue& ep, float* c, std::ptrdiff_t ldc,
                             std::size_t cols)
{
    // The scratch arrays are zeroed only on the paths that read them: zeroing
    // them for every block and row was 2-3% of the kernel's samples (perf,
    // 100k tokens, o = 1, AVX2 EPYC).
    alignas(32) float tail_bias[gemm_panel];
    const float* bb = ep.bias;
    if (bb != nullptr && cols < gemm_panel) {
        std::fill(std::copy(bb, bb + cols, tail_bias), tail_bias + gemm_panel, 0.0f);
        bb = tail_bias;
    }
    const __m256 bias0 = bb != nullptr ? _mm256_loadu_ps(bb) : _mm256_setzero_ps();
    const __m256 bias1 = bb != nullptr ? _mm256_loadu_ps(bb + 8) : _mm256_setzero_ps();
    const std::ptrdiff_t col_step = ep.col_step(ldc), row_step = ep.row_step(ldc);
    const bool vector_store = col_step == 1 && cols == gemm_panel;
    for (int r = 0; r < R; ++r) {
        __m256 y0 = _mm256_add_ps(acc[r][0], bias0);
        __m256 y1 = _mm256_add_ps(acc[r][1], bias1);
        float* row = c + r * row_step;
        if (ep.accumulate) {
            if (vector_store) {
                y0 = _mm256_add_ps(y0, _mm256_loadu_ps(row));
                y1 = _mm256_add_ps(y1, _mm256_loadu_ps(row + 8));
            } else {
                alignas(32) float tmp[gemm_panel] = {};
                for (std::size_t j = 0; j < cols; ++j) tmp[j] = row[static_cast<std::ptrdiff_t>(j) * col_step];
                y0 = _mm256_add_ps(y0, _mm256_load_ps(tmp));
                y1 = _mm256_add_ps(y1, _mm256_load_ps(tmp + 8));
            }
        }
        if (ep.relu) {  // maxps returns its second operand on NaN: keep NaN, as std::max(y, 0) and Eigen do
            y0 = _mm256_max_ps(_mm256_setzero_ps(), y0);
            y1 = _mm256_max_ps(_mm256_setzero_ps(), y1);
        }
        if (vector_store) {
            _mm256_storeu_ps(row, y0);
            _mm256_storeu_ps(row + 8, y1);
        } else {  // a partial panel, or a column of the destination: one scalar store per element
            alignas(32) float tmp[gemm_panel];
            _mm256_store_ps(tmp, y0);
            _mm256_store_ps(tmp + 8, y1);
            for (std::size_t j = 0; j < cols; ++j) row[static_cast<std::ptrdiff_t>(j) * col_step] = tmp[j];
        }
    }
}

// Two bodies: on AVX-512 targets (BIAFFINE_AVX2_KERNEL_ZMM) a row of the
// block is one 512-bit register, else two 256-bit ones. With
// BIAFFINE_AVX2_KERNEL_ZMM = 2 gemm_loops runs pairs of panels through
// gemm_block_rows2 and this body only where a panel has no partner.
#if BIAFFINE_AVX2_KERNEL_ZMM >= 2 && defined(__AVX512F__)
#define BIAFFINE_DETAIL_GEMM_KERNEL_ZMM 1
#define BIAFFINE_DETAIL_GEMM_KERNEL_PAIR 1
#define BIAFFINE_DETAIL_GEMM_KERNEL_NAME "6x32 FMA kernel (AVX-512 registers: two per row)"
#elif BIAFFINE_AVX2_KERNEL_ZMM && defined(__AVX512F__)
#define BIAFFINE_DETAIL_GEMM_KERNEL_ZMM 1
#define BIAFFINE_DETAIL_GEMM_KERNEL_PAIR 0
#define BIAFFINE_DETAIL_GEMM_KERNEL_NAME "6x16 FMA kernel (AVX-512 registers: one per row)"
#else
#define BIAFFINE_DETAIL_GEMM_KERNEL_PAIR 0
#define BIAFFINE_DETAIL_GEMM_KERNEL_ZMM 0
#define BIAFFINE_DETAIL_GEMM_KERNEL_NAME "AVX2/FMA 6x16 kernel"
#endif
#if BIAFFINE_DETAIL_GEMM_KERNEL_ZMM
// The transposed store of up to 8 rows of a block (element (r, j) at
// c[j * ldc + r]: the per-split scores): the rows transposed in registers,
// then each column's R floats in one masked store, where one scalar store
// per element had cost the scores about a sixth of their speed (n = 32 at
// 50 labels: 203-210 GFLOP/s transposed against 246-251 stored plainly,
// Zen 5). Masked forms of the shuffles throughout: the unmasked ones pass
// g++ 12 an undefined operand (its bug 105593).
template <int R>
inline void store_zmm_columns(const __m512 (&y)[8], float* c, std::ptrdiff_t ldc, std::size_t cols)
{
    static_assert(R >= 1 && R <= 8, "one to eight rows");
    constexpr __mmask16 all = 0xffff;
    const auto lo = [&](const __m512& a, const __m512& b) { return _mm512_mask_unpacklo_ps(a, all, a, b); };
    const auto hi = [&](const __m512& a, const __m512& b) { return _mm512_mask_unpackhi_ps(a, all, a, b); };
    const __m512 t0 = lo(y[0], y[1]), t1 = hi(y[0], y[1]), t2 = lo(y[2], y[3]), t3 = hi(y[2], y[3]);
    const __m512 t4 = lo(y[4], y[5]), t5 = hi(y[4], y[5]), t6 = lo(y[6], y[7]), t7 = hi(y[6], y[7]);
    // u[q], q < 4: in 128-bit lane L, column 4 L + q of rows 0-3; u[q + 4]
    // the same of rows 4-7.
    const __m512 u[8] = {
        _mm512_mask_shuffle_ps(t0, all, t0, t2, 0x44), _mm512_mask_shuffle_ps(t0, all, t0, t2, 0xee),
        _mm512_mask_shuffle_ps(t1, all, t1, t3, 0x44), _mm512_mask_shuffle_ps(t1, all, t1, t3, 0xee),
        _mm512_mask_shuffle_ps(t4, all, t4, t6, 0x44), _mm512_mask_shuffle_ps(t4, all, t4, t6, 0xee),
        _mm512_mask_shuffle_ps(t5, all, t5, t7, 0x44), _mm512_mask_shuffle_ps(t5, all, t5, t7, 0xee)};
    constexpr auto rows = static_cast<__mmask16>((1u << R) - 1u);
    const auto put = [&](std::size_t j, const __m512& v) {
        if (j < cols) _mm512_mask_storeu_ps(c + static_cast<std::ptrdiff_t>(j) * ldc, rows, v);
    };
    for (std::size_t q = 0; q < 4; ++q) {
        // Lanes 0-1 of u[q] and u[q + 4], then 2-3, interleaved: columns q
        // and 4 + q in one register, 8 + q and 12 + q in the other.
        const __m512 a = _mm512_mask_shuffle_f32x4(u[q], all, u[q], u[q + 4], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 b = _mm512_mask_shuffle_f32x4(u[q], all, u[q], u[q + 4], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 ab = _mm512_mask_shuffle_f32x4(a, all, a, a, _MM_SHUFFLE(3, 1, 2, 0));
        const __m512 bb = _mm512_mask_shuffle_f32x4(b, all, b, b, _MM_SHUFFLE(3, 1, 2, 0));
        put(q, ab);
        put(4 + q, _mm512_mask_shuffle_f32x4(ab, all, ab, ab, _MM_SHUFFLE(3, 2, 3, 2)));
        put(8 + q, bb);
        put(12 + q, _mm512_mask_shuffle_f32x4(bb, all, bb, bb, _MM_SHUFFLE(3, 2, 3, 2)));
    }
}

// gemm_store_block for rows of one 512-bit register each, in 512-bit
// registers: a partial panel's bias, destination and store through a lane
// mask. (Before, the rows went through a stack array into the 256-bit
// epilogue: g++ 12's 256-bit extract intrinsics trip its bug 105593, an
// undefined merge operand, under -Werror; so do _mm512_max_ps and the other
// unmasked forms that pass one, hence the masked max below.)
template <int R>
[[gnu::always_inline]] inline void store_zmm_rows(const __m512* rows, const gemm_epilogue& ep, float* c,
                                                  std::ptrdiff_t ldc, std::size_t cols)
{
    const auto lanes = static_cast<__mmask16>(cols >= gemm_panel ? 0xffffu : (1u << cols) - 1u);
    const __m512 zero = _mm512_setzero_ps();
    const __m512 bias = ep.bias != nullptr ? _mm512_maskz_loadu_ps(lanes, ep.bias) : zero;
    const std::ptrdiff_t col_step = ep.col_step(ldc), row_step = ep.row_step(ldc);
    if (col_step == 1) {
        // Rows of C, unrolled over the block's height so that its rows stay
        // in registers: the loop over a run-time count kept them on the
        // stack, and U W' (K = 129) ran 6-7% slower (AMD EPYC Zen 5).
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
            __m512 y = _mm512_add_ps(rows[r], bias);
            float* row = c + r * row_step;
            if (ep.accumulate) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(lanes, row));
            // maxps returns its second operand on NaN: keep NaN, as std::max(y, 0) and Eigen do
            if (ep.relu) y = _mm512_mask_max_ps(y, 0xffff, zero, y);
            _mm512_mask_storeu_ps(row, lanes, y);
        }
        return;
    }
    if (ep.trans && !ep.accumulate) {  // eight rows at a time through store_zmm_columns
        constexpr int R8 = R < 8 ? R : 8;
        __m512 y[8];
        for (int r = 0; r < 8; ++r) y[r] = zero;
#pragma GCC unroll 8
        for (int r = 0; r < R8; ++r) {
            y[r] = _mm512_add_ps(rows[r], bias);
            if (ep.relu) y[r] = _mm512_mask_max_ps(y[r], 0xffff, zero, y[r]);
        }
        store_zmm_columns<R8>(y, c, ldc, cols);
        if constexpr (R > 8) store_zmm_rows<R - 8>(rows + 8, ep, c + 8 * row_step, ldc, cols);
        return;
    }
    for (int r = 0; r < R; ++r) {  // a column of C, or strided: element by element through `tmp`
        __m512 y = _mm512_add_ps(rows[r], bias);
        float* row = c + r * row_step;
        alignas(64) float tmp[gemm_panel];
        if (ep.accumulate) {
            for (std::size_t j = 0; j < cols; ++j) tmp[j] = row[static_cast<std::ptrdiff_t>(j) * col_step];
            y = _mm512_add_ps(y, _mm512_maskz_load_ps(lanes, tmp));
        }
        if (ep.relu) y = _mm512_mask_max_ps(y, 0xffff, zero, y);
        _mm512_store_ps(tmp, y);
        for (std::size_t j = 0; j < cols; ++j) row[static_cast<std::ptrdiff_t>(j) * col_step] = tmp[j];
    }
}
#endif

// The FMA loop of a block of R rows with H (1 or 2) registers per row:
// acc[r][0] += a[r][k] * p0[k] and, with H = 2, acc[r][1] += a[r][k] *
// p1[k], over k < K (panel rows ldp apart). Ops gives the register type and
// its load, broadcast and FMA: the 256-bit body (p1 = p0 + 8, one panel),
// the 512-bit one (H = 1) and the 512-bit pair (two panels) share it. Named
// accumulators, so the compiler keeps them in registers.
struct ymm_ops {
    using vec = __m256;
    static vec zero() { return _mm256_setzero_ps(); }
    static vec load(const float* p) { return _mm256_loadu_ps(p); }
    static vec broadcast(const float* x) { return _mm256_broadcast_ss(x); }
    static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
};
#if BIAFFINE_DETAIL_GEMM_KERNEL_ZMM
struct zmm_ops {
    using vec = __m512;
    static vec zero() { return _mm512_setzero_ps(); }
    static vec load(const float* p) { return _mm512_loadu_ps(p); }
    static vec broadcast(const float* x) { return _mm512_set1_ps(*x); }
    static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
};
#endif
// step(k) for k < K, unrolled by four. With Prefetch, a[R .. 2R) must be
// valid rows of K floats too (the next block's): one cache line of each is
// prefetched every 16 steps of k.
template <int R, bool Prefetch, class Step>
[[gnu::always_inline]] inline void k_steps(const float* const* a, std::size_t K, Step&& step)
{
    std::size_t k = 0;
    if constexpr (Prefetch) {
        for (; k + 16 <= K; k += 16) {
            for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(a[R + r] + k), _MM_HINT_T0);
#pragma GCC unroll 4
            for (std::size_t kk = k; kk < k + 16; ++kk) step(kk);
        }
    }
#pragma GCC unroll 4
    for (; k < K; ++k) step(k);
}

template <int R, class Ops, int H = 2, bool Prefetch = false>
[[gnu::always_inline]] inline void fma_rows(const float* const* a, const float* p0, const float* p1,
                                            std::ptrdiff_t ldp, std::size_t K, typename Ops::vec (&acc)[6][2])
{
    static_assert(R >= 1 && R <= 6, "one to six rows");
    static_assert(H == 1 || H == 2, "one or two registers per row");
    using V = typename Ops::vec;
    const float* a0 = a[0];
    const float* a1 = a[R > 1 ? 1 : 0];
    const float* a2 = a[R > 2 ? 2 : 0];
    const float* a3 = a[R > 3 ? 3 : 0];
    const float* a4 = a[R > 4 ? 4 : 0];
    const float* a5 = a[R > 5 ? 5 : 0];
    V c00 = Ops::zero(), c01 = Ops::zero(), c10 = Ops::zero(), c11 = Ops::zero();
    V c20 = Ops::zero(), c21 = Ops::zero(), c30 = Ops::zero(), c31 = Ops::zero();
    V c40 = Ops::zero(), c41 = Ops::zero(), c50 = Ops::zero(), c51 = Ops::zero();
    const auto step = [&](std::size_t k) {
        const V b0 = Ops::load(p0);
        const V b1 = H == 2 ? Ops::load(p1) : b0;
        p0 += ldp;
        p1 += ldp;
        // Row r: its element of A broadcast, times each register of P's row.
        const auto row = [&](const float* ar, V& lo, V& hi) {
            const V x = Ops::broadcast(ar + k);
            lo = Ops::fma(x, b0, lo);
            if constexpr (H == 2) hi = Ops::fma(x, b1, hi);
        };
        row(a0, c00, c01);
        if constexpr (R > 1) row(a1, c10, c11);
        if constexpr (R > 2) row(a2, c20, c21);
        if constexpr (R > 3) row(a3, c30, c31);
        if constexpr (R > 4) row(a4, c40, c41);
        if constexpr (R > 5) row(a5, c50, c51);
    };
    k_steps<R, Prefetch>(a, K, step);
    acc[0][0] = c00, acc[0][1] = c01, acc[1][0] = c10, acc[1][1] = c11, acc[2][0] = c20, acc[2][1] = c21;
    acc[3][0] = c30, acc[3][1] = c31, acc[4][0] = c40, acc[4][1] = c41, acc[5][0] = c50, acc[5][1] = c51;
}

// C[0..R, 0..cols) = epilogue(A[0..R, :] . P) for one panel P [K, 16] (rows
// ldp apart), row r of A at a[r] (strided or anywhere). R is a template
// argument so that a block of fewer than six rows (the last of a product)
// runs only its own FMAs: with groups of about 18 rows in U W' (50 labels)
// a block of six computed for one or two rows was a tenth of the work.
// Not inlined, because inlined into the loops around it the accumulators
// spilled to the stack (twice the time, AVX2 EPYC, g++ 12).
template <int R, bool Prefetch>
[[gnu::noinline]] void gemm_block_rows(const float* const* a, std::size_t blocks, const float* p, std::ptrdiff_t ldp,
                                       std::size_t K, const gemm_epilogue& ep, float* c, std::ptrdiff_t ldc,
                                       std::size_t cols)
{
    const std::ptrdiff_t row_step = ep.row_step(ldc);
    for (std::size_t b = 0; b < blocks; ++b, a += R, c += R * row_step) {
#if BIAFFINE_DETAIL_GEMM_KERNEL_ZMM
        __m512 acc[6][2];
        fma_rows<R, zmm_ops, 1, Prefetch>(a, p, p, ldp, K, acc);
        const __m512 rows[6] = {acc[0][0], acc[1][0], acc[2][0], acc[3][0], acc[4][0], acc[5][0]};
        store_zmm_rows<R>(rows, ep, c, ldc, cols);
#else
        __m256 acc[6][2];
        fma_rows<R, ymm_ops, 2, Prefetch>(a, p, p + 8, ldp, K, acc);
        gemm_store_block(R, acc, ep, c, ldc, cols);
#endif
    }
}

#if BIAFFINE_DETAIL_GEMM_KERNEL_PAIR
// The FMA loop of a panel without a partner (the last of an odd count) over
// R <= 12 rows, one register per row: twelve independent FMA chains, as in
// the pair's 6 x 32 block, where six rows gave six. Ops is zmm_ops, or
// ymm_ops where the panel has at most 8 columns in use (its first half,
// the same chains at half the width).
template <int R, class Ops, bool Prefetch>
[[gnu::always_inline]] inline void fma_rows_tall(const float* const* a, const float* p, std::ptrdiff_t ldp,
                                                 std::size_t K, typename Ops::vec (&acc)[12])
{
    static_assert(R >= 1 && R <= 12, "one to twelve rows");
    using V = typename Ops::vec;
    const float* ar[12];  // indexed by constants only, so kept in registers
    for (int r = 0; r < 12; ++r) ar[r] = a[r < R ? r : 0];
    V c0 = Ops::zero(), c1 = Ops::zero(), c2 = Ops::zero(), c3 = Ops::zero(), c4 = Ops::zero(), c5 = Ops::zero();
    V c6 = Ops::zero(), c7 = Ops::zero(), c8 = Ops::zero(), c9 = Ops::zero(), c10 = Ops::zero(), c11 = Ops::zero();
    const auto step = [&](std::size_t k) {
        const V b = Ops::load(p);
        p += ldp;
        const auto row = [&](int r, V& c) {
            if (r < R) c = Ops::fma(Ops::broadcast(ar[r] + k), b, c);
        };
        row(0, c0), row(1, c1), row(2, c2), row(3, c3), row(4, c4), row(5, c5);
        row(6, c6), row(7, c7), row(8, c8), row(9, c9), row(10, c10), row(11, c11);
    };
    k_steps<R, Prefetch>(a, K, step);
    acc[0] = c0, acc[1] = c1, acc[2] = c2, acc[3] = c3, acc[4] = c4, acc[5] = c5;
    acc[6] = c6, acc[7] = c7, acc[8] = c8, acc[9] = c9, acc[10] = c10, acc[11] = c11;
}

// gemm_block_rows for an unpaired panel (cols <= 16) in blocks of R <= 12
// rows (fma_rows_tall); Half: at most 8 columns, in 256-bit registers.
template <int R, bool Half, bool Prefetch>
[[gnu::noinline]] void gemm_block_rows_tall(const float* const* a, std::size_t blocks, const float* p,
                                            std::ptrdiff_t ldp, std::size_t K, const gemm_epilogue& ep, float* c,
                                            std::ptrdiff_t ldc, std::size_t cols)
{
    const std::ptrdiff_t row_step = ep.row_step(ldc);
    for (std::size_t b = 0; b < blocks; ++b, a += R, c += R * row_step) {
        __m512 rows[12];
        if constexpr (Half) {
            __m256 acc[12];
            fma_rows_tall<R, ymm_ops, Prefetch>(a, p, ldp, K, acc);
            // Widened with a zero-masked insert: _mm512_zextps256_ps512 goes
            // through an undefined operand in g++ 12 (its bug 105593).
            const __m512d zero = _mm512_setzero_pd();
            for (int r = 0; r < 12; ++r) {
                rows[r] = _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xff, zero, _mm256_castps_pd(acc[r]), 0));
            }
        } else {
            fma_rows_tall<R, zmm_ops, Prefetch>(a, p, ldp, K, rows);
        }
        store_zmm_rows<R>(rows, ep, c, ldc, cols);
    }
}

// gemm_block_rows over two panels at once (p0, p1, both rows ldp apart):
// a 6 x 32 block, two 512-bit accumulators per row. One panel gives six
// independent FMA chains, fewer than a CPU with two 512-bit FMA units and
// a latency of four needs in flight (eight): on an AVX-512 Xeon the 6 x 16
// block ran the projection at 63-74 GFLOP/s against Eigen's 97-110, this
// one at 105-106. cols in (16, 32].
template <int R, bool Prefetch>
[[gnu::noinline]] void gemm_block_rows2(const float* const* a, std::size_t blocks, const float* p0, const float* p1,
                                        std::ptrdiff_t ldp, std::size_t K, const gemm_epilogue& ep, float* c,
                                        std::ptrdiff_t ldc, std::size_t cols)
{
    gemm_epilogue e = ep;
    if (e.bias != nullptr) e.bias += gemm_panel;
    const std::ptrdiff_t col_step = ep.col_step(ldc), row_step = ep.row_step(ldc);
    for (std::size_t b = 0; b < blocks; ++b, a += R, c += R * row_step) {
        __m512 acc[6][2];
        fma_rows<R, zmm_ops, 2, Prefetch>(a, p0, p1, ldp, K, acc);
        const __m512 first[6] = {acc[0][0], acc[1][0], acc[2][0], acc[3][0], acc[4][0], acc[5][0]};
        const __m512 second[6] = {acc[0][1], acc[1][1], acc[2][1], acc[3][1], acc[4][1], acc[5][1]};
        store_zmm_rows<R>(first, ep, c, ldc, gemm_panel);
        store_zmm_rows<R>(second, e, c + static_cast<std::ptrdiff_t>(gemm_panel) * col_step, ldc, cols - gemm_panel);
    }
}
#endif

// f(std::integral_constant<int, R>) for R = rows (1..6, or 1..12 where an
// unpaired panel takes blocks of up to 12 rows): the block kernels take
// their height as a template argument.
template <class F>
void with_block_rows(int rows, F&& f)
{
    switch (rows) {
#if BIAFFINE_DETAIL_GEMM_KERNEL_PAIR
    case 12: f(std::integral_constant<int, 12>()); break;
    case 11: f(std::integral_constant<int, 11>()); break;
    case 10: f(std::integral_constant<int, 10>()); break;
    case 9: f(std::integral_constant<int, 9>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    case 7: f(std::integral_constant<int, 7>()); break;
#endif
    case 6: f(std::integral_constant<int, 6>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    default: f(std::integral_constant<int, 1>()); break;
    }
}

// The loops of the entry points: row r of A at `arow(r)`, panel j starts at
// `panel(j0)` with rows `ldp(j0)` apart. Rows go in blocks that keep their
// part of A in L2 while every panel of B (L1-sized for K <= 512) passes over
// them.
template <class Row, class Panel, class Stride>
void gemm_loops(Row&& arow, std::size_t N, std::size_t K, std::size_t M, Panel&& panel, Stride&& ldp,
                gemm_epilogue ep, float* c, std::ptrdiff_t ldc)
{
    const float* bias = ep.bias;
    constexpr std::size_t row_block = BIAFFINE_AVX2_ROW_BLOCK;
    constexpr std::size_t max_block_rows = BIAFFINE_DETAIL_GEMM_KERNEL_PAIR ? 12 : 6;
    for (std::size_t r0 = 0; r0 < N; r0 += row_block) {
        const std::size_t rn = std::min(row_block, N - r0);
        // The block's row pointers, once for all its panels, and a block more:
        // the next rows (the last row again past N), which the first panel
        // prefetches a block ahead of their turn. (Prefetching the caller's
        // next rows across calls as well, a row block of the projections
        // ahead, gained nothing measurable.)
        const float* row_ptrs[row_block + max_block_rows];
        for (std::size_t q = 0; q < rn + max_block_rows; ++q) row_ptrs[q] = arow(std::min(r0 + q, N - 1));
        for (std::size_t j0 = 0; j0 < M;) {
            const float* p = panel(j0);
            const std::ptrdiff_t ld = ldp(j0);
            // With 512-bit rows two panels go together where a second one
            // follows with the same row stride (gemm_block_rows2).
            const bool pair = BIAFFINE_DETAIL_GEMM_KERNEL_PAIR && M - j0 > gemm_panel && ldp(j0 + gemm_panel) == ld;
            const std::size_t cols = std::min(pair ? 2 * gemm_panel : gemm_panel, M - j0);
            [[maybe_unused]] const float* p1 = pair ? panel(j0 + gemm_panel) : nullptr;
            ep.bias = bias != nullptr ? bias + j0 : nullptr;
            // Rows in as few blocks of at most six as will do, of even
            // heights (19 rows: 5, 5, 5, 4, not 6, 6, 6, 1): a block of R
            // rows has R independent FMA chains, and below four (the FMA
            // latency) it runs at R / 4 of the FMA rate. U W' over groups
            // of about 19 rows at 50 labels: 20k tokens took 0.564 / 0.589 /
            // 0.553 s against 0.586 / 0.626 / 0.577 (Zen 4, AVX-512 rows).
            // The blocks of one height go in one call, which loops over
            // them: a call per block was 7-10% of the samples of 20k tokens
            // at 50 labels (U W' calls it per 5 rows x 32 columns), and one
            // call per height took that case from 56-63% to 58-66% of the
            // roofline, 100k tokens at one label from 68-78% to 79-90% (six
            // and three alternated rounds, AVX-512 Xeon).
            // An unpaired panel (pair false) goes in blocks of up to 12 rows
            // (gemm_block_rows_tall).
            const std::size_t most = pair ? 6 : max_block_rows;
            const std::size_t blocks = (rn + most - 1) / most, low = rn / blocks, high_blocks = rn % blocks;
            const std::ptrdiff_t col = static_cast<std::ptrdiff_t>(j0);
            const std::ptrdiff_t col_step = ep.col_step(ldc), row_step = ep.row_step(ldc);
            for (std::size_t part = 0, r = 0; part < 2; ++part) {
                const std::size_t count = part == 0 ? high_blocks : blocks - high_blocks;
                if (count == 0) continue;
                const int R = static_cast<int>(low + (part == 0 ? 1 : 0));
                const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(r0 + r);
                float* cr = c + row * row_step + col * col_step;
                const float* const* rows = row_ptrs + r;
                with_block_rows(R, [&](auto rows_c) {
                    constexpr int Rc = decltype(rows_c)::value;
                    const auto run = [&](auto prefetch) {
                        constexpr bool Pf = decltype(prefetch)::value;
#if BIAFFINE_DETAIL_GEMM_KERNEL_PAIR
                        if (pair) {
                            // Paired panels take blocks of at most 6 rows (`most`).
                            if constexpr (Rc <= 6) {
                                gemm_block_rows2<Rc, Pf>(rows, count, p, p1, ld, K, ep, cr, ldc, cols);
                            } else {
                                assert(!"paired panels in blocks of more than 6 rows");
                            }
                        } else if (cols <= gemm_panel / 2) {
                            gemm_block_rows_tall<Rc, true, Pf>(rows, count, p, ld, K, ep, cr, ldc, cols);
                        } else {
                            gemm_block_rows_tall<Rc, false, Pf>(rows, count, p, ld, K, ep, cr, ldc, cols);
                        }
#else
                        gemm_block_rows<Rc, Pf>(rows, count, p, ld, K, ep, cr, ldc, cols);
#endif
                    };
                    // Only the first panel meets the rows cold.
                    if (BIAFFINE_AVX2_PREFETCH_A && j0 == 0) run(std::true_type());
                    else run(std::false_type());
                });
                r += count * static_cast<std::size_t>(R);
            }
            j0 += cols;
        }
    }
}

/// gemm_packed with row r of A at `arow(r)` (a callable returning `const
/// float*`): rows read where they are, without gathering them.
template <class Row>
void gemm_packed_rows(Row&& arow, std::size_t N, std::size_t K, const float* packed, std::size_t M,
                      const gemm_epilogue& ep, float* c, std::ptrdiff_t ldc)
{
    gemm_loops(
        arow, N, K, M, [&](std::size_t j0) { return packed + j0 * K; },
        [](std::size_t) { return static_cast<std::ptrdiff_t>(gemm_panel); }, ep, c, ldc);
}

/// C [N, M] (row stride ldc) = epilogue(A [N, K] (row stride lda) . B),
/// with B packed by gemm_pack_b: act(A B + bias [+ C]), act = relu or
/// identity, `bias` [M] or null (see gemm_epilogue).
inline void gemm_packed(const float* a, std::ptrdiff_t lda, std::size_t N, std::size_t K, const float* packed,
                        std::size_t M, const gemm_epilogue& ep, float* c, std::ptrdiff_t ldc)
{
    gemm_packed_rows([&](std::size_t r) { return a + static_cast<std::ptrdiff_t>(r) * lda; }, N, K, packed, M, ep, c,
                     ldc);
}

/// C = relu(A B + bias) (or without relu), B packed: the projections.
inline void gemm_bias_relu(const float* a, std::ptrdiff_t lda, std::size_t N, std::size_t K, const float* packed,
                           std::size_t M, const float* bias, bool relu, float* c, std::ptrdiff_t ldc)
{
    gemm_epilogue ep;
    ep.bias = bias;
    ep.relu = relu;
    gemm_packed(a, lda, N, K, packed, M, ep, c, ldc);
}

/// Like gemm_packed, with B row-major [K, M] (row stride ldb) read in place:
/// only its last M % 16 columns are packed, into `tail`
/// (gemm_packed_size(K, M % 16) floats), so nothing is copied for the full
/// panels.
inline void gemm_rowmajor_b(const float* a, std::ptrdiff_t lda, std::size_t N, std::size_t K, const float* b,
                            std::ptrdiff_t ldb, std::size_t M, float* tail, float* c, std::ptrdiff_t ldc,
                            const gemm_epilogue& ep = {})
{
    const std::size_t full = M / gemm_panel * gemm_panel;
    if (full < M) gemm_pack_b(b + full, ldb, 1, K, M - full, tail);
    gemm_loops(
        [&](std::size_t r) { return a + static_cast<std::ptrdiff_t>(r) * lda; }, N, K, M,
        [&](std::size_t j0) { return j0 < full ? b + j0 : tail; },
        [&](std::size_t j0) { return j0 < full ? ldb : static_cast<std::ptrdiff_t>(gemm_panel); }, ep, c, ldc);
}

/// S [M, N] (row stride lds) = (A [N, K] . B)^T with B packed by
/// gemm_pack_b: S[m, r] = sum_k A[r, k] B[k, m]. For the per-split scores
/// S = Va . Tr^T, computed as (Tr . Va^T)^T so that only Va^T (n columns) is
/// packed, never the n * o rows of Tr.
inline void gemm_store_transposed(const float* a, std::ptrdiff_t lda, std::size_t N, std::size_t K,
                                  const float* packed, std::size_t M, float* s, std::ptrdiff_t lds)
{
    gemm_epilogue ep;
    ep.trans = true;
    gemm_packed(a, lda, N, K, packed, M, ep, s, lds);
}

}  // namespace detail
BIAFFINE_NAMESPACE_END

#endif  // __AVX2__ && __FMA__
