// biaffine/detail/compute/bf16_emulated.hpp - bf16 mode where the CPU (or the
// build's target) has no AVX512_BF16: the operands rounded to bf16 once per
// batch and kept as floats, every product then on the fp32 kernels.
//
// bf16 x bf16 products are exact in fp32, so fp32 arithmetic on rounded
// operands computes what VDPBF16PS computes up to the order (and rounding)
// of the fp32 accumulation: the results agree with the native path
// (avx512_bf16.hpp) within that bound, on every CPU, at fp32 speed (the
// operands take fp32 bytes; only outputs would be halved). Denormal
// operands are kept here where the native path flushes them.
#pragma once

#include "biaffine/abi.hpp"
#include "biaffine/bfloat16.hpp"
#include "biaffine/detail/compute/avx512_small.hpp"
#include "biaffine/detail/compute/row_dots.hpp"

#include <cstddef>

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// dst [n, k] (row stride ldd) = src [n, k] (row stride lds) rounded to the
/// nearest bf16 and kept as float; dst may equal src (in place).
inline void round_rows_to_bfloat16(const float* src, std::ptrdiff_t lds, std::ptrdiff_t n, std::ptrdiff_t k,
                                   float* dst, std::ptrdiff_t ldd) noexcept
{
    for (std::ptrdiff_t i = 0; i < n; ++i)
        for (std::ptrdiff_t p = 0; p < k; ++p) dst[i * ldd + p] = round_to_bfloat16(src[i * lds + p]);
}

/// `C [n, m] = A [n, k] . B [m, k]^T` on rows rounded by
/// round_rows_to_bfloat16: the fp32 small-product kernel of this build
/// (zmm_dots on AVX-512, row_dots elsewhere). The emulated bf16_dots.
inline void bf16_dots_emulated(const float* a, std::ptrdiff_t lda, std::ptrdiff_t n, const float* b,
                               std::ptrdiff_t ldb, std::ptrdiff_t m, std::ptrdiff_t k, float* c, std::ptrdiff_t ldc)
{
#if BIAFFINE_DETAIL_ZMM_SMALL
    zmm_dots(a, lda, n, b, ldb, m, k, c, ldc);
#else
    row_dots(a, lda, n, b, ldb, m, k, c, ldc);
#endif
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
