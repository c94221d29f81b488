// Tests of biaffine/convert.hpp: one split's scores and labels at heads
// copied into another scalar type through strided views, each cell checked
// against the scalar conversion of that cell alone (bfloat16's rounding has
// its own tests, test_bfloat16.cpp); cells between the destination's rows
// left alone; shapes that differ refused.
#include <biaffine/convert.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using biaffine::bfloat16;

// Values over a wide range (rounding matters at every magnitude), seeded.
std::vector<float> convert_test_values(std::size_t count, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-20, 20);
    std::vector<float> v(count);
    for (float& x : v) x = std::ldexp(mant(rng), expo(rng));
    return v;
}

}  // namespace

TEST_CASE("convert_output: scores [n, n, o] into bfloat16 through row strides", "[convert]")
{
    const std::size_t n = 5, o = 3, src_ld = n * o + 2, dst_ld = n * o + 4;
    const std::vector<float> src = convert_test_values(n * src_ld, 7);
    const std::uint16_t fill = 0xabcd;
    std::vector<bfloat16> dst(n * dst_ld, bfloat16::from_bits(fill));
    biaffine::convert_output(biaffine::score_view<bfloat16>{dst.data(), n, o, static_cast<std::ptrdiff_t>(dst_ld)},
                             biaffine::score_view<const float>{src.data(), n, o, static_cast<std::ptrdiff_t>(src_ld)});
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t c = 0; c < dst_ld; ++c) {
            const std::uint16_t got = dst[m * dst_ld + c].bits;
            if (c < n * o) {
                CHECK(got == bfloat16(src[m * src_ld + c]).bits);
            } else {
                CHECK(got == fill);  // between rows: not written
            }
        }
    }
}

TEST_CASE("convert_output: labels at heads [n, o], row- and column-major, float and double", "[convert]")
{
    const std::size_t n = 4, o = 6;
    const std::vector<float> src = convert_test_values(n * o, 11);
    // Source row-major, destination column-major: the strided path.
    std::vector<double> dst(n * o, -1.0);
    biaffine::convert_output(
        biaffine::seq_view<double>{dst.data(), n, o, 1, static_cast<std::ptrdiff_t>(n)},
        biaffine::seq_view<const float>{src.data(), n, o, static_cast<std::ptrdiff_t>(o), 1});
    for (std::size_t m = 0; m < n; ++m)
        for (std::size_t c = 0; c < o; ++c) CHECK(dst[c * n + m] == static_cast<double>(src[m * o + c]));
    // bfloat16 and back: the way back is exact.
    std::vector<bfloat16> half(n * o);
    std::vector<float> back(n * o);
    const auto ld = static_cast<std::ptrdiff_t>(o);
    biaffine::convert_output(biaffine::seq_view<bfloat16>{half.data(), n, o, ld, 1},
                             biaffine::seq_view<const float>{src.data(), n, o, ld, 1});
    biaffine::convert_output(biaffine::seq_view<float>{back.data(), n, o, ld, 1},
                             biaffine::seq_view<const bfloat16>{half.data(), n, o, ld, 1});
    for (std::size_t i = 0; i < n * o; ++i) {
        CHECK(half[i].bits == bfloat16(src[i]).bits);
        CHECK(back[i] == static_cast<float>(half[i]));
    }
}

TEST_CASE("convert_output: views of different shapes or without data are refused", "[convert]")
{
    std::vector<float> src(2 * 2 * 3, 1.0f);
    std::vector<bfloat16> dst(3 * 3 * 3);
    CHECK_THROWS_AS(biaffine::convert_output(biaffine::score_view<bfloat16>{dst.data(), 3, 3, 9},
                                             biaffine::score_view<const float>{src.data(), 2, 3, 6}),
                    biaffine::shape_error);
    CHECK_THROWS_WITH(biaffine::convert_output(biaffine::seq_view<bfloat16>{dst.data(), 2, 2, 2, 1},
                                               biaffine::seq_view<const float>{src.data(), 2, 3, 3, 1}),
                      Catch::Contains("labels [2, 3] into [2, 2]"));
    CHECK_THROWS_AS(biaffine::convert_output(biaffine::score_view<bfloat16>{nullptr, 2, 3, 6},
                                             biaffine::score_view<const float>{src.data(), 2, 3, 6}),
                    biaffine::shape_error);
}
