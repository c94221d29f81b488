// Tests of biaffine/detail/compute/avx512_small.hpp: zmm_dots (C = A B^T)
// and zmm_combos (C = A B, A by any strides) against double-precision
// loops, at every size below and around their blocks (4 x 4 dots with the
// last block moved back, 3 to 6 rows of combinations, up to 9 registers of
// columns then 8 at a time), depths around a packet and with a partial one,
// leading dimensions wider than the rows, and sentinels around C that must
// survive. The functions exist only where the compiler targets AVX-512
// (and BIAFFINE_AVX512_SMALL_PRODUCTS is 1); elsewhere this test reports
// itself skipped (ctest SKIP_REGULAR_EXPRESSION).
#include <biaffine/detail/compute/avx512_small.hpp>

#include <catch2/catch.hpp>

#if BIAFFINE_DETAIL_ZMM_SMALL

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace {

constexpr float sentinel = -4321.0f;

std::vector<float> random_floats(std::size_t n, std::mt19937& gen)
{
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen);
    return v;
}

// C [rows, cols] with leading dimension ldc inside a buffer with `pad`
// sentinels before and after, and sentinels between the rows.
struct guarded_matrix {
    std::size_t rows, cols, ldc, pad = 32;
    std::vector<float> buf;
    guarded_matrix(std::size_t r, std::size_t c, std::size_t ld)
        : rows(r), cols(c), ldc(ld), buf(2 * pad + r * ld, sentinel)
    {
    }
    float* data() { return buf.data() + pad; }
    float at(std::size_t i, std::size_t j) const { return buf[pad + i * ldc + j]; }
    // Every float outside the rows' first `cols` is still the sentinel.
    bool untouched_outside() const
    {
        for (std::size_t i = 0; i < buf.size(); ++i) {
            const bool inside =
                i >= pad && i < pad + rows * ldc && (i - pad) % ldc < cols;
            if (!inside && buf[i] != sentinel) return false;
        }
        return true;
    }
};

// Relative error bound of a float sum of k products of numbers in [-1, 1].
double tolerance(std::size_t k) { return 2e-6 * (1.0 + static_cast<double>(k)); }

}  // namespace

TEST_CASE("zmm_dots equals a double loop at every block edge, depth and stride", "[avx512_small]")
{
    std::mt19937 gen(11);
    const std::size_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 21, 47};
    for (std::size_t k : {std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17), std::size_t(129),
                          std::size_t(300)}) {
        for (std::size_t n : sizes) {
            for (std::size_t m : sizes) {
                INFO("n " << n << " m " << m << " k " << k);
                const std::size_t lda = k + 3, ldb = k + 5, ldc = m + 2;
                // The last row ends the buffer: a read past its k floats would leave it.
                const auto a = random_floats((n - 1) * lda + k, gen), b = random_floats((m - 1) * ldb + k, gen);
                guarded_matrix c(n, m, ldc);
                biaffine::detail::zmm_dots(a.data(), static_cast<std::ptrdiff_t>(lda), static_cast<std::ptrdiff_t>(n),
                                           b.data(), static_cast<std::ptrdiff_t>(ldb), static_cast<std::ptrdiff_t>(m),
                                           static_cast<std::ptrdiff_t>(k), c.data(), static_cast<std::ptrdiff_t>(ldc));
                double worst = 0.0;
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j) {
                        double want = 0.0;
                        for (std::size_t p = 0; p < k; ++p)
                            want += static_cast<double>(a[i * lda + p]) * b[j * ldb + p];
                        worst = std::max(worst, std::abs(c.at(i, j) - want));
                    }
                REQUIRE(worst < tolerance(k));
                REQUIRE(c.untouched_outside());
            }
        }
    }
}

