// Tests of biaffine/detail/compute/bf16_emulated.hpp, on every machine: the
// rounding of rows (each element as biaffine::bfloat16 rounds it, strides
// kept, in place too) and the emulated bf16_dots against a double loop on
// bf16-rounded operands, within the fp32 accumulation bound gamma_k
// sum |a_i b_i| (bf16_helpers.hpp), at the block edges and depths of the
// per-split products.
#include <biaffine/detail/compute/bf16_emulated.hpp>

#include "bf16_helpers.hpp"

#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

using namespace bf16_test;

TEST_CASE("round_rows_to_bfloat16 rounds each element as bfloat16 does, in place too", "[bf16_emulated]")
{
    std::mt19937 gen(3);
    const std::size_t n = 7, k = 131, lds = 140, ldd = 133;
    const auto src = random_rows(n, k, lds, gen);
    std::vector<float> dst(n * ldd, sentinel);
    biaffine::detail::round_rows_to_bfloat16(src.data(), lds, n, k, dst.data(), ldd);
    std::size_t wrong = 0, touched = 0;
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t p = 0; p < ldd; ++p) {
            if (p < k) {
                const float want = float(biaffine::bfloat16(src[i * lds + p]));
                wrong += std::memcmp(&want, &dst[i * ldd + p], sizeof want) != 0;
            } else {
                touched += dst[i * ldd + p] != sentinel;
            }
        }
    CHECK(wrong == 0);
    CHECK(touched == 0);
    auto inplace = src;
    biaffine::detail::round_rows_to_bfloat16(inplace.data(), lds, n, k, inplace.data(), lds);
    for (std::size_t i = 0; i < n; ++i)
        CHECK(std::memcmp(&inplace[i * lds], &dst[i * ldd], k * sizeof(float)) == 0);
}

TEST_CASE("emulated bf16_dots equals a double loop on bf16-rounded operands within fp32 accumulation",
          "[bf16_emulated]")
{
    std::mt19937 gen(5);
    const std::size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 21, 47, 100};
    for (std::size_t k : {1u, 2u, 16u, 17u, 32u, 33u, 129u, 130u, 300u}) {
        for (std::size_t n : sizes) {
            for (std::size_t m : sizes) {
                INFO("n " << n << " m " << m << " k " << k);
                const std::size_t lda = k + 3, ldb = k + 5, ldc = m + 2;
                auto a = random_rows(n, k, lda, gen), b = random_rows(m, k, ldb, gen);
                const auto a0 = a, b0 = b;
                biaffine::detail::round_rows_to_bfloat16(a.data(), lda, n, k, a.data(), lda);
                biaffine::detail::round_rows_to_bfloat16(b.data(), ldb, m, k, b.data(), ldb);
                guarded_c c(n, m, ldc);
                biaffine::detail::bf16_dots_emulated(a.data(), lda, n, b.data(), ldb, m, k, c.data(), ldc);
                check_dots(c, a0.data(), lda, b0.data(), ldb, k, 1.0);
            }
        }
    }
}
