// Tests of biaffine/bfloat16.hpp: rounding float -> bfloat16 against a
// reference written differently (the two neighbouring bf16 values computed
// from their fields in double, the nearer one taken, a tie to the even
// mantissa), over every low half of the float for upper halves around each
// edge (zero and denormals, one, the largest finite, infinity and NaN) and
// the edge low halves for every upper half; NaN, infinities and signed
// zeros; exactness of the way back; Eigen's own bfloat16 as a second
// opinion on random floats; the layout a numpy uint16 view relies on.
#include <biaffine/bfloat16.hpp>

#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdint>
#include <array>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

namespace {

using biaffine::bfloat16;

float float_of_bits(std::uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

std::uint32_t bits_of_float(float f)
{
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// The magnitude of the bf16 with exponent field e and mantissa field m, in
// double, from the fields (not from the bits' float view): e == 255, m == 0
// gives 2^128, where the rounding to infinity starts.
double bf16_magnitude(std::uint32_t e, std::uint32_t m)
{
    if (e == 0) return std::ldexp(static_cast<double>(m), -133);
    return std::ldexp(static_cast<double>(128 + m), static_cast<int>(e) - 134);
}

// The bf16 bits a finite float rounds to: the neighbours below and above its
// magnitude, the nearer, a tie to the one with an even mantissa.
std::uint16_t reference_round(std::uint32_t u)
{
    const std::uint32_t sign = u >> 31, mag = u & 0x7fffffffu;
    const double x = std::fabs(static_cast<double>(float_of_bits(u)));
    const std::uint32_t lo = mag >> 16, hi = lo + 1;
    const double vlo = bf16_magnitude(lo >> 7, lo & 0x7f), vhi = bf16_magnitude(hi >> 7, hi & 0x7f);
    REQUIRE(vlo <= x);
    REQUIRE(x < vhi);
    std::uint32_t r;
    if (x - vlo < vhi - x)
        r = lo;
    else if (x - vlo > vhi - x)
        r = hi;
    else
        r = (lo & 1) == 0 ? lo : hi;
    return static_cast<std::uint16_t>((sign << 15) | r);
}

void check_against_reference(std::uint32_t u)
{
    const float f = float_of_bits(u);
    if (!std::isfinite(f)) return;  // NaN and infinities: their own test case
    const std::uint16_t got = bfloat16(f).bits;
    if (got != reference_round(u)) {
        INFO("float bits 0x" << std::hex << u << " got 0x" << got << " want 0x" << reference_round(u));
        CHECK(got == reference_round(u));
    }
}

}  // namespace

TEST_CASE("bfloat16 is one uint16 in memory, trivially copyable", "[bfloat16]")
{
    STATIC_REQUIRE(sizeof(bfloat16) == 2);
    STATIC_REQUIRE(std::is_trivially_copyable<bfloat16>::value);
    STATIC_REQUIRE(std::is_standard_layout<bfloat16>::value);
    STATIC_REQUIRE(std::is_trivially_default_constructible<bfloat16>::value);
    // 1.0f is 0x3f800000: bf16 0x3f80 in the first two bytes, little-endian
    // (what numpy's uint16 view and ml_dtypes read).
    const bfloat16 one(1.0f);
    unsigned char bytes[2];
    std::memcpy(bytes, &one, 2);
    CHECK(bytes[0] == 0x80);
    CHECK(bytes[1] == 0x3f);
    // Eigen's bfloat16 has the same bytes for the same value.
    const Eigen::bfloat16 e(1.0f);
    CHECK(std::memcmp(&e, &one, 2) == 0);
}

TEST_CASE("rounding equals the nearest-even reference on every low half around the edges", "[bfloat16]")
{
    // Upper halves whose 65536 floats cover: zero and the smallest
    // denormals, the largest denormals into the smallest normals, around
    // one, the largest finite bf16 (rounding up to infinity), both signs.
    for (std::uint32_t hi : {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x3f7fu, 0x3f80u, 0x3f81u, 0x4b00u, 0x7f7eu,
                             0x7f7fu, 0x8000u, 0x807fu, 0xbf80u, 0xff7fu}) {
        INFO("upper half 0x" << std::hex << hi);
        for (std::uint32_t lo = 0; lo < 0x10000u; ++lo) check_against_reference((hi << 16) | lo);
    }
}

TEST_CASE("rounding equals the reference at the edge low halves of every upper half", "[bfloat16]")
{
    for (std::uint32_t hi = 0; hi < 0x10000u; ++hi) {
        for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x4000u, 0xc000u})
            check_against_reference((hi << 16) | lo);
    }
}

