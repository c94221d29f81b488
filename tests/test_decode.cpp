// Tests for biaffine/decode.hpp: argmax against a direct loop; MST against
// brute force over every head assignment (n <= 7, every score kind: uniform,
// ties, large masks, root-hungry, -inf masks, large magnitudes, +-inf), an
// independent naive Chu-Liu/Edmonds (try every root, n <= 30) and the earlier
// implementation (reference/reference_mst.hpp) on thousands of matrices, n = 1..300;
// Eisner against brute force over every projective tree (n <= 8, enumerated
// recursively and cross-checked by filtering all trees) and against mst_heads
// where the best tree is projective; masking, NaN, overloads, decoding from two
// threads, and 1000-token timings.
//
// BIAFFINE_TEST_SCALE (default 1; the sanitizer run uses 0.25) scales the
// repetition counts of the heavy loops.
#include <catch2/catch.hpp>

#include "test_scale.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#if __has_include(<Eigen/Core>)
#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#define BIAFFINE_TEST_EIGEN 1
#endif
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "biaffine/decode.hpp"
#include "reference_mst.hpp"

using biaffine::argmax_heads;
using biaffine::eisner_heads;
using biaffine::is_tree;
using biaffine::mst_heads;
using sizes = std::vector<std::size_t>;

namespace {

// Timing is reported (INFO), never asserted: speed is the benches' job.

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

using biaffine_test::scaled;

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
// 3: root-hungry diagonal, 4: -inf masks, 5: large magnitudes (|x| up to
// 1e12, with small ones mixed in), 6: +inf and -inf (integers otherwise, ties).
constexpr int n_kinds = 7;

template <class T>
std::vector<T> random_scores(std::mt19937& rng, std::size_t n, int kind)
{
    std::uniform_real_distribution<T> u(-1, 1);
    std::uniform_int_distribution<int> small(-2, 2);
    std::uniform_int_distribution<int> pct(0, 99);
    std::uniform_int_distribution<int> expo(0, 12);
    std::vector<T> s(n * n);
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            T& x = s[m * n + l];
            x = (kind == 1 || kind == 6) ? static_cast<T>(small(rng)) : u(rng);
            if (kind == 2 && pct(rng) < 25) x = T(-10000);
            if (kind == 3 && m == l) x += T(5);
            if (kind == 4 && pct(rng) < 25) x = -std::numeric_limits<T>::infinity();
            if (kind == 5) x *= static_cast<T>(std::pow(10.0, expo(rng)));
            if (kind == 6) {
                const int p = pct(rng);
                if (p < 20) x = -std::numeric_limits<T>::infinity();
                else if (p < 25) x = std::numeric_limits<T>::infinity();
            }
        }
    }
    return s;
}

// (tier, finite sum) of a head assignment, the order the decoders maximise:
// +1 per +inf arc, -1 per -inf arc, then the finite scores' sum.
template <class T>
std::pair<long, double> weight_of(const std::vector<T>& s, std::size_t n, const sizes& h)
{
    long tier = 0;
    double sum = 0;
    for (std::size_t m = 0; m < n; ++m) {
        const double v = static_cast<double>(s[m * n + h[m]]);
        if (std::isinf(v)) tier += v > 0 ? 1 : -1;
        else sum += v;
    }
    return {tier, sum};
}

// Best weight over `trees` and the first tree reaching it (exact sums in the
// comparison; equal-looking sums from different orders are not merged).
template <class T>
std::pair<std::pair<long, double>, const sizes*> best_of(const std::vector<T>& s, std::size_t n,
                                                         const std::vector<sizes>& trees)
{
    std::pair<long, double> best{std::numeric_limits<long>::min(), 0};
    const sizes* arg = nullptr;
    for (const sizes& h : trees) {
        const auto w = weight_of(s, n, h);
        if (arg == nullptr || best < w) {
            best = w;
            arg = &h;
        }
    }
    return {best, arg};
}

// Same tier, and sums equal up to rounding (different summation orders).
bool same_weight(const std::pair<long, double>& a, const std::pair<long, double>& b, double scale)
{
    return a.first == b.first && std::abs(a.second - b.second) <= 1e-9 * std::max(1.0, scale);
}

