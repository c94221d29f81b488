// Tests for biaffine/pairwise_bilinear.hpp: every bilinear_* golden case
// (forward and backward, float64 and float32) and a naive-loop reference of
// S[b, m, l, o] = sum_ij u[b, l, i] W[o, i, j] v[b, m, j] on random data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <random>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "biaffine/pairwise_bilinear.hpp"
#include "golden.hpp"

using biaffine::tensor;

namespace {

template <class T>
void check_bilinear_case(const golden::case_dir& c)
{
    INFO("case " << c.path << " (" << (sizeof(T) == 8 ? "float64" : "float32") << ")");
    const xt::xarray<int> bias = golden::load<int>(c.path, "bias", {2});
    REQUIRE(((bias(0) == 0 || bias(0) == 1) && (bias(1) == 0 || bias(1) == 1)));
    const bool bu = bias(0) == 1, bv = bias(1) == 1;
    const xt::xarray<double> u64 = golden::load_rank<double>(c.path, "u", 3);
    const std::size_t b = u64.shape()[0], L = u64.shape()[1], h = u64.shape()[2];
    const xt::xarray<double> w64 = golden::load_rank<double>(c.path, "weight", 3);
    const std::size_t o = w64.shape()[0];
    REQUIRE(golden::shape_of(w64) == std::vector<std::size_t>{o, h + bu, h + bv});
    const xt::xarray<double> v64 = golden::load<double>(c.path, "v", {b, L, h});
    const xt::xarray<double> y64 = golden::load<double>(c.path, "y", {b, L, L, o});
    const xt::xarray<double> dy64 = golden::load<double>(c.path, "dy", {b, L, L, o});
    const xt::xarray<double> du64 = golden::load<double>(c.path, "du", {b, L, h});
    const xt::xarray<double> dv64 = golden::load<double>(c.path, "dv", {b, L, h});
    const xt::xarray<double> dw64 = golden::load<double>(c.path, "dweight", {o, h + bu, h + bv});

    const tensor<T, 3> u = xt::cast<T>(u64);
    const tensor<T, 3> v = xt::cast<T>(v64);
    const tensor<T, 3> w = xt::cast<T>(w64);
    const tensor<T, 4> dy = xt::cast<T>(dy64);

    const tensor<T, 4> y = biaffine::pairwise_bilinear<T>(u, v, w, bu, bv);
    GOLDEN_CHECK("y", golden::compare<T>(y, y64));

    tensor<T, 3> dw = xt::zeros<T>(w.shape());
    auto [du, dv] = biaffine::pairwise_bilinear_backward<T>(u, v, w, bu, bv, dy, dw);
    GOLDEN_CHECK("du", golden::compare<T>(du, du64));
    GOLDEN_CHECK("dv", golden::compare<T>(dv, dv64));
    GOLDEN_CHECK("dweight", golden::compare<T>(dw, dw64));
}

// Naive reference: the formula written as loops over every index.
xt::xarray<double> naive_forward(const xt::xarray<double>& u, const xt::xarray<double>& v,
                                 const xt::xarray<double>& w, bool bu, bool bv)
{
    const std::size_t b = u.shape()[0], L = u.shape()[1], h = u.shape()[2], o = w.shape()[0];
    auto ua = [&](std::size_t s, std::size_t l, std::size_t i) { return i < h ? u(s, l, i) : 1.0; };
    auto va = [&](std::size_t s, std::size_t m, std::size_t j) { return j < h ? v(s, m, j) : 1.0; };
    xt::xarray<double> y = xt::zeros<double>({b, L, L, o});
    for (std::size_t s = 0; s < b; ++s)
        for (std::size_t m = 0; m < L; ++m)
            for (std::size_t l = 0; l < L; ++l)
                for (std::size_t k = 0; k < o; ++k) {
                    double acc = 0;
                    for (std::size_t i = 0; i < h + bu; ++i)
                        for (std::size_t j = 0; j < h + bv; ++j) acc += ua(s, l, i) * w(k, i, j) * va(s, m, j);
                    y(s, m, l, k) = acc;
                }
    return y;
}

// Naive gradients of L = sum dy * y: du, dv (without the bias columns) and dW.
void naive_backward(const xt::xarray<double>& u, const xt::xarray<double>& v, const xt::xarray<double>& w, bool bu,
                    bool bv, const xt::xarray<double>& dy, xt::xarray<double>& du, xt::xarray<double>& dv,
                    xt::xarray<double>& dw)
{
    const std::size_t b = u.shape()[0], L = u.shape()[1], h = u.shape()[2], o = w.shape()[0];
    auto ua = [&](std::size_t s, std::size_t l, std::size_t i) { return i < h ? u(s, l, i) : 1.0; };
    auto va = [&](std::size_t s, std::size_t m, std::size_t j) { return j < h ? v(s, m, j) : 1.0; };
    du = xt::zeros<double>({b, L, h});
    dv = xt::zeros<double>({b, L, h});
    dw = xt::zeros<double>(w.shape());
    for (std::size_t s = 0; s < b; ++s)
        for (std::size_t m = 0; m < L; ++m)
            for (std::size_t l = 0; l < L; ++l)
                for (std::size_t k = 0; k < o; ++k)
                    for (std::size_t i = 0; i < h + bu; ++i)
                        for (std::size_t j = 0; j < h + bv; ++j) {
                            const double g = dy(s, m, l, k);
                            if (i < h) du(s, l, i) += g * w(k, i, j) * va(s, m, j);
                            if (j < h) dv(s, m, j) += g * ua(s, l, i) * w(k, i, j);
                            dw(k, i, j) += g * ua(s, l, i) * va(s, m, j);
                        }
}

xt::xarray<double> random_array(std::mt19937_64& rng, const std::vector<std::size_t>& shape)
{
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    xt::xarray<double> a = xt::zeros<double>(shape);
    for (auto& x : a) x = dist(rng);
    return a;
}

}  // namespace

