// biaffine/detail/compute/amx_bf16_gemm.hpp - the row-wise products of a bf16
// scorer on AMX tiles (Intel Sapphire Rapids and later: AMX-TILE, AMX-BF16):
// A in bf16 rows, B in bf16_gemm_pack_b's pair panels, fp32 accumulation in
// tiles, the same epilogue as bf16_gemm (bias, ReLU with NaN kept, fp32 or
// bf16 out) plus fp32 out rounded to bf16 values (rows that the fp32 kernels
// read next).
//
// Why a second kernel: on those CPUs VDPBF16PS runs at half the rate of
// fp32 FMA, so bf16_gemm is slower than the fp32 kernel (0.63-0.80x,
// bench_bf16), while one TDPBF16PS does 16 x 16 x 32 multiply-adds; oneDNN's
// AMX matmul measured 3.4x the fp32 kernel on the projections of 100k tokens
// (Xeon with AMX, one thread).
//
// Shapes: a block of 32 rows x 32 columns is four 16 x 16 fp32 tiles (C),
// fed by two A tiles (16 rows x 32 bf16) and two B tiles (16 pairs x 16
// columns: exactly half a pair panel, row stride 128 bytes), eight tiles in
// all. The depth goes in steps of 32 bf16, so A's rows and B's panels are
// padded with zeros to amx_depth(K). Rows past N of the last block are
// read (their results are never stored): A must be readable for
// amx_row_slack rows past its last.
//
// Linux hands a process the tiles' state only on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)); amx_usable() asks once and
// callers fall back to bf16_gemm when it says no. Declared where the
// compiler targets AMX-TILE and AMX-BF16 (BIAFFINE_DETAIL_AMX_BF16).
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/detail/compute/avx512_bf16_gemm.hpp"

#if BIAFFINE_DETAIL_BF16_GEMM && BIAFFINE_DETAIL_AMX_TARGET && defined(__linux__)
#define BIAFFINE_DETAIL_AMX_BF16 1

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// The depth of A's rows and B's panels for amx_gemm: K rounded up to 32.
constexpr std::size_t amx_depth(std::size_t k) noexcept { return (k + 31) / 32 * 32; }
/// Rows past the last that amx_gemm reads of A (never stores).
constexpr std::size_t amx_row_slack = 31;

/// Whether this process may use the AMX tiles: asks Linux once
/// (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); false under a kernel or
/// hypervisor that withholds them.
inline bool amx_usable() noexcept
{
    static const bool ok = [] {
        constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
        return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
    }();
    return ok;
}

namespace amx {

// The 64-byte operand of LDTILECFG (palette 1).
struct tile_config {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
};
static_assert(sizeof(tile_config) == 64, "LDTILECFG reads 64 bytes");

// One 32 x 32 block of results from the tiles' fp32 `buf` [32, 32] to the
// caller's rows (`rows` x `cols` of them): bias, ReLU, then fp32, fp32
// rounded to bf16, or bf16.
inline void store_block(const float* buf, std::size_t rows, std::size_t cols, const bf16_gemm_epilogue& ep,
                        bool round, float* c, std::ptrdiff_t ldc, bfloat16* c16, std::ptrdiff_t ldc16)
{
    const auto lanes = [&](std::size_t h) {
        const std::size_t left = cols > 16 * h ? cols - 16 * h : 0;
        return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
    };
    const __mmask16 m[2] = {lanes(0), lanes(1)};
    const __m512 zero = _mm512_setzero_ps();
    for (std::size_t r = 0; r < rows; ++r) {
        for (int h = 0; h < 2; ++h) {
            if (m[h] == 0) continue;
            __m512 y = _mm512_loadu_ps(buf + r * 32 + 16 * h);
            if (ep.bias != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m[h], ep.bias + 16 * h));
            if (ep.relu) y = _mm512_mask_max_ps(y, 0xffff, zero, y);  // NaN kept (see bf16_gemm)
            if (c16 != nullptr) {
                _mm256_mask_storeu_epi16(c16 + static_cast<std::ptrdiff_t>(r) * ldc16 + 16 * h, m[h],
                                         (__m256i)_mm512_cvtneps_pbh(y));
                continue;
            }
            float* out = c + static_cast<std::ptrdiff_t>(r) * ldc + 16 * h;
            if (ep.accumulate) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m[h], out));
            if (round || ep.round) y = zmm_bf16::bf16_values(y);
            _mm512_mask_storeu_ps(out, m[h], y);
        }
    }
}

}  // namespace amx