template <class T>
double magnitude(const std::vector<T>& s)
{
    double m = 0;
    for (T x : s) {
        if (std::isfinite(static_cast<double>(x))) m += std::abs(static_cast<double>(x));
    }
    return m;
}

// Independent projectivity check: for every arc h -> d (h != d), every token
// strictly between them descends from h. (The root's arc comes from before
// token 0 and covers only descendants of the root.) Assumes a tree.
bool ref_is_projective(const sizes& h)
{
    const std::size_t n = h.size();
    const auto descends = [&](std::size_t k, std::size_t a) {
        for (std::size_t steps = 0; steps <= n; ++steps) {
            if (k == a) return true;
            if (h[k] == k) return false;
            k = h[k];
        }
        return false;
    };
    for (std::size_t d = 0; d < n; ++d) {
        if (h[d] == d) continue;
        const std::size_t lo = std::min(d, h[d]), hi = std::max(d, h[d]);
        for (std::size_t k = lo + 1; k < hi; ++k) {
            if (!descends(k, h[d])) return false;
        }
    }
    return true;
}

// Every projective tree of n tokens, built recursively (not by Eisner's
// chart): a head h over the span [i, j] takes its left part [i, h) as a
// sequence of consecutive sub-spans, each a subtree whose head attaches to h,
// and likewise its right part (h, j].
void spans_as_children(std::size_t i, std::size_t j, std::size_t parent, sizes& h,
                       const std::function<void()>& done);

void subtree(std::size_t i, std::size_t j, std::size_t head, sizes& h, const std::function<void()>& done)
{
    // left part [i, head), then right part (head, j]
    spans_as_children(i, head, head, h, [&] { spans_as_children(head + 1, j + 1, head, h, done); });
}

// Covers [i, j) with consecutive subtrees whose heads attach to `parent`.
void spans_as_children(std::size_t i, std::size_t j, std::size_t parent, sizes& h,
                       const std::function<void()>& done)
{
    if (i == j) {
        done();
        return;
    }
    for (std::size_t k = i; k < j; ++k) {      // first sub-span [i, k]
        for (std::size_t c = i; c <= k; ++c) {  // its head
            h[c] = parent;
            subtree(i, k, c, h, [&] { spans_as_children(k + 1, j, parent, h, done); });
        }
    }
}

const std::vector<sizes>& all_projective_trees(std::size_t n)
{
    static std::vector<std::vector<sizes>> cache(9);
    if (cache[n].empty()) {
        sizes h(n, 0);
        for (std::size_t r = 0; r < n; ++r) {
            h[r] = r;
            subtree(0, n - 1, r, h, [&] { cache[n].push_back(h); });
        }
    }
    return cache[n];
}

