// Tests for biaffine/decode.hpp: argmax against a direct loop, MST against
// brute force over every head assignment (n <= 6) and against an independent
// naive Chu-Liu/Edmonds (try every root, n <= 30), masking, NaN, overloads,
// and 1000-token timings.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#if __has_include(<Eigen/Core>)
#include <Eigen/Core>
#define BIAFFINE_TEST_EIGEN 1
#endif
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/decode.hpp"

using biaffine::argmax_heads;
using biaffine::is_tree;
using biaffine::mst_heads;
using sizes = std::vector<std::size_t>;

namespace {

// Timing is reported (INFO), never asserted: speed is the benches' job.

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

// Tree check written independently of biaffine::is_tree: one root, and from
// every token the root is reached within n steps.
bool ref_is_tree(const sizes& h)
{
    const std::size_t n = h.size();
    std::size_t roots = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (h[i] >= n) return false;
        roots += (h[i] == i);
    }
    if (roots != 1) return false;
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t v = i;
        std::size_t steps = 0;
        while (h[v] != v && steps <= n) {
            v = h[v];
            ++steps;
        }
        if (h[v] != v) return false;
    }
    return true;
}

// Every head assignment of n tokens, in odometer order.
template <class F>
void for_each_assignment(std::size_t n, F&& f)
{
    sizes h(n, 0);
    while (true) {
        f(h);
        std::size_t i = 0;
        while (i < n && ++h[i] == n) h[i++] = 0;
        if (i == n) return;
    }
}

const std::vector<sizes>& all_trees(std::size_t n)
{
    static std::vector<std::vector<sizes>> cache(8);
    if (cache[n].empty()) {
        for_each_assignment(n, [&](const sizes& h) {
            if (ref_is_tree(h)) cache[n].push_back(h);
        });
    }
    return cache[n];
}

template <class T>
double total(const std::vector<T>& s, std::size_t n, const sizes& h)
{
    double t = 0;
    for (std::size_t m = 0; m < n; ++m) t += static_cast<double>(s[m * n + h[m]]);
    return t;
}

// Naive recursive Chu-Liu/Edmonds, weight only: w[u][v] is the arc u -> v,
// node 0 the root, -inf an absent arc. Assumes an arborescence exists.
double ref_cle(const std::vector<std::vector<double>>& w)
{
    const std::size_t n = w.size();
    sizes in(n, 0);
    for (std::size_t v = 1; v < n; ++v) {
        std::size_t b = 0;
        for (std::size_t u = 0; u < n; ++u) {
            if (u != v && w[u][v] > w[b][v]) b = u;
        }
        in[v] = b;
    }
    std::vector<std::size_t> mark(n, 0);
    sizes cyc;
    for (std::size_t s = 1; s < n && cyc.empty(); ++s) {
        std::size_t v = s;
        while (v != 0 && mark[v] == 0) {
            mark[v] = s;
            v = in[v];
        }
        if (v != 0 && mark[v] == s) {
            std::size_t u = v;
            do {
                cyc.push_back(u);
                u = in[u];
            } while (u != v);
        }
    }
    if (cyc.empty()) {
        double t = 0;
        for (std::size_t v = 1; v < n; ++v) t += w[in[v]][v];
        return t;
    }
    std::vector<bool> in_c(n, false);
    double cyc_w = 0;
    for (std::size_t v : cyc) {
        in_c[v] = true;
        cyc_w += w[in[v]][v];
    }
    sizes id(n);
    std::size_t k = 0;
    for (std::size_t v = 0; v < n; ++v) {
        if (!in_c[v]) id[v] = k++;
    }
    const std::size_t c = k;
    std::vector<std::vector<double>> w2(k + 1, std::vector<double>(k + 1, neg_inf));
    for (std::size_t u = 0; u < n; ++u) {
        for (std::size_t v = 0; v < n; ++v) {
            if (u == v) continue;
            if (!in_c[u] && !in_c[v]) {
                w2[id[u]][id[v]] = w[u][v];
            } else if (!in_c[u] && in_c[v]) {
                w2[id[u]][c] = std::max(w2[id[u]][c], w[u][v] - w[in[v]][v]);
            } else if (in_c[u] && !in_c[v]) {
                w2[c][id[v]] = std::max(w2[c][id[v]], w[u][v]);
            }
        }
    }
    return ref_cle(w2) + cyc_w;
}

