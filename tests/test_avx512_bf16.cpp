// Tests of biaffine/detail/compute/avx512_bf16.hpp: pack_bf16_rows against
// biaffine::bfloat16's rounding (ties, NaN, infinities; denormals flushed
// to a signed zero; the pad of an odd depth zero; nothing written past the
// packed depth), bf16_dots against a double loop on bf16-rounded operands
// within the fp32 accumulation bound gamma_k sum |a_i b_i| at every block
// edge and depth around its packets of 16 pairs, and against the emulated
// path (bf16_emulated.hpp) within twice that bound. Needs a build for
// AVX512_BF16 and a CPU with it; elsewhere it reports itself skipped.
#include <biaffine/detail/compute/avx512_bf16.hpp>
#include <biaffine/detail/compute/bf16_emulated.hpp>

#include "bf16_helpers.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if BIAFFINE_DETAIL_ZMM_BF16

using namespace bf16_test;
using biaffine::bfloat16;

namespace {

// True (and says SKIPPED) where the CPU running the build has no AVX512_BF16.
bool skip_without_bf16()
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16")) return false;
    WARN("SKIPPED: this CPU has no AVX512_BF16");
    return true;
}

// A and B rows packed to bf16 with row stride `ldp` (even, >= the packed
// depth).
std::vector<bfloat16> packed(const std::vector<float>& rows, std::size_t n, std::size_t k, std::size_t lds,
                             std::size_t ldp)
{
    std::vector<bfloat16> out(n * ldp, bfloat16::from_bits(0xdead));
    biaffine::detail::pack_bf16_rows(rows.data(), static_cast<std::ptrdiff_t>(lds), static_cast<std::ptrdiff_t>(n),
                                     static_cast<std::ptrdiff_t>(k), out.data(), static_cast<std::ptrdiff_t>(ldp));
    return out;
}

}  // namespace

TEST_CASE("pack_bf16_rows rounds as bfloat16 does, flushes denormals, pads an odd depth with zero",
          "[avx512_bf16]")
{
    if (skip_without_bf16()) return;
    std::mt19937 gen(9);
    std::uniform_int_distribution<std::uint32_t> bits;
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::infinity(), 1.0f + std::ldexp(1.0f, -8),
                              1.0f + 3 * std::ldexp(1.0f, -8), std::numeric_limits<float>::max(), -0.0f,
                              std::numeric_limits<float>::denorm_min(), -1e-39f};
    for (std::size_t k : {1u, 2u, 31u, 32u, 33u, 63u, 129u, 130u}) {
        const std::size_t n = 5, lds = k + 7, ldp = biaffine::detail::bf16_packed_depth(static_cast<std::ptrdiff_t>(k)) + 4;
        std::vector<float> src(n * lds);
        for (float& x : src) {
            const std::uint32_t u = bits(gen);
            std::memcpy(&x, &u, sizeof x);
        }
        for (std::size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) src[(i * 37) % src.size()] = specials[i];
        const auto p = packed(src, n, k, lds, ldp);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
            INFO("k " << k << " row " << i);
            for (std::size_t q = 0; q < k; ++q) {
                const float f = src[i * lds + q];
                const std::uint16_t got = p[i * ldp + q].bits;
                if (std::isnan(f))
                    wrong += !(std::isnan(float(p[i * ldp + q])) && (got & 0x40) != 0);
                else if (std::fpclassify(f) == FP_SUBNORMAL)
                    wrong += got != (std::signbit(f) ? 0x8000 : 0x0000);
                else
                    wrong += got != bfloat16(f).bits;
            }
            if (k % 2 == 1) CHECK(p[i * ldp + k].bits == 0);
            for (std::size_t q = biaffine::detail::bf16_packed_depth(static_cast<std::ptrdiff_t>(k)); q < ldp; ++q)
                CHECK(p[i * ldp + q].bits == 0xdead);
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("bf16_dots equals a double loop on bf16-rounded operands within fp32 accumulation, and the emulated path",
          "[avx512_bf16]")
{
    if (skip_without_bf16()) return;
    std::mt19937 gen(13);
    const std::size_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 21, 47, 100};
    for (std::size_t k : {1u, 2u, 3u, 31u, 32u, 33u, 34u, 64u, 129u, 130u, 300u}) {
        const std::size_t kp = static_cast<std::size_t>(biaffine::detail::bf16_packed_depth(static_cast<std::ptrdiff_t>(k)));
        for (std::size_t n : sizes) {
            for (std::size_t m : sizes) {
                INFO("n " << n << " m " << m << " k " << k);
                const std::size_t lda = k + 3, ldb = k + 5, ldc = m + 2, lpa = kp + 2, lpb = kp;
                const auto a = random_rows(n, k, lda, gen), b = random_rows(m, k, ldb, gen);
                // Packed B's last row ends its buffer: no read past the packed depth.
                auto pa = packed(a, n, k, lda, lpa), pb = packed(b, m, k, ldb, lpb);
                pb.resize((m - 1) * lpb + kp);
                guarded_c c(n, m, ldc);
                biaffine::detail::bf16_dots(pa.data(), static_cast<std::ptrdiff_t>(lpa), static_cast<std::ptrdiff_t>(n),
                                            pb.data(), static_cast<std::ptrdiff_t>(lpb), static_cast<std::ptrdiff_t>(m),
                                            static_cast<std::ptrdiff_t>(k), c.data(), static_cast<std::ptrdiff_t>(ldc));
                check_dots(c, a.data(), lda, b.data(), ldb, k, 1.0);

                // The emulated path on the same operands: both within gamma_k
                // of the exact dot, so within 2 gamma_k of each other.
                auto ea = a, eb = b;
                biaffine::detail::round_rows_to_bfloat16(ea.data(), lda, n, k, ea.data(), lda);
                biaffine::detail::round_rows_to_bfloat16(eb.data(), ldb, m, k, eb.data(), ldb);
                guarded_c e(n, m, ldc);
                biaffine::detail::bf16_dots_emulated(ea.data(), lda, n, eb.data(), ldb, m, k, e.data(), ldc);
                std::size_t apart = 0;
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j) {
                        const double mag = bf16_dot(a.data() + i * lda, b.data() + j * ldb, k).magnitude;
                        apart += std::fabs(double(c.at(i, j)) - double(e.at(i, j))) > 2 * gamma_fp32(k) * mag;
                    }
                CHECK(apart == 0);
            }
        }
    }
}

#else

TEST_CASE("bf16_dots needs an AVX512_BF16 build", "[avx512_bf16]")
{
    WARN("SKIPPED: not built for AVX512_BF16 (__AVX512BF16__ undefined or BIAFFINE_AVX512_SMALL_PRODUCTS=0)");
    SUCCEED();
}

#endif