TEST_CASE("zmm_dots and zmm_combos of nothing write nothing", "[avx512_small]")
{
    std::mt19937 gen(12);
    const auto a = random_floats(64, gen), b = random_floats(64, gen);
    guarded_matrix none(0, 0, 1), no_rows(0, 5, 6), no_cols(4, 0, 1);
    biaffine::detail::zmm_dots(a.data(), 8, 0, b.data(), 8, 5, 8, no_rows.data(), 6);
    biaffine::detail::zmm_dots(a.data(), 8, 4, b.data(), 8, 0, 8, no_cols.data(), 1);
    biaffine::detail::zmm_dots(a.data(), 8, 0, b.data(), 8, 0, 8, none.data(), 1);
    CHECK(none.untouched_outside());
    CHECK(no_rows.untouched_outside());
    CHECK(no_cols.untouched_outside());
    // k = 0: every dot is an empty sum (blocks of fewer rows and of four).
    for (std::size_t n : {std::size_t(3), std::size_t(6)}) {
        guarded_matrix zero(n, 5, 7);
        biaffine::detail::zmm_dots(a.data(), 8, static_cast<std::ptrdiff_t>(n), b.data(), 8, 5, 0, zero.data(), 7);
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < 5; ++j) CHECK(zero.at(i, j) == 0.0f);
        CHECK(zero.untouched_outside());
    }
    // zmm_combos with no columns writes nothing.
    guarded_matrix no_combo_cols(5, 0, 3);
    biaffine::detail::zmm_combos(a.data(), 8, 1, 5, 4, b.data(), 8, 0, no_combo_cols.data(), 3);
    CHECK(no_combo_cols.untouched_outside());
}

TEST_CASE("zmm_combos equals a double loop for A plain and transposed, every row block and column count",
          "[avx512_small]")
{
    std::mt19937 gen(13);
    // Columns: one register, a partial one, 8 and 9 (hv = 129), past 144
    // (8 registers at a time, then the rest) and 300.
    const std::size_t widths[] = {1, 5, 16, 17, 100, 128, 129, 144, 145, 160, 300};
    const std::size_t rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 21};
    for (std::size_t k : widths) {
        for (std::size_t n : rows) {
            for (std::size_t p : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(7), std::size_t(21)}) {
                for (bool transposed : {false, true}) {
                    INFO("n " << n << " p " << p << " k " << k << (transposed ? " A^T" : " A"));
                    // A (i, q) at a[i * a_rs + q * a_cs]: rows p + 2 apart, or
                    // stored as A^T with rows n + 3 apart.
                    const std::size_t a_rs = transposed ? 1 : p + 2, a_cs = transposed ? n + 3 : 1;
                    // Both end where their last element is: a read past it would leave them.
                    const std::size_t a_size = p == 0 ? 1 : (n - 1) * a_rs + (p - 1) * a_cs + 1;
                    const auto a = random_floats(a_size, gen);
                    const std::size_t ldb = k + 3, ldc = k + 7;
                    const auto b = random_floats(p == 0 ? 1 : (p - 1) * ldb + k, gen);
                    guarded_matrix c(n, k, ldc);
                    biaffine::detail::zmm_combos(a.data(), static_cast<std::ptrdiff_t>(a_rs),
                                                 static_cast<std::ptrdiff_t>(a_cs), static_cast<std::ptrdiff_t>(n),
                                                 static_cast<std::ptrdiff_t>(p), b.data(),
                                                 static_cast<std::ptrdiff_t>(ldb), static_cast<std::ptrdiff_t>(k),
                                                 c.data(), static_cast<std::ptrdiff_t>(ldc));
                    double worst = 0.0;
                    for (std::size_t i = 0; i < n; ++i)
                        for (std::size_t j = 0; j < k; ++j) {
                            double want = 0.0;
                            for (std::size_t q = 0; q < p; ++q)
                                want += static_cast<double>(a[i * a_rs + q * a_cs]) * b[q * ldb + j];
                            worst = std::max(worst, std::abs(c.at(i, j) - want));
                        }
                    REQUIRE(worst < tolerance(p));
                    REQUIRE(c.untouched_outside());
                }
            }
        }
    }
}

#else

TEST_CASE("AVX-512 small products: not built here", "[avx512_small]")
{
    WARN("SKIPPED: zmm_dots and zmm_combos need an AVX-512 target (-mavx512f) and "
         "BIAFFINE_AVX512_SMALL_PRODUCTS=1; the split products use the kernel, row_dots and Eigen");
    SUCCEED("nothing to test without AVX-512");
}

#endif
