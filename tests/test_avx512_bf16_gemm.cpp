// Tests of biaffine/detail/compute/avx512_bf16_gemm.hpp: bf16_gemm against
// a double loop on bf16-rounded operands, + bias, ReLU, within the fp32
// accumulation bound gamma_{k+1} (sum |a_i b_i| + |bias|), at every block
// height (1-6 rows, the row-block edge) and panel edge (M around 32), odd
// and even depths; the bf16 output within that bound plus bf16's rounding
// of the result (half an ulp: 2^-9 relative); NaN kept by ReLU; nothing
// written past M or between rows. Needs a build for AVX512_BF16 and a CPU
// with it; elsewhere it reports itself skipped.
#include <biaffine/detail/compute/avx512_bf16_gemm.hpp>

#include "bf16_helpers.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#if BIAFFINE_DETAIL_BF16_GEMM

using namespace bf16_test;
using biaffine::bfloat16;
namespace bd = biaffine::detail;

namespace {

bool skip_without_bf16()
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16")) return false;
    WARN("SKIPPED: this CPU has no AVX512_BF16");
    return true;
}

struct gemm_case {
    std::size_t n, k, m;
    bool bias, relu;
};

// Runs bf16_gemm on random A [n, k] (row stride k + 3), B [k, m] (row-major,
// row stride m + 1), bias [m]; checks fp32 and bf16 outputs against the
// double reference on bf16-rounded operands.
void check_gemm(const gemm_case& t, std::mt19937& gen)
{
    INFO("n " << t.n << " k " << t.k << " m " << t.m << " bias " << t.bias << " relu " << t.relu);
    const std::size_t lda = t.k + 3, ldb = t.m + 1, kp = static_cast<std::size_t>(bd::bf16_packed_depth(static_cast<std::ptrdiff_t>(t.k)));
    const std::size_t ldp = kp + 4, ldc = t.m + 3;
    const auto a = random_rows(t.n, t.k, lda, gen);
    const auto b = random_rows(t.k, t.m, ldb, gen);
    const auto bias = random_rows(1, t.m, t.m, gen);
    std::vector<bfloat16> pa(t.n * ldp, bfloat16::from_bits(0x7fc1));  // NaN where nothing may be read
    bd::pack_bf16_rows(a.data(), static_cast<std::ptrdiff_t>(lda), static_cast<std::ptrdiff_t>(t.n),
                       static_cast<std::ptrdiff_t>(t.k), pa.data(), static_cast<std::ptrdiff_t>(ldp));
    std::vector<bfloat16> pb(bd::bf16_gemm_packed_size(t.k, t.m));
    bd::bf16_gemm_pack_b(b.data(), static_cast<std::ptrdiff_t>(ldb), 1, t.k, t.m, pb.data());
    bd::bf16_gemm_epilogue ep;
    ep.bias = t.bias ? bias.data() : nullptr;
    ep.relu = t.relu;
    guarded_c c(t.n, t.m, ldc);
    bd::bf16_gemm(pa.data(), static_cast<std::ptrdiff_t>(ldp), t.n, t.k, pb.data(), t.m, ep, c.data(),
                  static_cast<std::ptrdiff_t>(ldc));
    // The bf16 output, inside sentinel bits.
    const bfloat16 guard = bfloat16::from_bits(0x1234);
    std::vector<bfloat16> c16(t.n * ldc, guard);
    bd::bf16_gemm(pa.data(), static_cast<std::ptrdiff_t>(ldp), t.n, t.k, pb.data(), t.m, ep, nullptr, 0, c16.data(),
                  static_cast<std::ptrdiff_t>(ldc));
    std::size_t bad = 0, bad16 = 0, outside16 = 0;
    for (std::size_t i = 0; i < t.n; ++i) {
        for (std::size_t j = 0; j < ldc; ++j) {
            if (j >= t.m) {
                outside16 += c16[i * ldc + j].bits != guard.bits;
                continue;
            }
            double want = 0.0, mag = 0.0;
            for (std::size_t p = 0; p < t.k; ++p) {
                const double x = double(biaffine::round_to_bfloat16(a[i * lda + p])) *
                                 double(biaffine::round_to_bfloat16(b[p * ldb + j]));
                want += x;
                mag += std::fabs(x);
            }
            if (t.bias) {
                want += bias[j];
                mag += std::fabs(bias[j]);
            }
            if (t.relu) want = std::max(want, 0.0);
            const double bound = gamma_fp32(t.k + 1) * mag;
            bad += std::fabs(double(c.at(i, j)) - want) > bound;
            const double got16 = double(float(c16[i * ldc + j]));
            bad16 += std::fabs(got16 - want) > bound + std::ldexp(std::fabs(want) + bound, -8);
        }
    }
    CHECK(bad == 0);
    CHECK(bad16 == 0);
    CHECK(outside16 == 0);
    CHECK(c.touched_outside() == 0);
}

}  // namespace

TEST_CASE("bf16_gemm equals a double loop on bf16-rounded operands within fp32 accumulation, fp32 and bf16 out",
          "[avx512_bf16]")
{
    if (skip_without_bf16()) return;
    std::mt19937 gen(29);
    for (std::size_t k : {1u, 2u, 3u, 33u, 129u, 256u}) {
        for (std::size_t m : {1u, 5u, 16u, 17u, 31u, 32u, 33u, 64u, 129u}) {
            for (std::size_t n : {1u, 2u, 5u, 6u, 7u, 13u, 19u, 96u, 97u, 200u}) {
                check_gemm({n, k, m, (n + m) % 2 == 0, (n + k) % 3 != 0}, gen);
            }
        }
    }
    // The scorer's shapes: projections (K = 256, M = 128) and U W' at 3
    // labels (K = 129, M = 3 * 129).
    check_gemm({300, 256, 128, true, true}, gen);
    check_gemm({61, 129, 3 * 129, false, false}, gen);
}

TEST_CASE("bf16_gemm's ReLU keeps NaN, as the fp32 kernels do", "[avx512_bf16]")
{
    if (skip_without_bf16()) return;
    const std::size_t n = 3, k = 4, m = 2;
    std::vector<float> a(n * k, 1.0f), b(k * m, -1.0f), bias(m, 0.0f);
    a[1 * k + 2] = std::numeric_limits<float>::quiet_NaN();  // row 1 NaN, rows 0 and 2 negative
    std::vector<bfloat16> pa(n * k), pb(bd::bf16_gemm_packed_size(k, m));
    bd::pack_bf16_rows(a.data(), k, n, k, pa.data(), k);
    bd::bf16_gemm_pack_b(b.data(), m, 1, k, m, pb.data());
    bd::bf16_gemm_epilogue ep;
    ep.bias = bias.data();
    ep.relu = true;
    std::vector<float> c(n * m, 7.0f);
    bd::bf16_gemm(pa.data(), k, n, k, pb.data(), m, ep, c.data(), m);
    CHECK(c[0] == 0.0f);
    CHECK(std::isnan(c[2]));
    CHECK(std::isnan(c[3]));
    CHECK(c[4] == 0.0f);
}

#else

TEST_CASE("bf16_gemm needs an AVX512_BF16 build", "[avx512_bf16]")
{
    WARN("SKIPPED: not built for AVX512_BF16 (__AVX512BF16__ undefined or BIAFFINE_AVX512_SMALL_PRODUCTS=0)");
    SUCCEED();
}

#endif