// Best single-root tree score by forcing each root in turn.
template <class T>
double ref_single_root(const std::vector<T>& s, std::size_t n)
{
    double best = neg_inf;
    for (std::size_t r = 0; r < n; ++r) {
        std::vector<std::vector<double>> w(n + 1, std::vector<double>(n + 1, neg_inf));
        w[0][r + 1] = static_cast<double>(s[r * n + r]);
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t l = 0; l < n; ++l) {
                if (l != m) w[l + 1][m + 1] = static_cast<double>(s[m * n + l]);
            }
        }
        best = std::max(best, ref_cle(w));
    }
    return best;
}

// kind 0: uniform, 1: small integers (ties), 2: -10000 masks,
// 3: root-hungry diagonal, 4: -inf masks.
template <class T>
std::vector<T> random_scores(std::mt19937& rng, std::size_t n, int kind)
{
    std::uniform_real_distribution<T> u(-1, 1);
    std::uniform_int_distribution<int> small(-2, 2);
    std::uniform_int_distribution<int> pct(0, 99);
    std::vector<T> s(n * n);
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            T& x = s[m * n + l];
            x = kind == 1 ? static_cast<T>(small(rng)) : u(rng);
            if (kind == 2 && pct(rng) < 25) x = T(-10000);
            if (kind == 3 && m == l) x += T(5);
            if (kind == 4 && pct(rng) < 25) x = -std::numeric_limits<T>::infinity();
        }
    }
    return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("is_tree: exhaustive against an independent check", "[decode][is_tree]")
{
    CHECK(is_tree({}));
    CHECK(is_tree({0}));
    CHECK_FALSE(is_tree({1}));
    CHECK(is_tree({0, 0}));
    CHECK(is_tree({1, 1}));
    CHECK_FALSE(is_tree({0, 1}));     // two roots
    CHECK_FALSE(is_tree({1, 0}));     // no root, 2-cycle
    CHECK_FALSE(is_tree({0, 2, 1}));  // root plus a detached cycle
    CHECK_FALSE(is_tree({0, 7}));     // head out of range

    for (std::size_t n = 1; n <= 5; ++n) {
        std::size_t count = 0;
        for_each_assignment(n, [&](const sizes& h) {
            const bool t = is_tree(h);
            REQUIRE(t == ref_is_tree(h));
            count += t;
        });
        // Cayley: n^(n-1) rooted labelled trees.
        std::size_t cayley = 1;
        for (std::size_t i = 1; i < n; ++i) cayley *= n;
        CHECK(count == cayley);
    }
}

TEMPLATE_TEST_CASE("argmax_heads: direct loop, lowest index on ties", "[decode][argmax]", float,
                   double)
{
    using T = TestType;
    std::mt19937 rng(3);
    for (int iter = 0; iter < 200; ++iter) {
        const std::size_t n = static_cast<std::size_t>(iter % 25);
        const auto s = random_scores<T>(rng, n, iter % 5);
        sizes expect(n);
        for (std::size_t m = 0; m < n; ++m) {
            std::size_t b = 0;
            for (std::size_t l = 0; l < n; ++l) {
                if (s[m * n + l] > s[m * n + b]) b = l;
            }
            expect[m] = b;
        }
        CHECK(argmax_heads(s.data(), n, n) == expect);
    }
    const std::vector<T> zeros(16, T(0));
    CHECK(argmax_heads(zeros.data(), 4, 4) == sizes{0, 0, 0, 0});
    const std::vector<T> two_max{1, 3, 3, 0, 2, 2, 2, 2, 9};
    CHECK(argmax_heads(two_max.data(), 3, 3) == sizes{1, 1, 2});
    CHECK(argmax_heads(zeros.data(), 0, 0).empty());
}

TEMPLATE_TEST_CASE("mst_heads: optimal against brute force over all assignments, n <= 6",
                   "[decode][mst]", float, double)
{
    using T = TestType;
    std::mt19937 rng(2024);
    for (std::size_t n = 1; n <= 6; ++n) {
        const auto& trees = all_trees(n);
        for (int iter = 0; iter < 250; ++iter) {
            const int kind = iter % 5;
            const auto s = random_scores<T>(rng, n, kind);
            double best = neg_inf;
            const sizes* best_tree = &trees.front();
            for (const sizes& h : trees) {
                const double t = total(s, n, h);
                if (t > best) {
                    best = t;
                    best_tree = &h;
                }
            }
            const sizes got = mst_heads(s.data(), n, n);
            INFO("n " << n << " iter " << iter << " kind " << kind);
            REQUIRE(got.size() == n);
            REQUIRE(ref_is_tree(got));
            CHECK(is_tree(got));
            const double t = total(s, n, got);
            if (std::isinf(best)) {
                CHECK(t == best);
            } else {
                CHECK(t == Approx(best).epsilon(1e-9).margin(1e-9));
            }
            if (kind == 0 || kind == 3) {
                CHECK(got == *best_tree);  // continuous scores: the optimum is unique
            }
        }
    }
}