/// C [N, M] = epilogue(A [N, K] . B) on AMX tiles. A: bf16 rows of
/// amx_depth(K) elements (zeros past K), row stride lda, readable for
/// amx_row_slack rows past N. B: bf16_gemm_pack_b(..., amx_depth(K)). The
/// result goes to `c16` in bf16 when given, else to `c` in fp32 (rounded to
/// bf16 values when `round`). The caller has checked amx_usable().
inline void amx_gemm(const bfloat16* a, std::ptrdiff_t lda, std::size_t N, std::size_t K, const bfloat16* packed,
                     std::size_t M, const bf16_gemm_epilogue& ep, bool round, float* c, std::ptrdiff_t ldc,
                     bfloat16* c16 = nullptr, std::ptrdiff_t ldc16 = 0)
{
    if (N == 0 || M == 0) return;
    const std::size_t depth = amx_depth(K), chunks = depth / 32, pairs = depth / 2;
    amx::tile_config cfg;
    for (int t = 0; t < 8; ++t) {  // 0-3: C, 4-5: A, 6-7: B; each 16 rows of 64 bytes
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    alignas(64) float buf[32 * 32];
    const std::size_t a_stride = static_cast<std::size_t>(lda) * sizeof(bfloat16);
    constexpr std::size_t b_stride = 2 * bf16_gemm_panel * sizeof(bfloat16);  // one pair of a panel
    // Column blocks of panels (BIAFFINE_AMX_COLUMN_BLOCK_BYTES of B) outside, so that a block
    // stays in L2 while the rows pass over it; 32-row blocks, then each
    // panel of the column block: the rows' A tiles (32 x depth bf16, 16
    // KiB at depth 256) stay in L1 across the panels. Panels outside and
    // rows inside streamed A from memory once per panel (1.1x the fp32
    // kernel on 100k rows, against 3.3x for oneDNN's AMX matmul).
    const std::size_t panel_bytes = depth * bf16_gemm_panel * sizeof(bfloat16);
    const std::size_t col_block =
        std::max<std::size_t>(1, std::size_t(BIAFFINE_AMX_COLUMN_BLOCK_BYTES) / panel_bytes) * bf16_gemm_panel;
    for (std::size_t c0 = 0; c0 < M; c0 += col_block) {
        const std::size_t c1 = std::min(M, c0 + col_block);
        for (std::size_t r0 = 0; r0 < N; r0 += 32) {
            const bfloat16* a0 = a + static_cast<std::ptrdiff_t>(r0) * lda;
            const bfloat16* a1 = a0 + 16 * lda;
            const std::size_t rows = std::min<std::size_t>(32, N - r0);
            for (std::size_t j0 = c0; j0 < c1; j0 += bf16_gemm_panel) {
                const bfloat16* panel = packed + j0 * pairs * 2;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (std::size_t q = 0; q < chunks; ++q) {
                    const bfloat16* b0 = panel + q * 16 * 2 * bf16_gemm_panel;
                    _tile_loadd(4, a0 + 32 * q, a_stride);
                    _tile_loadd(5, a1 + 32 * q, a_stride);
                    _tile_loadd(6, b0, b_stride);
                    _tile_loadd(7, b0 + 32, b_stride);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, buf, 128);
                _tile_stored(1, buf + 16, 128);
                _tile_stored(2, buf + 16 * 32, 128);
                _tile_stored(3, buf + 16 * 32 + 16, 128);
                bf16_gemm_epilogue e = ep;
                if (ep.bias != nullptr) e.bias = ep.bias + j0;
                const auto row = static_cast<std::ptrdiff_t>(r0);
                const auto col = static_cast<std::ptrdiff_t>(j0);
                amx::store_block(buf, rows, std::min(bf16_gemm_panel, M - j0), e, round,
                                 c != nullptr ? c + row * ldc + col : nullptr, ldc,
                                 c16 != nullptr ? c16 + row * ldc16 + col : nullptr, ldc16);
            }
        }
    }
    _tile_release();
}

}  // namespace detail
BIAFFINE_NAMESPACE_END

#else
#define BIAFFINE_DETAIL_AMX_BF16 0
#endif
