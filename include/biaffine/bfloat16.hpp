// biaffine/bfloat16.hpp - the library's own 16-bit floating-point type.
//
// bfloat16 is the upper half of an IEEE float: sign, 8 exponent bits, 7
// mantissa bits (8 significant). biaffine::bfloat16 stores exactly those 16
// bits (std::uint16_t, no padding), so an array of it has the bytes of
//   - ml_dtypes.bfloat16 (numpy dtype "bfloat16", used by JAX and
//     TensorFlow) and torch.bfloat16: same bit layout, little-endian, 2 bytes;
//   - a numpy uint16 array: `a.view(np.uint16)` / `u16.view(ml_dtypes.bfloat16)`
//     reinterpret without copying; without ml_dtypes, float32 values are
//     `(u16.astype(np.uint32) << 16).view(np.float32)`.
// From C++:
//   - Eigen: Eigen::Map<const Eigen::Matrix<biaffine::bfloat16, ...>> over the
//     data, then `.cast<float>()` (the implicit conversion below), or map
//     the same bytes as Eigen::bfloat16 (also one uint16, the same layout);
//   - xtensor: xt::adapt(ptr, n, xt::no_ownership(), shape) of bfloat16,
//     then xt::cast<float>(...) (or an element-wise float(x)).
//
// Conversion from float rounds to nearest, ties to even (as numpy's
// ml_dtypes, PyTorch and the VCVTNEPS2BF16 instruction for normal numbers);
// a NaN stays a NaN (made quiet, sign and top payload bits kept); overflow
// past the largest finite bf16 gives infinity; denormals are rounded like any
// other value (VCVTNEPS2BF16 and VDPBF16PS instead flush them to zero: see
// detail/compute/avx512_bf16.hpp). Conversion to float is exact.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

BIAFFINE_NAMESPACE_BEGIN

/// A bfloat16 number: 16 bits of storage, the upper half of the float it
/// rounds. Trivially copyable and standard layout (arrays of it are arrays
/// of uint16 in memory); arithmetic goes through float.
struct bfloat16 {
    /// The raw bits (sign, exponent, mantissa), little-endian in memory.
    std::uint16_t bits;

    bfloat16() = default;
    /// Rounds `f` to nearest even (NaN kept quiet NaN).
    explicit bfloat16(float f) noexcept : bits(round_bits(f)) {}

    /// The exact float value.
    operator float() const noexcept { return to_float(bits); }

    /// A bfloat16 from its raw bits (no rounding).
    static constexpr bfloat16 from_bits(std::uint16_t b) noexcept
    {
        bfloat16 r{};
        r.bits = b;
        return r;
    }

    /// The bits of `f` rounded to bfloat16: round to nearest, ties to even.
    static std::uint16_t round_bits(float f) noexcept
    {
        std::uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        // Adding 0x7fff rounds the low half up when it exceeds one half; the
        // kept half's lowest bit makes an exact half round to even. A carry
        // into the exponent is the correct rounding (up to infinity). A NaN
        // is truncated with its quiet bit set instead. A select, not a
        // branch, so that loops over arrays vectorise.
        const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const std::uint32_t nan = (u >> 16) | 0x0040u;
        return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }

    /// The float whose upper half is `b`.
    static float to_float(std::uint16_t b) noexcept
    {
        const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }

    friend bool operator==(bfloat16 a, bfloat16 b) noexcept { return float(a) == float(b); }
    friend bool operator!=(bfloat16 a, bfloat16 b) noexcept { return !(a == b); }
};

static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == alignof(std::uint16_t),
              "biaffine::bfloat16 must have the bytes of one uint16 (ml_dtypes / numpy uint16 layout)");
static_assert(std::is_trivially_copyable<bfloat16>::value && std::is_standard_layout<bfloat16>::value,
              "biaffine::bfloat16 must be trivially copyable and standard layout (memcpy, numpy views)");

/// `f` rounded to bfloat16 and back: the float a bf16 product reads.
inline float round_to_bfloat16(float f) noexcept
{
    return bfloat16::to_float(bfloat16::round_bits(f));
}

/// dst[i] = bfloat16(src[i]) for i < n.
inline void to_bfloat16(const float* src, std::size_t n, bfloat16* dst) noexcept
{
    for (std::size_t i = 0; i < n; ++i) dst[i].bits = bfloat16::round_bits(src[i]);
}

/// dst[i] = float(src[i]) for i < n (exact).
inline void to_float(const bfloat16* src, std::size_t n, float* dst) noexcept
{
    for (std::size_t i = 0; i < n; ++i) dst[i] = bfloat16::to_float(src[i].bits);
}

BIAFFINE_NAMESPACE_END