// A random projective tree over [i, j] headed by a uniform token.
void random_projective(std::mt19937& rng, std::size_t i, std::size_t j, std::size_t parent, sizes& h)
{
    if (i > j) return;
    std::uniform_int_distribution<std::size_t> pick(i, j);
    const std::size_t head = pick(rng);
    h[head] = parent;
    // Cut each side into random consecutive blocks, each a subtree of head.
    std::uniform_int_distribution<int> coin(0, 2);
    for (const auto& side : {std::pair<std::size_t, std::size_t>{i, head}, {head + 1, j + 1}}) {
        std::size_t a = side.first;
        while (a < side.second) {
            std::size_t b = a;
            while (b + 1 < side.second && coin(rng) != 0) ++b;
            random_projective(rng, a, b, head, h);
            a = b + 1;
        }
    }
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

TEMPLATE_TEST_CASE("mst_heads: best (tier, sum) against brute force over all assignments, n <= 7, every kind",
                   "[decode][mst][brute]", float, double)
{
    using T = TestType;
    std::mt19937 rng(99);
    for (std::size_t n = 1; n <= 7; ++n) {
        const auto& trees = all_trees(n);
        const int reps = n == 7 ? scaled(6) : scaled(40);
        for (int kind = 0; kind < n_kinds; ++kind) {
            for (int iter = 0; iter < reps; ++iter) {
                const auto s = random_scores<T>(rng, n, kind);
                const auto [best, best_tree] = best_of(s, n, trees);
                const sizes got = mst_heads(s.data(), n, n);
                INFO("n " << n << " kind " << kind << " iter " << iter);
                REQUIRE(ref_is_tree(got));
                CHECK(same_weight(weight_of(s, n, got), best, magnitude(s)));
                if (kind == 0 || kind == 3) CHECK(got == *best_tree);  // unique optimum
            }
        }
    }
}

TEMPLATE_TEST_CASE("mst_heads: same trees as the earlier implementation, n = 1..300", "[decode][mst][reference]",
                   float, double)
{
    using T = TestType;
    std::mt19937 rng(4242);
    std::uniform_int_distribution<std::size_t> small_n(1, 40), large_n(41, 300);
    const int reps = scaled(1500);
    int same = 0;
    for (int iter = 0; iter < reps; ++iter) {
        const std::size_t n = iter % 10 == 9 ? large_n(rng) : small_n(rng);
        const int kind = iter % n_kinds;
        const auto s = random_scores<T>(rng, n, kind);
        const sizes got = mst_heads(s.data(), n, n);
        const sizes ref = biaffine_reference::reference_mst(s.data(), n, n);
        INFO("n " << n << " kind " << kind << " iter " << iter);
        REQUIRE(ref_is_tree(got));
        REQUIRE(ref_is_tree(ref));
        // Continuous scores: one optimum, so the same tree. Ties (integer
        // kinds, masks, infinities): an equal-weight tree.
        if (kind == 0 || kind == 3) CHECK(got == ref);
        CHECK(same_weight(weight_of(s, n, got), weight_of(s, n, ref), magnitude(s)));
        same += got == ref;
    }
    INFO("identical trees: " << same << " of " << reps);
    CHECK(same >= reps / 2);
}

TEST_CASE("mst_heads: a row holding only infinities of both signs, and +inf arcs", "[decode][mst]")
{
    const double inf = std::numeric_limits<double>::infinity();
    // Token 1 can only take the -inf arcs or the +inf one from token 2.
    std::vector<double> s{0, 1, 0,   //
                          -inf, -inf, inf,  //
                          5, 0, 0};
    const sizes h = mst_heads(s.data(), 3, 3);
    CHECK(is_tree(h));
    CHECK(h[1] == 2);  // the +inf arc is taken
    CHECK(weight_of(s, 3, h).first == 1);
    // All infinite: still a tree, with as many +inf arcs as possible.
    std::vector<double> all{-inf, inf, -inf, -inf, -inf, inf, inf, -inf, -inf};
    const sizes h2 = mst_heads(all.data(), 3, 3);
    CHECK(is_tree(h2));
    CHECK(weight_of(all, 3, h2) == best_of(all, 3, all_trees(3)).first);
}

TEST_CASE("mst_heads, eisner_heads: scores near the double range stay exact and in range", "[decode][huge]")
{
    // Reduced weights and chart sums of such scores would overflow a plain
    // double path; the decoders must still return optimal trees (n <= 5: the
    // brute-force sums of 5 terms of 3e307 still fit) and never crash.
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-3e307, 3e307);
    for (std::size_t n = 1; n <= 5; ++n) {
        for (int iter = 0; iter < scaled(40); ++iter) {
            std::vector<double> s(n * n);
            for (double& x : s) x = u(rng);
            INFO("n " << n << " iter " << iter);
            const sizes mst = mst_heads(s.data(), n, n);
            const sizes eis = eisner_heads(s.data(), n, n);
            REQUIRE(ref_is_tree(mst));
            REQUIRE(ref_is_tree(eis));
            CHECK(ref_is_projective(eis));
            CHECK(same_weight(weight_of(s, n, mst), best_of(s, n, all_trees(n)).first, magnitude(s)));
            CHECK(same_weight(weight_of(s, n, eis), best_of(s, n, all_projective_trees(n)).first, magnitude(s)));
        }
    }
    // Beyond that only validity can be asserted (sums overflow), for any n.
    const double big = std::numeric_limits<double>::max();
    for (std::size_t n : {6u, 17u, 40u}) {
        std::vector<double> s(n * n);
        std::uniform_int_distribution<int> sign(0, 2);
        for (double& x : s) x = sign(rng) == 0 ? -big : (sign(rng) == 1 ? big : u(rng));
        INFO("n " << n);
        CHECK(ref_is_tree(mst_heads(s.data(), n, n)));
        const sizes eis = eisner_heads(s.data(), n, n);
        CHECK(ref_is_tree(eis));
        CHECK(ref_is_projective(eis));
    }
}

