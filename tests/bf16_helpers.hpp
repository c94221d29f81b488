// Shared by the bf16 tests (test_avx512_bf16.cpp, test_bf16_emulated.cpp):
// operands, the double-precision reference on bf16-rounded operands and the
// bound an fp32 accumulation must meet, a C with sentinels around it.
#pragma once

#include <biaffine/bfloat16.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace bf16_test {

constexpr float sentinel = -4321.0f;

// n rows of k floats in [-1, 1] with row stride ld (the last row ends the
// buffer, so a read past its k floats leaves it).
inline std::vector<float> random_rows(std::size_t n, std::size_t k, std::size_t ld, std::mt19937& gen)
{
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n == 0 ? 0 : (n - 1) * ld + k);
    for (float& x : v) x = d(gen);
    return v;
}

// gamma_k = k u / (1 - k u), u = 2^-24: an fp32 sum of k exact products in
// any order is within gamma_{k-1} sum |a_i b_i| of the exact sum (Higham,
// Accuracy and Stability of Numerical Algorithms, 3.1); gamma_k covers it.
inline double gamma_fp32(std::size_t k)
{
    const double ku = static_cast<double>(k) * std::ldexp(1.0, -24);
    return ku / (1.0 - ku);
}

// The exact dot of rows i of A and j of B rounded to bf16 (in double: the
// products of 8-bit mantissas and their sum of up to thousands are exact to
// far below the bound), and the sum of the products' magnitudes.
struct reference_dot {
    double value = 0.0, magnitude = 0.0;
};

inline reference_dot bf16_dot(const float* a, const float* b, std::size_t k)
{
    reference_dot r;
    for (std::size_t p = 0; p < k; ++p) {
        const double x = static_cast<double>(biaffine::round_to_bfloat16(a[p])) *
                         static_cast<double>(biaffine::round_to_bfloat16(b[p]));
        r.value += x;
        r.magnitude += std::fabs(x);
    }
    return r;
}

// C [rows, cols] with row stride ldc inside sentinels: `pad` floats before
// and after, and the floats between the rows.
struct guarded_c {
    std::size_t rows, cols, ldc, pad = 32;
    std::vector<float> buf;
    guarded_c(std::size_t r, std::size_t c, std::size_t ld) : rows(r), cols(c), ldc(ld), buf(2 * pad + r * ld, sentinel)
    {
    }
    float* data() { return buf.data() + pad; }
    float at(std::size_t i, std::size_t j) const { return buf[pad + i * ldc + j]; }
    std::size_t touched_outside() const
    {
        std::size_t bad = 0;
        for (std::size_t i = 0; i < buf.size(); ++i) {
            const bool inside = i >= pad && i < pad + rows * ldc && (i - pad) % ldc < cols;
            bad += !inside && buf[i] != sentinel;
        }
        return bad;
    }
};

// Checks every C[i, j] against the reference dot of A's row i and B's row j
// (float rows, row strides lda, ldb) within `bound_factor` gamma_k of the
// products' magnitudes, and the sentinels around C.
inline void check_dots(const guarded_c& c, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                       std::size_t k, double bound_factor)
{
    std::size_t bad = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < c.rows; ++i)
        for (std::size_t j = 0; j < c.cols; ++j) {
            const reference_dot r = bf16_dot(a + i * lda, b + j * ldb, k);
            const double err = std::fabs(static_cast<double>(c.at(i, j)) - r.value);
            const double bound = bound_factor * gamma_fp32(k) * r.magnitude;
            if (err > bound) ++bad;
            if (r.magnitude > 0) worst = std::max(worst, err / (gamma_fp32(k) * r.magnitude));
        }
    INFO("worst error in units of gamma_k sum|ab|: " << worst);
    CHECK(bad == 0);
    CHECK(c.touched_outside() == 0);
}

}  // namespace bf16_test