TEMPLATE_TEST_CASE("mst_heads: optimal against a naive Chu-Liu/Edmonds, n <= 30", "[decode][mst]",
                   float, double)
{
    using T = TestType;
    std::mt19937 rng(77);
    std::uniform_int_distribution<std::size_t> nd(7, 30);
    for (int iter = 0; iter < 120; ++iter) {
        const std::size_t n = nd(rng);
        const int kind = iter % 4;  // finite kinds only
        const auto s = random_scores<T>(rng, n, kind);
        const sizes got = mst_heads(s.data(), n, n);
        INFO("n " << n << " iter " << iter << " kind " << kind);
        REQUIRE(ref_is_tree(got));
        CHECK(total(s, n, got) == Approx(ref_single_root(s, n)).epsilon(1e-9).margin(1e-9));
    }
}

TEST_CASE("mst_heads: single root even when every token prefers the root", "[decode][mst]")
{
    const std::size_t n = 5;
    std::vector<double> s(n * n, 0.0);
    for (std::size_t m = 0; m < n; ++m) s[m * n + m] = 100.0 + static_cast<double>(m);
    CHECK(argmax_heads(s.data(), n, n) == sizes{0, 1, 2, 3, 4});
    const sizes h = mst_heads(s.data(), n, n);
    CHECK(is_tree(h));
    CHECK(h[4] == 4);  // best root; every other arc scores 0
}

TEST_CASE("mst_heads: small sizes and argument errors", "[decode][mst]")
{
    const std::vector<double> one{-3.0};
    CHECK(mst_heads(one.data(), 0, 0).empty());
    CHECK(mst_heads(one.data(), 1, 1) == sizes{0});
    CHECK(mst_heads(static_cast<const double*>(nullptr), 0, 0).empty());
    CHECK_THROWS_AS(mst_heads(static_cast<const double*>(nullptr), 2, 2), biaffine::error);
    const std::vector<double> four(4, 0.0);
    CHECK_THROWS_AS(mst_heads(four.data(), 2, 1), biaffine::shape_error);
    CHECK_THROWS_AS(argmax_heads(four.data(), 2, 1), biaffine::shape_error);
}

TEMPLATE_TEST_CASE("mst_heads: masked columns are never used as heads", "[decode][mst]", float,
                   double)
{
    using T = TestType;
    std::mt19937 rng(5);
    const std::size_t n = 12;
    for (const T mask : {T(-10000), -std::numeric_limits<T>::infinity()}) {
        for (int iter = 0; iter < 20; ++iter) {
            auto s = random_scores<T>(rng, n, 0);
            for (std::size_t m = 0; m < n; ++m) {
                s[m * n + 3] = mask;  // nobody may attach to 3, and 3 may not be the root
                s[m * n + 7] = mask;
            }
            const sizes h = mst_heads(s.data(), n, n);
            INFO("mask " << mask << " iter " << iter);
            REQUIRE(is_tree(h));
            for (std::size_t m = 0; m < n; ++m) {
                CHECK(h[m] != 3);
                CHECK(h[m] != 7);
            }
            CHECK(std::isfinite(total(s, n, h)));
        }
    }
    // A row that is entirely -inf still gets a head, and the rest stays finite.
    auto s = random_scores<double>(rng, 6, 0);
    for (std::size_t l = 0; l < 6; ++l) s[2 * 6 + l] = neg_inf;
    const sizes h = mst_heads(s.data(), 6, 6);
    CHECK(is_tree(h));
    for (std::size_t m = 0; m < 6; ++m) {
        if (m != 2) CHECK(std::isfinite(s[m * 6 + h[m]]));
    }
}

TEMPLATE_TEST_CASE("decode: NaN throws naming row and column", "[decode][nan]", float, double)
{
    using T = TestType;
    std::mt19937 rng(11);
    auto s = random_scores<T>(rng, 6, 0);
    s[2 * 6 + 4] = std::numeric_limits<T>::quiet_NaN();
    using Catch::Matchers::Contains;
    CHECK_THROWS_AS(mst_heads(s.data(), 6, 6), biaffine::error);
    CHECK_THROWS_WITH(mst_heads(s.data(), 6, 6),
                      Contains("row (dependent) 2") && Contains("column (head) 4"));
    CHECK_THROWS_WITH(argmax_heads(s.data(), 6, 6),
                      Contains("row (dependent) 2") && Contains("column (head) 4"));

    auto d = random_scores<T>(rng, 6, 0);
    d[5 * 6 + 5] = std::numeric_limits<T>::quiet_NaN();  // on the diagonal (root score)
    CHECK_THROWS_WITH(mst_heads(d.data(), 6, 6),
                      Contains("row (dependent) 5") && Contains("column (head) 5"));
    const std::vector<T> one{std::numeric_limits<T>::quiet_NaN()};
    CHECK_THROWS_AS(mst_heads(one.data(), 1, 1), biaffine::error);
}