TEST_CASE("eisner_heads: the recursive enumeration of projective trees is right", "[decode][eisner]")
{
    for (std::size_t n = 1; n <= 6; ++n) {
        std::vector<sizes> filtered;
        for (const sizes& h : all_trees(n)) {
            if (ref_is_projective(h)) filtered.push_back(h);
        }
        auto listed = all_projective_trees(n);
        std::sort(listed.begin(), listed.end());
        std::sort(filtered.begin(), filtered.end());
        INFO("n " << n);
        CHECK(listed == filtered);
        CHECK(std::adjacent_find(listed.begin(), listed.end()) == listed.end());
    }
    CHECK(all_projective_trees(3).size() == 7);  // 2 + 3 + 2 by root position
    for (const sizes& h : all_projective_trees(8)) {
        REQUIRE(ref_is_tree(h));
        REQUIRE(ref_is_projective(h));
    }
}

TEMPLATE_TEST_CASE("eisner_heads: best (tier, sum) against brute force over projective trees, n <= 8",
                   "[decode][eisner][brute]", float, double)
{
    using T = TestType;
    std::mt19937 rng(1234);
    for (std::size_t n = 1; n <= 8; ++n) {
        const auto& trees = all_projective_trees(n);
        const int reps = n == 8 ? scaled(5) : scaled(30);
        for (int kind = 0; kind < n_kinds; ++kind) {
            for (int iter = 0; iter < reps; ++iter) {
                const auto s = random_scores<T>(rng, n, kind);
                const auto [best, best_tree] = best_of(s, n, trees);
                const sizes got = eisner_heads(s.data(), n, n);
                INFO("n " << n << " kind " << kind << " iter " << iter);
                REQUIRE(ref_is_tree(got));
                CHECK(ref_is_projective(got));
                CHECK(same_weight(weight_of(s, n, got), best, magnitude(s)));
                if (kind == 0 || kind == 3) CHECK(got == *best_tree);
            }
        }
    }
}

TEMPLATE_TEST_CASE("eisner_heads: equals mst_heads when the best tree is projective", "[decode][eisner]", float,
                   double)
{
    using T = TestType;
    std::mt19937 rng(31);
    std::uniform_int_distribution<std::size_t> nd(1, 80);
    const int reps = scaled(200);
    for (int iter = 0; iter < reps; ++iter) {
        const std::size_t n = nd(rng);
        sizes tree(n, n);
        random_projective(rng, 0, n - 1, n, tree);
        for (std::size_t m = 0; m < n; ++m) {
            if (tree[m] == n) tree[m] = m;
        }
        REQUIRE(ref_is_tree(tree));
        REQUIRE(ref_is_projective(tree));
        auto s = random_scores<T>(rng, n, iter % 2 == 0 ? 0 : 3);
        for (std::size_t m = 0; m < n; ++m) s[m * n + tree[m]] += T(10);  // the planted tree wins
        const sizes mst = mst_heads(s.data(), n, n);
        const sizes eis = eisner_heads(s.data(), n, n);
        INFO("n " << n << " iter " << iter);
        CHECK(mst == tree);
        CHECK(eis == tree);
    }
    // On unplanted scores Eisner can only lose to the unrestricted MST.
    for (int iter = 0; iter < scaled(100); ++iter) {
        const std::size_t n = nd(rng);
        const auto s = random_scores<T>(rng, n, iter % n_kinds);
        const sizes eis = eisner_heads(s.data(), n, n);
        REQUIRE(ref_is_tree(eis));
        CHECK(ref_is_projective(eis));
        const auto we = weight_of(s, n, eis), wm = weight_of(s, n, mst_heads(s.data(), n, n));
        CHECK((we < wm || same_weight(we, wm, magnitude(s))));
    }
}

