// Tests of biaffine/detail/compute/backend.hpp and the backends behind it:
// which backend this build chose, and every backend's per-split scores and
// relu backward against a double-precision loop / the select's definition,
// on every path (row_dots, Eigen's GEMM, the kernel), strides wider than the
// rows and a sentinel past them. The whole scorer through each backend is
// covered by the golden and gradient tests, which CI runs with the kernel on
// (the Release build) and off (the sanitizer build).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "biaffine/detail/compute/backend.hpp"

namespace {

using biaffine::detail::scorer_dims;

template <class Backend, class T>
void check_split_scores(const char* name)
{
    std::mt19937 gen(5);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    const std::size_t hv = 129;
    for (std::size_t o : {std::size_t(1), std::size_t(4)}) {
        for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(13), std::size_t(31), std::size_t(32),
                              std::size_t(33), std::size_t(60)}) {
            INFO(name << ": labels " << o << " n " << n);
            const std::size_t ldv = hv + 2, lds = n * o + 3;  // strides wider than the rows
            std::vector<T> va(n * ldv), tr(n * o * hv);
            for (T& x : va) x = static_cast<T>(d(gen));
            for (T& x : tr) x = static_cast<T>(d(gen));
            const T sentinel = T(-777);
            std::vector<T> s(n * lds, sentinel);
            scorer_dims dims;
            dims.n_in = 1;
            dims.hidden = hv - 1;
            dims.labels = o;
            std::vector<T> packed(Backend::packed_elements(dims, n) + 1);
            const biaffine::const_row_map<T> vm(va.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(hv),
                                                Eigen::OuterStride<>(static_cast<Eigen::Index>(ldv)));
            Backend::split_scores(vm, tr.data(), o, biaffine::score_view<T>{s.data(), n, o, static_cast<std::ptrdiff_t>(lds)},
                                  packed.data());
            double worst = 0.0;
            for (std::size_t m = 0; m < n; ++m) {
                for (std::size_t r = 0; r < n * o; ++r) {
                    double want = 0.0;
                    for (std::size_t j = 0; j < hv; ++j) want += static_cast<double>(va[m * ldv + j]) * tr[r * hv + j];
                    worst = std::max(worst, std::abs(s[m * lds + r] - want) / (1.0 + std::abs(want)));
                }
                for (std::size_t r = n * o; r < lds; ++r) REQUIRE(s[m * lds + r] == sentinel);
            }
            REQUIRE(worst < (sizeof(T) == 8 ? 1e-12 : 1e-5));
        }
    }
}

template <class Backend, class T>
void check_relu_backward(const char* name)
{
    const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    std::mt19937 gen(3);
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    for (std::size_t h : {1u, 7u, 8u, 9u, 17u, 40u}) {
        INFO(name << ": h " << h);
        scorer_dims dims;
        dims.hidden = h;
        const std::size_t N = 3, width = h + 1;  // rows carry the bias column, untouched
        std::vector<T> a(N * width), dz(N * width), db(h);
        for (T& x : a) x = static_cast<T>(d(gen));
        for (T& x : dz) x = static_cast<T>(d(gen));
        for (T& x : db) x = static_cast<T>(d(gen));
        a[0] = T(0);  // a dead unit passes nothing, even a NaN or infinite gradient
        dz[0] = nan;
        if (h > 3) {
            a[width + 2] = T(-1);
            dz[width + 2] = inf;
            a[2 * width + 3] = nan;  // a NaN activation compares false: dead
        }
        const std::vector<T> dz0 = dz, db0 = db;
        const T scale = T(1.25);
        Backend::relu_backward(dims, a.data(), width, N, scale, dz.data(), db.data());
        std::vector<T> want_db = db0;
        for (std::size_t r = 0; r < N; ++r) {
            for (std::size_t j = 0; j < h; ++j) {
                const T want = a[r * width + j] > T(0) ? dz0[r * width + j] * scale : T(0);
                REQUIRE(std::memcmp(&dz[r * width + j], &want, sizeof(T)) == 0);
                want_db[j] += want;
            }
            REQUIRE(std::memcmp(&dz[r * width + h], &dz0[r * width + h], sizeof(T)) == 0);  // bias column
        }
        for (std::size_t j = 0; j < h; ++j) REQUIRE(db[j] == want_db[j]);
    }
}

}  // namespace

TEST_CASE("the backend chosen for each scalar type is what the build says", "[backend]")
{
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<double>::name, "eigen") == 0);
#if defined(__AVX2__) && defined(__FMA__) && !defined(BIAFFINE_NO_GEMM_KERNEL)
    REQUIRE(BIAFFINE_GEMM_KERNEL == 1);
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<float>::name, "avx2") == 0);
#else
    WARN("the AVX2 backend is not compiled in (no AVX2/FMA target, or BIAFFINE_NO_GEMM_KERNEL): its tests are left "
         "out, float runs on Eigen");
    REQUIRE(BIAFFINE_GEMM_KERNEL == 0);
    REQUIRE(std::strcmp(biaffine::detail::compute_backend<float>::name, "eigen") == 0);
#endif
}

TEST_CASE("eigen backend: split scores equal a double loop on every path", "[backend]")
{
    // n = 5 takes row_dots, the rest Eigen's GEMM.
    REQUIRE(biaffine::detail::use_row_dots(5, 4));
    REQUIRE(!biaffine::detail::use_row_dots(13, 1));
    check_split_scores<biaffine::detail::eigen_backend<double>, double>("eigen<double>");
    check_split_scores<biaffine::detail::eigen_backend<float>, float>("eigen<float>");
}

TEST_CASE("eigen backend: relu backward is a select with the bias sums", "[backend]")
{
    check_relu_backward<biaffine::detail::eigen_backend<double>, double>("eigen<double>");
    check_relu_backward<biaffine::detail::eigen_backend<float>, float>("eigen<float>");
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(BIAFFINE_NO_GEMM_KERNEL)

TEST_CASE("avx2 backend: split scores equal a double loop on every path", "[backend]")
{
    using biaffine::detail::use_kernel_scores;
    // Which path each size takes (config.hpp's defaults).
    REQUIRE(!use_kernel_scores(12, 1));  // row_dots
    REQUIRE(!use_kernel_scores(31, 1));  // Eigen's GEMM
    REQUIRE(use_kernel_scores(32, 1));
    REQUIRE(!use_kernel_scores(33, 1));  // 33 of 48 panel columns used
    REQUIRE(use_kernel_scores(13, 4));
    REQUIRE(!use_kernel_scores(33, 4));
    check_split_scores<biaffine::detail::avx2_backend, float>("avx2");
}

TEST_CASE("avx2 backend: relu backward is a select with the bias sums", "[backend]")
{
    check_relu_backward<biaffine::detail::avx2_backend, float>("avx2");
}

#endif