TEST_CASE("pairwise_bilinear matches every bilinear_* golden case", "[pairwise_bilinear][golden]")
{
    bool is_default = false;
    const std::string root = golden::dir(&is_default);
    const auto cs = golden::cases_of(golden::kind::bilinear);
    std::cout << "pairwise_bilinear golden: " << cs.size() << " bilinear cases checked in " << root << "\n";
    if (is_default) REQUIRE(!cs.empty());
    for (const auto& c : cs) {
        check_bilinear_case<double>(c);
        check_bilinear_case<float>(c);
    }
}

TEST_CASE("pairwise_bilinear equals the naive formula on random data", "[pairwise_bilinear]")
{
    std::mt19937_64 rng(42);
    for (int bu = 0; bu < 2; ++bu) {
        for (int bv = 0; bv < 2; ++bv) {
            for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
              // L = 5 takes row_dots / row_combos, L = 60 the packed GEMMs.
              for (std::size_t L : {std::size_t(5), std::size_t(60)}) {
                REQUIRE(biaffine::detail::use_row_dots(5, o));
                REQUIRE(biaffine::detail::use_row_combos(5, o));
                REQUIRE(!biaffine::detail::use_row_dots(60, o));
                REQUIRE(!biaffine::detail::use_row_combos(60, o));
                const std::size_t b = 3, h = 4;
                INFO("bias_u " << bu << " bias_v " << bv << " labels " << o << " L " << L);
                const auto u64 = random_array(rng, {b, L, h});
                const auto v64 = random_array(rng, {b, L, h});
                const auto w64 = random_array(rng, {o, h + bu, h + bv});
                const auto dy64 = random_array(rng, {b, L, L, o});
                const tensor<double, 3> u = u64, v = v64, w = w64;
                const tensor<double, 4> dy = dy64;

                const xt::xarray<double> ref = naive_forward(u64, v64, w64, bu, bv);
                GOLDEN_CHECK("y vs naive", golden::compare<double>(biaffine::pairwise_bilinear<double>(u, v, w, bu, bv), ref));

                xt::xarray<double> du_ref, dv_ref, dw_ref;
                naive_backward(u64, v64, w64, bu, bv, dy64, du_ref, dv_ref, dw_ref);
                // dW accumulates: start from a known non-zero value.
                const auto dw0 = random_array(rng, golden::shape_of(w64));
                tensor<double, 3> dw = dw0;
                auto [du, dv] = biaffine::pairwise_bilinear_backward<double>(u, v, w, bu, bv, dy, dw);
                GOLDEN_CHECK("du vs naive", golden::compare<double>(du, du_ref));
                GOLDEN_CHECK("dv vs naive", golden::compare<double>(dv, dv_ref));
                const xt::xarray<double> dw_expected = dw0 + dw_ref;
                GOLDEN_CHECK("dW accumulated vs naive", golden::compare<double>(dw, dw_expected));
              }
            }
        }
    }
}

TEST_CASE("row_dots equals a double-precision loop for every block remainder and stride", "[pairwise_bilinear]")
{
    // n and m cover every remainder of the 4 x 3 register block, k every
    // remainder of the SIMD width (up to 16 floats, AVX-512) and none.
    std::mt19937 gen(11);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    auto check = [&](auto zero, std::ptrdiff_t n, std::ptrdiff_t m, std::ptrdiff_t k, std::ptrdiff_t pad) {
        using T = decltype(zero);
        const std::ptrdiff_t lda = k + pad, ldb = k + 2 * pad, ldc = m + pad;
        std::vector<T> a(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, n * lda))),
            b(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, m * ldb)));
        for (auto& x : a) x = static_cast<T>(uni(gen));
        for (auto& x : b) x = static_cast<T>(uni(gen));
        const T sentinel = T(12345);
        std::vector<T> c(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, n * ldc)), sentinel);
        biaffine::detail::row_dots(a.data(), lda, n, b.data(), ldb, m, k, c.data(), ldc);
        const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
        for (std::ptrdiff_t i = 0; i < n; ++i) {
            for (std::ptrdiff_t j = 0; j < ldc; ++j) {
                const T got = c[static_cast<std::size_t>(i * ldc + j)];
                if (j >= m) {
                    REQUIRE(got == sentinel);  // padding between rows untouched
                    continue;
                }
                double want = 0;
                for (std::ptrdiff_t p = 0; p < k; ++p) {
                    want += static_cast<double>(a[static_cast<std::size_t>(i * lda + p)]) *
                            static_cast<double>(b[static_cast<std::size_t>(j * ldb + p)]);
                }
                INFO("n=" << n << " m=" << m << " k=" << k << " pad=" << pad << " at " << i << "," << j);
                REQUIRE(std::abs(static_cast<double>(got) - want) <= tol * std::max(1.0, std::abs(want)) * double(k));
            }
        }
    };
    for (std::ptrdiff_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9}) {
        for (std::ptrdiff_t m : {0, 1, 2, 3, 4, 5, 6, 7, 13}) {
            for (std::ptrdiff_t k : {0, 1, 3, 7, 8, 9, 16, 17, 33, 129}) {
                for (std::ptrdiff_t pad : {0, 3}) {
                    check(float{}, n, m, k, pad);
                    check(double{}, n, m, k, pad);
                }
            }
        }
    }
}