TEMPLATE_TEST_CASE("eisner_heads: small sizes, errors, NaN and overloads", "[decode][eisner]", float, double)
{
    using T = TestType;
    const std::vector<T> one{T(-3)};
    CHECK(eisner_heads(one.data(), 0, 0).empty());
    CHECK(eisner_heads(one.data(), 1, 1) == sizes{0});
    CHECK(eisner_heads(static_cast<const T*>(nullptr), 0, 0).empty());
    CHECK_THROWS_AS(eisner_heads(static_cast<const T*>(nullptr), 2, 2), biaffine::error);
    const std::vector<T> four(4, T(0));
    CHECK_THROWS_AS(eisner_heads(four.data(), 2, 1), biaffine::shape_error);
    const std::vector<T> nan1{std::numeric_limits<T>::quiet_NaN()};
    CHECK_THROWS_AS(eisner_heads(nan1.data(), 1, 1), biaffine::error);

    std::mt19937 rng(12);
    auto s = random_scores<T>(rng, 6, 0);
    s[3 * 6 + 1] = std::numeric_limits<T>::quiet_NaN();
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(eisner_heads(s.data(), 6, 6), Contains("eisner_heads") &&
                                                        Contains("row (dependent) 3") &&
                                                        Contains("column (head) 1"));

    const std::size_t n = 11, stride = 14;
    const auto d = random_scores<T>(rng, n, 0);
    std::vector<T> padded(n * stride, T(1e9));
    xt::xtensor<T, 2> x = xt::zeros<T>({n, n});
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            padded[m * stride + l] = d[m * n + l];
            x(m, l) = d[m * n + l];
        }
    }
    const sizes e = eisner_heads(d.data(), n, n);
    CHECK(eisner_heads(padded.data(), n, stride) == e);
    CHECK(eisner_heads(x) == e);
    CHECK(eisner_heads(x * T(2) + T(1)) == e);
#ifdef BIAFFINE_TEST_EIGEN
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> em(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) em(Eigen::Index(m), Eigen::Index(l)) = d[m * n + l];
    }
    CHECK(eisner_heads(em) == e);
#endif
    xt::xtensor<T, 2> rect = xt::zeros<T>({3, 4});
    CHECK_THROWS_AS(eisner_heads(rect), biaffine::shape_error);
    // Integer scores decode like their float values.
    std::vector<int> ints(n * n);
    std::vector<double> as_double(n * n);
    std::uniform_int_distribution<int> iv(-50, 50);
    for (std::size_t i = 0; i < n * n; ++i) as_double[i] = ints[i] = iv(rng);
    CHECK(eisner_heads(ints.data(), n, n) == eisner_heads(as_double.data(), n, n));
    CHECK(mst_heads(ints.data(), n, n) == mst_heads(as_double.data(), n, n));
    CHECK(argmax_heads(ints.data(), n, n) == argmax_heads(as_double.data(), n, n));
}

TEMPLATE_TEST_CASE("argmax_heads: vectorised rows, every length and NaN position", "[decode][argmax]", float,
                   double)
{
    using T = TestType;
    std::mt19937 rng(17);
    for (std::size_t n = 1; n <= 70; ++n) {
        for (int kind = 0; kind < n_kinds; ++kind) {
            const auto s = random_scores<T>(rng, n, kind);
            sizes expect(n);
            for (std::size_t m = 0; m < n; ++m) {
                std::size_t b = 0;
                for (std::size_t l = 0; l < n; ++l) {
                    if (s[m * n + l] > s[m * n + b]) b = l;
                }
                expect[m] = b;
            }
            INFO("n " << n << " kind " << kind);
            CHECK(argmax_heads(s.data(), n, n) == expect);
        }
        // A NaN anywhere in a row, even below the maximum, throws naming it.
        auto s = random_scores<T>(rng, n, 0);
        const std::size_t m = n / 2, l = (n * 7) % n;
        s[m * n + l] = std::numeric_limits<T>::quiet_NaN();
        using Catch::Matchers::Contains;
        INFO("n " << n);
        CHECK_THROWS_WITH(argmax_heads(s.data(), n, n),
                          Contains("row (dependent) " + std::to_string(m)) &&
                              Contains("column (head) " + std::to_string(l)));
        CHECK_THROWS_AS(mst_heads(s.data(), n, n), biaffine::error);
        CHECK_THROWS_AS(eisner_heads(s.data(), n, n), biaffine::error);
    }
    // Signed zeros tie: the first one wins.
    const std::vector<T> zeros{T(-0.0), T(0.0), T(-1)};
    CHECK(argmax_heads(zeros.data(), 1, 3) == sizes{0});
}