TEST_CASE("ties go to the even mantissa, overflow to infinity", "[bfloat16]")
{
    // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81).
    CHECK(bfloat16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);
    // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even).
    CHECK(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);
    // Just above the half rounds up.
    CHECK(bfloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)).bits == 0x3f81);
    CHECK(bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);
    CHECK(bfloat16(-std::numeric_limits<float>::max()).bits == 0xff80);
    // The largest float that stays finite: 0x7f7f7fff (below the half-way
    // point 0x7f7f8000, which is a tie with an odd lower neighbour).
    CHECK(bfloat16(float_of_bits(0x7f7f7fffu)).bits == 0x7f7f);
    CHECK(bfloat16(float_of_bits(0x7f7f8000u)).bits == 0x7f80);
}

TEST_CASE("NaN stays a quiet NaN with its sign, infinities and zeros are kept", "[bfloat16]")
{
    for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7f80ffffu, 0xffc00000u, 0xff800001u,
                            0x7fffffffu}) {
        INFO("NaN bits 0x" << std::hex << u);
        const bfloat16 b(float_of_bits(u));
        CHECK(std::isnan(float(b)));
        CHECK((b.bits & 0x0040) != 0);             // quiet
        CHECK((b.bits >> 15) == (u >> 31));        // sign
        CHECK((b.bits & 0x7f80) == 0x7f80);        // still all-ones exponent
    }
    CHECK(bfloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
    CHECK(bfloat16(-std::numeric_limits<float>::infinity()).bits == 0xff80);
    CHECK(bfloat16(0.0f).bits == 0x0000);
    CHECK(bfloat16(-0.0f).bits == 0x8000);
}

TEST_CASE("every bfloat16 converts to float exactly and back to itself", "[bfloat16]")
{
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
        const bfloat16 x = bfloat16::from_bits(static_cast<std::uint16_t>(b));
        const float f = x;
        REQUIRE(bits_of_float(f) == b << 16);
        if (!std::isnan(f)) REQUIRE(bfloat16(f).bits == b);
        REQUIRE((biaffine::round_to_bfloat16(f) == f || std::isnan(f)));
    }
}

TEST_CASE("rounding agrees with Eigen's bfloat16 on random floats", "[bfloat16]")
{
    std::mt19937 gen(7);
    std::uniform_int_distribution<std::uint32_t> d;
    std::size_t differ = 0, compared = 0;
    std::uint32_t first = 0;
    for (int i = 0; i < 2000000; ++i) {
        const float f = float_of_bits(d(gen));
        if (std::isnan(f)) continue;  // Eigen makes every NaN one canonical NaN
        const Eigen::bfloat16 e(f);
        std::uint16_t eb;
        std::memcpy(&eb, &e, 2);
        ++compared;
        if (bfloat16(f).bits != eb) {
            if (differ++ == 0) first = bits_of_float(f);
        }
    }
    CHECK(compared > 1900000);
    INFO("first difference at float bits 0x" << std::hex << first);
    CHECK(differ == 0);
}

TEST_CASE("array conversions round each element and come back exactly", "[bfloat16]")
{
    const float src[] = {1.0f, -2.5f, 3.14159265f, 1e-40f, 65504.0f, -0.0f};
    constexpr std::size_t n = sizeof src / sizeof src[0];
    bfloat16 mid[n];
    float back[n];
    biaffine::to_bfloat16(src, n, mid);
    biaffine::to_float(mid, n, back);
    for (std::size_t i = 0; i < n; ++i) {
        CHECK(mid[i].bits == reference_round(bits_of_float(src[i])));
        CHECK(back[i] == biaffine::round_to_bfloat16(src[i]));
    }
}

TEST_CASE("Eigen and xtensor read bfloat16 data as documented", "[bfloat16]")
{
    const float src[6] = {1.0f, -2.5f, 0.1f, 3.0e5f, -7.0e-3f, 42.0f};
    bfloat16 data[6];
    biaffine::to_bfloat16(src, 6, data);
    // Eigen: the same bytes mapped as Eigen::bfloat16, cast to float.
    const Eigen::Map<const Eigen::Matrix<Eigen::bfloat16, 2, 3, Eigen::RowMajor>> em(
        reinterpret_cast<const Eigen::bfloat16*>(data));
    const Eigen::Matrix<float, 2, 3, Eigen::RowMajor> ef = em.cast<float>();
    // xtensor: adapted in place, cast element-wise through float(x).
    const bfloat16* p = data;
    const auto xa = xt::adapt(p, 6, xt::no_ownership(), std::array<std::size_t, 2>{2, 3});
    const xt::xtensor<float, 2> xf = xt::cast<float>(xa);
    for (std::size_t i = 0; i < 6; ++i) {
        const float want = biaffine::round_to_bfloat16(src[i]);
        CHECK(ef(static_cast<Eigen::Index>(i / 3), static_cast<Eigen::Index>(i % 3)) == want);
        CHECK(xf(i / 3, i % 3) == want);
    }
}