TEST_CASE("row_combos equals a double-precision loop for every block remainder, stride and transpose",
          "[pairwise_bilinear]")
{
    // C [n, k] = A [n, p] . B [p, k]; A read row-major (a_rs = p + pad, a_cs = 1)
    // and transposed (a_rs = 1, a_cs = n + pad), as the backward uses it.
    std::mt19937 gen(12);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    auto check = [&](auto zero, std::ptrdiff_t n, std::ptrdiff_t p, std::ptrdiff_t k, std::ptrdiff_t pad,
                     bool transposed) {
        using T = decltype(zero);
        const std::ptrdiff_t a_rs = transposed ? 1 : p + pad, a_cs = transposed ? n + pad : 1;
        const std::ptrdiff_t ldb = k + 2 * pad, ldc = k + pad;
        std::vector<T> a(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, (n + pad) * (p + pad)))),
            b(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, p * ldb)));
        for (auto& x : a) x = static_cast<T>(uni(gen));
        for (auto& x : b) x = static_cast<T>(uni(gen));
        const T sentinel = T(12345);
        std::vector<T> c(static_cast<std::size_t>(std::max<std::ptrdiff_t>(1, n * ldc)), sentinel);
        biaffine::detail::row_combos(a.data(), a_rs, a_cs, n, p, b.data(), ldb, k, c.data(), ldc);
        const double tol = std::is_same<T, float>::value ? 1e-5 : 1e-12;
        for (std::ptrdiff_t i = 0; i < n; ++i) {
            for (std::ptrdiff_t j = 0; j < ldc; ++j) {
                const T got = c[static_cast<std::size_t>(i * ldc + j)];
                if (j >= k) {
                    REQUIRE(got == sentinel);
                    continue;
                }
                double want = 0;
                for (std::ptrdiff_t q = 0; q < p; ++q) {
                    want += static_cast<double>(a[static_cast<std::size_t>(i * a_rs + q * a_cs)]) *
                            static_cast<double>(b[static_cast<std::size_t>(q * ldb + j)]);
                }
                INFO("n=" << n << " p=" << p << " k=" << k << " pad=" << pad << " transposed=" << transposed
                          << " at " << i << "," << j);
                REQUIRE(std::abs(static_cast<double>(got) - want) <= tol * std::max(1.0, std::abs(want)) * double(p + 1));
            }
        }
    };
    for (std::ptrdiff_t n : {0, 1, 2, 3, 4, 5, 7, 9}) {
        for (std::ptrdiff_t p : {0, 1, 2, 5, 13}) {
            for (std::ptrdiff_t k : {0, 1, 3, 7, 8, 9, 16, 17, 24, 33, 48, 49, 129}) {
                for (std::ptrdiff_t pad : {0, 3}) {
                    for (bool transposed : {false, true}) {
                        check(float{}, n, p, k, pad, transposed);
                        check(double{}, n, p, k, pad, transposed);
                    }
                }
            }
        }
    }
}

TEST_CASE("pairwise_bilinear rejects mismatched shapes", "[pairwise_bilinear]")
{
    const tensor<double, 3> u = xt::zeros<double>({2, 3, 4});
    const tensor<double, 3> v_bad = xt::zeros<double>({2, 3, 5});
    const tensor<double, 3> w = xt::zeros<double>({1, 5, 5});
    CHECK_THROWS_AS(biaffine::pairwise_bilinear<double>(u, v_bad, w, true, true), biaffine::shape_error);
    CHECK_THROWS_AS(biaffine::pairwise_bilinear<double>(u, u, w, false, true), biaffine::shape_error);
    const tensor<double, 4> dy_bad = xt::zeros<double>({2, 3, 3, 2});
    tensor<double, 3> dw = xt::zeros<double>({1, 5, 5});
    CHECK_THROWS_AS(biaffine::pairwise_bilinear_backward<double>(u, u, w, true, true, dy_bad, dw),
                    biaffine::shape_error);
}