TEST_CASE("decode: two threads decoding at once get the single-thread results", "[decode][threads]")
{
    std::mt19937 rng(55);
    std::vector<std::vector<float>> mats;
    std::vector<std::size_t> ns;
    for (int i = 0; i < scaled(200); ++i) {
        const std::size_t n = 1 + static_cast<std::size_t>(rng() % 120);
        ns.push_back(n);
        mats.push_back(random_scores<float>(rng, n, i % n_kinds));
    }
    std::vector<sizes> mst(mats.size()), eis(mats.size());
    for (std::size_t i = 0; i < mats.size(); ++i) {
        mst[i] = mst_heads(mats[i].data(), ns[i], ns[i]);
        eis[i] = eisner_heads(mats[i].data(), ns[i], ns[i]);
    }
    std::vector<int> ok(2, 1);
    const auto work = [&](int id) {
        for (int rep = 0; rep < 3; ++rep) {
            for (std::size_t k = 0; k < mats.size(); ++k) {
                const std::size_t i = id == 0 ? k : mats.size() - 1 - k;  // different sizes at once
                if (mst_heads(mats[i].data(), ns[i], ns[i]) != mst[i]) ok[std::size_t(id)] = 0;
                if (eisner_heads(mats[i].data(), ns[i], ns[i]) != eis[i]) ok[std::size_t(id)] = 0;
            }
        }
    };
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    CHECK(ok[0] == 1);
    CHECK(ok[1] == 1);
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

TEST_CASE("decoders on a score_view: arc scores decode, a label scorer's view is refused", "[decode][view]")
{
    std::mt19937 gen(4);
    std::normal_distribution<double> d(0.0, 1.0);
    const std::size_t n = 9, stride = n + 2;
    std::vector<float> s(n * stride);
    for (float& x : s) x = static_cast<float>(d(gen));
    const biaffine::score_view<const float> v{s.data(), n, 1, static_cast<std::ptrdiff_t>(stride)};
    REQUIRE(mst_heads(v) == mst_heads(s.data(), n, stride));
    REQUIRE(argmax_heads(v) == argmax_heads(s.data(), n, stride));
    REQUIRE(eisner_heads(v) == eisner_heads(s.data(), n, stride));
    // Five labels: the pointer form cannot know; the view form says so.
    std::vector<float> lab(n * n * 5, 0.0f);
    const biaffine::score_view<const float> lv{lab.data(), n, 5, static_cast<std::ptrdiff_t>(n * 5)};
    REQUIRE_THROWS_AS(mst_heads(lv), biaffine::shape_error);
    REQUIRE_THROWS_WITH(argmax_heads(lv), Catch::Contains("argmax_heads: expected arc scores [n, n] (1 label)") &&
                                              Catch::Contains("labels_at_heads"));
    REQUIRE_THROWS_AS(eisner_heads(lv), biaffine::shape_error);
    const biaffine::score_view<const float> null_view{nullptr, 3, 1, 3};
    REQUIRE_THROWS_AS(mst_heads(null_view), biaffine::error);
    const biaffine::score_view<const float> short_rows{s.data(), n, 1, 1};
    REQUIRE_THROWS_AS(mst_heads(short_rows), biaffine::shape_error);
}

TEST_CASE("labels_at_heads: the best label at each given head, against a direct loop", "[decode][labels]")
{
    std::mt19937 gen(8);
    std::normal_distribution<double> d(0.0, 1.0);
    for (std::size_t n : {1u, 4u, 13u}) {
        for (std::size_t o : {1u, 3u, 40u}) {
            const std::size_t stride = n * o + 5;
            std::vector<double> s(n * stride);
            for (double& x : s) x = d(gen);
            std::vector<int> heads(n);
            for (std::size_t m = 0; m < n; ++m) heads[m] = static_cast<int>((m * 5 + 2) % n);
            const biaffine::score_view<const double> v{s.data(), n, o, static_cast<std::ptrdiff_t>(stride)};
            const auto got = biaffine::labels_at_heads(v, heads);
            REQUIRE(got.size() == n);
            for (std::size_t m = 0; m < n; ++m) {
                std::size_t best = 0;
                for (std::size_t k = 1; k < o; ++k) {
                    if (s[m * stride + heads[m] * o + k] > s[m * stride + heads[m] * o + best]) best = k;
                }
                REQUIRE(got[m] == best);
            }
        }
    }
    std::vector<float> s(2 * 2 * 3, 0.0f);
    const biaffine::score_view<const float> v{s.data(), 2, 3, 6};
    REQUIRE(biaffine::labels_at_heads(v, std::vector<int>{1, 1}) == std::vector<std::size_t>{0, 0});  // ties: lowest
    REQUIRE_THROWS_WITH(biaffine::labels_at_heads(v, std::vector<int>{0, 2}),
                        "labels_at_heads: token 1 has head 2, expected 0..1");
    REQUIRE_THROWS_AS(biaffine::labels_at_heads(v, std::vector<int>{0, -1}), biaffine::length_error);
    REQUIRE_THROWS_AS(biaffine::labels_at_heads(v, std::vector<int>{0}), biaffine::shape_error);
    s[1 * 6 + 0 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
    REQUIRE_THROWS_WITH(biaffine::labels_at_heads(v, std::vector<int>{0, 0}),
                        "labels_at_heads: score is NaN at token 1, label 2");
}

TEST_CASE("decoders and labels_at_heads on bfloat16 scores: the heads of the scores widened to float",
          "[decode][bfloat16]")
{
    using biaffine::bfloat16;
    std::mt19937 rng(23);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(7), std::size_t(40),
                          std::size_t(131)}) {
        INFO("n " << n);
        // Padded rows (stride n + 3): only the first n of each are read.
        const std::size_t stride = n + 3;
        std::vector<bfloat16> b(n * stride, bfloat16(std::numeric_limits<float>::quiet_NaN()));
        std::vector<float> f(n * n);
        for (std::size_t m = 0; m < n; ++m) {
            for (std::size_t l = 0; l < n; ++l) {
                b[m * stride + l] = bfloat16(nd(rng));  // 8 significant bits: ties happen
                f[m * n + l] = float(b[m * stride + l]);
            }
        }
        CHECK(argmax_heads(b.data(), n, stride) == argmax_heads(f.data(), n, n));
        CHECK(mst_heads(b.data(), n, stride) == mst_heads(f.data(), n, n));
        CHECK(eisner_heads(b.data(), n, stride) == eisner_heads(f.data(), n, n));
        const biaffine::score_view<const bfloat16> v{b.data(), n, 1, static_cast<std::ptrdiff_t>(stride)};
        CHECK(mst_heads(v) == mst_heads(f.data(), n, n));
        CHECK(is_tree(mst_heads(v)));
    }
    // Labels: [n, n, o] in bfloat16 against the widened floats.
    const std::size_t n = 9, o = 5;
    std::vector<bfloat16> lb(n * n * o);
    std::vector<float> lf(n * n * o);
    for (std::size_t i = 0; i < lb.size(); ++i) {
        lb[i] = bfloat16(nd(rng));
        lf[i] = float(lb[i]);
    }
    std::vector<std::size_t> heads(n);
    for (std::size_t m = 0; m < n; ++m) heads[m] = (m * 4 + 1) % n;
    const biaffine::score_view<const bfloat16> lv{lb.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
    const biaffine::score_view<const float> fv{lf.data(), n, o, static_cast<std::ptrdiff_t>(n * o)};
    CHECK(biaffine::labels_at_heads(lv, heads) == biaffine::labels_at_heads(fv, heads));
    // NaN in bfloat16 is reported where it is, as in float.
    std::vector<bfloat16> bad(36, bfloat16(1.0f));
    bad[3 * 6 + 1] = bfloat16(std::numeric_limits<float>::quiet_NaN());
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(mst_heads(bad.data(), 6, 6), Contains("row (dependent) 3") && Contains("column (head) 1"));
    CHECK_THROWS_WITH(eisner_heads(bad.data(), 6, 6), Contains("row (dependent) 3") && Contains("column (head) 1"));
    CHECK_THROWS_WITH(argmax_heads(bad.data(), 6, 6), Contains("row (dependent) 3") && Contains("column (head) 1"));
    lb[(2 * n + heads[2]) * o + 3] = bfloat16(std::numeric_limits<float>::quiet_NaN());
    CHECK_THROWS_WITH(biaffine::labels_at_heads(lv, heads), Contains("token 2") && Contains("label 3"));
}