TEST_CASE("decode: row_stride, xtensor and Eigen overloads agree", "[decode][overloads]")
{
    std::mt19937 rng(8);
    const std::size_t n = 9, stride = 13;
    const auto s = random_scores<double>(rng, n, 0);
    std::vector<double> padded(n * stride, 1e9);  // padding would win if it were read
    xt::xtensor<double, 2> x = xt::zeros<double>({n, n});
#ifdef BIAFFINE_TEST_EIGEN
    Eigen::MatrixXd e(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));  // col-major
#endif
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            padded[m * stride + l] = s[m * n + l];
            x(m, l) = s[m * n + l];
#ifdef BIAFFINE_TEST_EIGEN
            e(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(l)) = s[m * n + l];
#endif
        }
    }
    const sizes mst = mst_heads(s.data(), n, n);
    const sizes arg = argmax_heads(s.data(), n, n);
    CHECK(mst_heads(padded.data(), n, stride) == mst);
    CHECK(argmax_heads(padded.data(), n, stride) == arg);
    CHECK(mst_heads(x) == mst);
    CHECK(argmax_heads(x) == arg);
    CHECK(mst_heads(xt::eval(x * 2.0 + 1.0)) == mst);
    CHECK(mst_heads(x * 2.0 + 1.0) == mst);  // lazy expression, read in place
#ifdef BIAFFINE_TEST_EIGEN
    CHECK(mst_heads(e) == mst);
    CHECK(argmax_heads(e) == arg);
#endif

    xt::xtensor<double, 2> rect = xt::zeros<double>({3, 4});
    xt::xarray<double> cube = xt::zeros<double>({2, 2, 2});
    CHECK_THROWS_AS(mst_heads(rect), biaffine::shape_error);
    CHECK_THROWS_AS(argmax_heads(cube), biaffine::shape_error);
#ifdef BIAFFINE_TEST_EIGEN
    CHECK_THROWS_AS(mst_heads(Eigen::MatrixXd(2, 3)), biaffine::shape_error);
#endif
}

TEST_CASE("mst_heads: 1000 tokens decode to an optimal-looking tree quickly", "[decode][slow]")
{
    const std::size_t n = 1000;
    std::mt19937 rng(1);
    std::normal_distribution<double> nd(0, 1);

    // Several shapes: random, hierarchical pairs (log-depth nested 2-cycles),
    // one big cycle, all ties, root-hungry.
    std::vector<std::vector<double>> cases(5, std::vector<double>(n * n));
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            const double noise = 1e-3 * nd(rng);
            cases[0][m * n + l] = nd(rng);
            std::size_t x = m ^ l, level = 0;
            while (x != 0) {
                x >>= 1;
                ++level;
            }
            cases[1][m * n + l] = (m == l ? -20.0 : -static_cast<double>(level)) + noise;
            cases[2][m * n + l] = (l == (m + 1) % n ? 5.0 : 0.0) + noise;
            cases[3][m * n + l] = 0.0;
            cases[4][m * n + l] = (m == l ? 10.0 : 0.0) + noise;
        }
    }
    for (std::size_t c = 0; c < cases.size(); ++c) {
        const auto& s = cases[c];
        const auto t0 = std::chrono::steady_clock::now();
        const sizes h = mst_heads(s.data(), n, n);
        const double dt = seconds_since(t0);
        INFO("case " << c << ": " << dt << " s");
        REQUIRE(ref_is_tree(h));

        // Upper bound: no tree beats the per-row argmax.
        const double t = total(s, n, h);
        CHECK(t <= total(s, n, argmax_heads(s.data(), n, n)) + 1e-9);
        // Local optimality: moving one non-root token under another head that
        // is not its descendant keeps a tree and must not raise the score.
        std::uniform_int_distribution<std::size_t> pick(0, n - 1);
        int tried = 0;
        for (int k = 0; k < 20000 && tried < 3000; ++k) {
            const std::size_t m = pick(rng), l = pick(rng);
            if (h[m] == m || l == m || l == h[m]) continue;
            std::size_t v = l;
            while (v != m && h[v] != v) v = h[v];
            if (v == m) continue;  // l is in m's subtree
            ++tried;
            CHECK(s[m * n + l] <= s[m * n + h[m]] + 1e-12);
        }
    }
}
