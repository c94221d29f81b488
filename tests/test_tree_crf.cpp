// Tests for biaffine/tree_crf.hpp: log Z and every arc marginal against brute
// force over every one-root tree (n <= 7; the non-projective and projective
// sets enumerated apart, sums in long double) on random, trained-magnitude
// (|s| <= 50) and adversarial scores (+-1e4, best heads on a cycle with weak
// root arcs); float scores; the loss's gradient by finite differences;
// partial annotation against brute force over the agreeing trees; bad gold;
// MBR against brute force over the trees' summed marginals; n = 500.
//
// BIAFFINE_TEST_SCALE (default 1; the sanitizer run uses 0.25) scales the
// repetition counts of the heavy loops.
#include <catch2/catch.hpp>

#include "test_scale.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "biaffine/tree_crf.hpp"

namespace {

using biaffine::tree_kind;
using tree_list = std::vector<std::vector<std::size_t>>;


// One root, every token reaches it within n steps (written apart from the
// library's checks).
bool brute_is_tree(const std::vector<std::size_t>& h)
{
    const std::size_t n = h.size();
    std::size_t roots = 0;
    for (std::size_t i = 0; i < n; ++i) roots += h[i] == i;
    if (roots != 1) return false;
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t v = i, steps = 0;
        while (h[v] != v && steps <= n) {
            v = h[v];
            ++steps;
        }
        if (h[v] != v) return false;
    }
    return true;
}

bool descends(const std::vector<std::size_t>& h, std::size_t k, std::size_t a)
{
    for (std::size_t v = k;; v = h[v]) {
        if (v == a) return true;
        if (h[v] == v) return false;
    }
}

// Projective by the definition: for every arc h -> d, each token strictly
// between them descends from h; the root's arc comes from before token 0,
// so every token before the root descends from it (always true in a tree).
bool brute_is_projective(const std::vector<std::size_t>& h)
{
    for (std::size_t d = 0; d < h.size(); ++d) {
        if (h[d] == d) continue;
        const std::size_t lo = std::min(d, h[d]), hi = std::max(d, h[d]);
        for (std::size_t k = lo + 1; k < hi; ++k) {
            if (!descends(h, k, h[d])) return false;
        }
    }
    return true;
}

// Every one-root tree of n tokens (all n^n head vectors, filtered).
const tree_list& all_trees(std::size_t n, tree_kind kind)
{
    static std::vector<tree_list> cache[2];
    auto& c = cache[kind == tree_kind::projective ? 1 : 0];
    if (c.size() <= n) c.resize(n + 1);
    if (c[n].empty() && n > 0) {
        std::vector<std::size_t> h(n, 0);
        for (;;) {
            if (brute_is_tree(h) && (kind == tree_kind::non_projective || brute_is_projective(h))) c[n].push_back(h);
            std::size_t i = 0;
            while (i < n && ++h[i] == n) h[i++] = 0;
            if (i == n) break;
        }
    }
    return c[n];
}

struct brute_result {
    long double log_z = 0;
    std::vector<long double> mu;  // [n, n]
};

// log-sum-exp over the trees (filtered by `keep`) in long double.
template <class Keep>
brute_result brute_force(const std::vector<double>& s, std::size_t n, tree_kind kind, const Keep& keep)
{
    const auto& trees = all_trees(n, kind);
    std::vector<long double> score;
    long double mx = -std::numeric_limits<long double>::infinity();
    for (const auto& t : trees) {
        long double v = 0;
        for (std::size_t m = 0; m < n; ++m) v += static_cast<long double>(s[m * n + t[m]]);
        if (!keep(t)) v = -std::numeric_limits<long double>::infinity();
        score.push_back(v);
        mx = std::max(mx, v);
    }
    brute_result r;
    r.mu.assign(n * n, 0.0L);
    long double z = 0;
    for (std::size_t i = 0; i < trees.size(); ++i) {
        const long double p = std::exp(score[i] - mx);
        z += p;
        for (std::size_t m = 0; m < n; ++m) r.mu[m * n + trees[i][m]] += p;
    }
    for (auto& x : r.mu) x /= z;
    r.log_z = mx + std::log(z);
    return r;
}

brute_result brute_force(const std::vector<double>& s, std::size_t n, tree_kind kind)
{
    return brute_force(s, n, kind, [](const std::vector<std::size_t>&) { return true; });
}

biaffine::score_view<const double> view_of(const std::vector<double>& s, std::size_t n)
{
    return {s.data(), n, 1, static_cast<std::ptrdiff_t>(n)};
}

struct crf_out {
    double log_z = 0;
    std::vector<double> mu;
};

crf_out run_crf(const std::vector<double>& s, std::size_t n, tree_kind kind)
{
    crf_out o;
    o.mu.assign(n * n, -1.0);
    o.log_z = biaffine::tree_marginals(view_of(s, n),
                                       biaffine::score_view<double>{o.mu.data(), n, 1, static_cast<std::ptrdiff_t>(n)},
                                       kind);
    return o;
}

// log Z within `rel` relative (absolute below 1) and every marginal within
// `abs` of brute force; returns the largest marginal error.
double check_against_brute(const std::vector<double>& s, std::size_t n, tree_kind kind, const crf_out& o, double rel,
                           double abs)
{
    const brute_result b = brute_force(s, n, kind);
    const double bz = static_cast<double>(b.log_z);
    INFO("n = " << n << ", " << (kind == tree_kind::projective ? "projective" : "non-projective") << ", log Z "
                << o.log_z << " vs brute force " << bz);
    CHECK(std::fabs(o.log_z - bz) <= rel * std::max(1.0, std::fabs(bz)));
    double worst = 0;
    for (std::size_t i = 0; i < n * n; ++i) worst = std::max(worst, std::fabs(o.mu[i] - static_cast<double>(b.mu[i])));
    CHECK(worst <= abs);
    return worst;
}

std::vector<double> random_scores(std::size_t n, std::mt19937& rng, double lo, double hi)
{
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> s(n * n);
    for (double& x : s) x = u(rng);
    return s;
}

// Every token's best head lies on a cycle 0 -> 1 -> ... -> n-1 -> 0 (token i
// attaches to i - 1, token 0 to n - 1) with score `big`; every other arc,
// root arcs included, is -big plus noise: a plain Laplacian cancels here.
std::vector<double> cycle_weak_roots(std::size_t n, double big, std::mt19937& rng)
{
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> s(n * n);
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t h = 0; h < n; ++h) s[m * n + h] = -big + u(rng);
        s[m * n + (m + n - 1) % n] = big + u(rng);
    }
    return s;
}

// f() throws E whose message contains `part`.
template <class E, class F>
void crf_expect_throw(const F& f, const std::string& part)
{
    try {
        f();
        FAIL_CHECK("no exception; expected one containing: " << part);
    } catch (const E& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains(part));
    }
}

constexpr tree_kind crf_kinds[] = {tree_kind::non_projective, tree_kind::projective};

}  // namespace

TEST_CASE("tree CRF: log Z and marginals equal brute force on random and trained-magnitude scores", "[tree_crf]")
{
    std::mt19937 rng(5);
    for (tree_kind kind : crf_kinds) {
        for (std::size_t n = 1; n <= 7; ++n) {
            const int reps = biaffine_test::scaled(n <= 5 ? 20 : 4);
            for (int r = 0; r < reps; ++r) {
                for (double mag : {1.0, 5.0, 50.0}) {
                    const auto s = random_scores(n, rng, -mag, mag);
                    check_against_brute(s, n, kind, run_crf(s, n, kind), 1e-12, 1e-10);
                }
            }
        }
    }
}

TEST_CASE("tree CRF: adversarial scores are exact or refused, never wrong", "[tree_crf]")
{
    std::mt19937 rng(11);
    int refused = 0, solved = 0;
    const auto attempt = [&](const std::vector<double>& s, std::size_t n, tree_kind kind) {
        crf_out o;
        try {
            o = run_crf(s, n, kind);
        } catch (const std::domain_error& e) {
            // Only the non-projective solver may refuse, and it says why.
            CHECK(kind == tree_kind::non_projective);
            CHECK(std::string(e.what()).find("beyond the non-projective solver's range") != std::string::npos);
            ++refused;
            return;
        }
        ++solved;
        for (double x : o.mu) REQUIRE(std::isfinite(x));
        check_against_brute(s, n, kind, o, 1e-12, 1e-10);
    };
    for (tree_kind kind : crf_kinds) {
        for (std::size_t n = 2; n <= 7; ++n) {
            for (int r = 0; r < biaffine_test::scaled(6); ++r) {
                attempt(random_scores(n, rng, -1e4, 1e4), n, kind);
                for (double big : {1e4, 50.0, 20.0, 5.0}) attempt(cycle_weak_roots(n, big, rng), n, kind);
                // Root-hungry and root-starved rows at +-1e4.
                auto s = random_scores(n, rng, -1.0, 1.0);
                for (std::size_t m = 0; m < n; ++m) s[m * n + m] += (r % 2 == 0 ? 1e4 : -1e4);
                attempt(s, n, kind);
            }
        }
    }
    INFO("solved " << solved << ", refused " << refused);
    CHECK(solved > 0);
}

// Long cycles with weak roots at 1e4, past brute force's reach: the trees
// that carry the mass are the n chains that break the cycle at one root (any
// other weak arc costs ~2e4 nats, a factor that is 0 in double). So log Z =
// logsumexp over z of s(z, z) + the cycle arcs of the others, and the root's
// marginals are those chains' shares.
// The solvers' exp against std::exp, bit for bit, on both sides of the
// bounds where Eigen's vectorised exp clamps (+-709.78) and double
// underflows (-745): 37 entries, so SIMD lanes and a scalar tail on every
// ISA. Eigen's exp in the solvers gave arcs at -1e4 a weight of ~1.4e-308
// instead of 0 in SIMD lanes only, and on AVX2 a log Z 1,378 nats off in the
// adversarial test above (rows of n <= 7 ran scalar on AVX-512).
TEST_CASE("tree CRF: the solvers' exp underflows as std::exp does, in every lane", "[tree_crf]")
{
    const double at[] = {-1e4, -1000.0, -800.0, -746.0, -745.0, -744.5, -720.0, -709.9, -709.78, -709.7, -700.0, -1.0, 0.0, 3.5};
    std::vector<double> v(37), want(37);
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = at[(i * 5) % std::size(at)];
        want[i] = std::exp(v[i]);
    }
    biaffine::detail::exp_in_place_exact(v.data(), v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        INFO("exp(" << at[(i * 5) % std::size(at)] << ") at " << i);
        CHECK(v[i] == want[i]);
    }
}

TEST_CASE("tree CRF: long cycles with weak roots at 1e4 against the chains that carry the mass", "[tree_crf]")
{
    // Non-projective only: the chains that wrap around the cycle cross.
    // Refusals are allowed, but not for every size: the test must compare.
    std::mt19937 rng(23);
    int solved = 0;
    for (std::size_t n : {8, 9, 16, 33}) {
        const auto s = cycle_weak_roots(n, 1e4, rng);
        std::vector<long double> chain(n);
        long double mx = -std::numeric_limits<long double>::infinity();
        for (std::size_t z = 0; z < n; ++z) {
            long double t = s[z * n + z];
            for (std::size_t m = 0; m < n; ++m) {
                if (m != z) t += s[m * n + (m + n - 1) % n];
            }
            chain[z] = t;
            mx = std::max(mx, t);
        }
        long double sum = 0;
        for (long double t : chain) sum += std::exp(t - mx);
        const double want = static_cast<double>(mx + std::log(sum));
        INFO("n = " << n);
        try {
            const crf_out o = run_crf(s, n, tree_kind::non_projective);
            ++solved;
            CHECK(std::fabs(o.log_z - want) <= 1e-12 * std::fabs(want));
            for (std::size_t z = 0; z < n; ++z) {
                const double p = static_cast<double>(std::exp(chain[z] - mx) / sum);
                CHECK(std::fabs(o.mu[z * n + z] - p) <= 1e-10);
            }
        } catch (const std::domain_error& e) {
            CHECK(std::string(e.what()).find("beyond the non-projective solver's range") != std::string::npos);
        }
    }
    CHECK(solved > 0);
}

TEST_CASE("tree CRF: float scores", "[tree_crf]")
{
    std::mt19937 rng(17);
    for (tree_kind kind : crf_kinds) {
        for (std::size_t n = 1; n <= 7; ++n) {
            std::vector<float> f(n * n);
            std::normal_distribution<float> nd(0.0f, 3.0f);
            for (float& x : f) x = nd(rng);
            const std::vector<double> d(f.begin(), f.end());
            std::vector<float> mu(n * n);
            const double log_z = biaffine::tree_marginals(
                biaffine::score_view<const float>{f.data(), n, 1, static_cast<std::ptrdiff_t>(n)},
                biaffine::score_view<float>{mu.data(), n, 1, static_cast<std::ptrdiff_t>(n)}, kind);
            crf_out o{log_z, std::vector<double>(mu.begin(), mu.end())};
            check_against_brute(d, n, kind, o, 1e-5, 1e-5);
            CHECK(biaffine::tree_log_partition(
                      biaffine::score_view<const float>{f.data(), n, 1, static_cast<std::ptrdiff_t>(n)}, kind) ==
                  log_z);
        }
    }
}

TEST_CASE("tree CRF: padded views and n = 0", "[tree_crf]")
{
    std::mt19937 rng(3);
    const std::size_t n = 5, stride = 8;
    const auto s = random_scores(n, rng, -3, 3);
    std::vector<double> padded(n * stride, 1e300), mu(n * stride, 7.0);
    for (std::size_t m = 0; m < n; ++m) std::copy(s.begin() + m * n, s.begin() + (m + 1) * n, padded.begin() + m * stride);
    for (tree_kind kind : crf_kinds) {
        const double log_z = biaffine::tree_marginals(biaffine::score_view<const double>{padded.data(), n, 1, 8},
                                                      biaffine::score_view<double>{mu.data(), n, 1, 8}, kind);
        crf_out o{log_z, {}};
        for (std::size_t m = 0; m < n; ++m) o.mu.insert(o.mu.end(), mu.begin() + m * stride, mu.begin() + m * stride + n);
        check_against_brute(s, n, kind, o, 1e-12, 1e-10);
        for (std::size_t m = 0; m < n; ++m) CHECK(mu[m * stride + n] == 7.0);  // padding untouched
        CHECK(biaffine::tree_log_partition(biaffine::score_view<const double>{nullptr, 0, 1, 0}, kind) == 0.0);
    }
}

TEST_CASE("tree CRF: n = 500 stays finite, rows sum to 1", "[tree_crf]")
{
    std::mt19937 rng(23);
    const std::size_t n = 500;
    std::vector<double> s(n * n);
    std::normal_distribution<double> nd(0.0, 2.0);
    for (double& x : s) x = nd(rng);
    for (tree_kind kind : crf_kinds) {
        const crf_out o = run_crf(s, n, kind);
        REQUIRE(std::isfinite(o.log_z));
        for (std::size_t m = 0; m < n; ++m) {
            double sum = 0;
            for (std::size_t h = 0; h < n; ++h) {
                REQUIRE(std::isfinite(o.mu[m * n + h]));
                sum += o.mu[m * n + h];
            }
            REQUIRE(std::fabs(sum - 1.0) <= 1e-9);
        }
        double roots = 0;
        for (std::size_t m = 0; m < n; ++m) roots += o.mu[m * n + m];
        CHECK(std::fabs(roots - 1.0) <= 1e-9);  // exactly one root
    }
}

TEST_CASE("tree CRF loss: gradient by finite differences, full and partial gold", "[tree_crf]")
{
    std::mt19937 rng(29);
    const std::size_t n = 5;
    // A projective gold tree (a chain to the right, root 0) and a partial one.
    const std::vector<int> full = {0, 0, 1, 2, 3};
    const std::vector<int> partial = {-1, 0, -1, 2, -1};
    for (tree_kind kind : crf_kinds) {
        for (const auto& gold : {full, partial}) {
            auto s = random_scores(n, rng, -2, 2);
            std::vector<double> grad(n * n);
            const auto loss_at = [&](const std::vector<double>& x) {
                std::vector<double> g(n * n);
                return biaffine::tree_crf_loss<double>(view_of(x, n), gold,
                                                       biaffine::score_view<double>{g.data(), n, 1, 5}, kind, 0.5);
            };
            biaffine::tree_crf_loss<double>(view_of(s, n), gold, biaffine::score_view<double>{grad.data(), n, 1, 5},
                                            kind, 0.5);
            const double eps = 1e-5;
            for (std::size_t i = 0; i < n * n; ++i) {
                auto p = s, q = s;
                p[i] += eps;
                q[i] -= eps;
                const double fd = (loss_at(p) - loss_at(q)) / (2 * eps);
                INFO("cell " << i);
                CHECK(std::fabs(fd - grad[i]) <= 1e-7);
            }
        }
    }
}

TEST_CASE("tree CRF loss: equals brute force over the agreeing trees; all known, none known", "[tree_crf]")
{
    std::mt19937 rng(31);
    for (tree_kind kind : crf_kinds) {
        for (std::size_t n = 1; n <= 6; ++n) {
            const auto s = random_scores(n, rng, -4, 4);
            const brute_result all = brute_force(s, n, kind);
            // A gold tree from the enumeration, then masks of it.
            const auto& trees = all_trees(n, kind);
            const auto& tree = trees[static_cast<std::size_t>(rng() % trees.size())];
            for (unsigned mask = 0; mask < (1u << n); mask += 1 + (n > 4 ? 3 : 0)) {
                std::vector<long> gold(n, -1);
                for (std::size_t m = 0; m < n; ++m) {
                    if (mask & (1u << m)) gold[m] = static_cast<long>(tree[m]);
                }
                const brute_result agree = brute_force(s, n, kind, [&](const std::vector<std::size_t>& t) {
                    for (std::size_t m = 0; m < n; ++m) {
                        if (gold[m] >= 0 && t[m] != static_cast<std::size_t>(gold[m])) return false;
                    }
                    return true;
                });
                std::vector<double> grad(n * n, 99.0);
                const double loss = biaffine::tree_crf_loss<double>(
                    view_of(s, n), gold, biaffine::score_view<double>{grad.data(), n, 1, static_cast<std::ptrdiff_t>(n)},
                    kind);
                INFO("n " << n << ", mask " << mask);
                CHECK(std::fabs(loss - static_cast<double>(all.log_z - agree.log_z)) <= 1e-10);
                for (std::size_t i = 0; i < n * n; ++i) {
                    CHECK(std::fabs(grad[i] - static_cast<double>(all.mu[i] - agree.mu[i])) <= 1e-10);
                }
                if (mask == 0) {
                    CHECK(loss == 0.0);
                    for (double g : grad) CHECK(g == 0.0);
                }
            }
            // All known: log Z minus the gold tree's score, the direct way.
            std::vector<int> gold(tree.begin(), tree.end());
            std::vector<double> grad(n * n);
            double gold_score = 0;
            for (std::size_t m = 0; m < n; ++m) gold_score += s[m * n + tree[m]];
            const double loss = biaffine::tree_crf_loss<double>(
                view_of(s, n), gold, biaffine::score_view<double>{grad.data(), n, 1, static_cast<std::ptrdiff_t>(n)},
                kind);
            CHECK(std::fabs(loss - (static_cast<double>(all.log_z) - gold_score)) <= 1e-10);
        }
    }
}

TEST_CASE("tree CRF loss: bad gold names the split and token", "[tree_crf]")
{
    std::mt19937 rng(37);
    const std::size_t n = 4;
    const auto s = random_scores(n, rng, -1, 1);
    std::vector<double> grad(n * n);
    const biaffine::score_view<double> g{grad.data(), n, 1, 4};
    const auto loss = [&](const std::vector<int>& gold, tree_kind kind) {
        return biaffine::tree_crf_loss<double>(view_of(s, n), gold, g, kind);
    };
    crf_expect_throw<biaffine::head_error>([&] { loss({1, 2, 0, -1}, tree_kind::non_projective); }, "close a cycle through token");
    crf_expect_throw<biaffine::head_error>([&] { loss({0, -1, 2, -1}, tree_kind::non_projective); }, "tokens 0 and 2 are both gold roots");
    crf_expect_throw<biaffine::length_error>([&] { loss({0, 4, 0, 0}, tree_kind::projective); }, "token 1 has gold head 4");
    crf_expect_throw<biaffine::length_error>([&] { loss({0, -2, 0, 0}, tree_kind::projective); }, "token 1 has gold head -2");
    // 0 -> 2, 1 -> 3 cross: fine without projectivity, an error with it.
    CHECK_NOTHROW(loss({0, 3, 0, 0}, tree_kind::non_projective));
    crf_expect_throw<biaffine::head_error>([&] { loss({0, 3, 0, 0}, tree_kind::projective); }, "not projective");
    // Partial gold no projective tree agrees with.
    crf_expect_throw<biaffine::head_error>([&] { loss({0, 3, 0, -1}, tree_kind::projective); }, "no projective tree");
    // The list form names the split.
    std::vector<biaffine::score_tensor<double>> Y(2, biaffine::score_tensor<double>::from_shape({n, n}));
    std::copy(s.begin(), s.end(), Y[0].begin());
    std::copy(s.begin(), s.end(), Y[1].begin());
    const std::vector<std::vector<int>> golds = {{0, 0, 1, 2}, {1, 0, 3, 2}};
    crf_expect_throw<biaffine::head_error>([&] { biaffine::tree_crf_loss<double>(Y, golds, tree_kind::non_projective); }, "split 1: tree_crf_loss: the gold heads close a cycle through token");
    const std::vector<std::vector<int>> good = {{0, 0, 1, 2}, {-1, -1, -1, -1}};
    const auto out = biaffine::tree_crf_loss<double>(Y, good, tree_kind::projective, 2.0);
    std::vector<double> g0(n * n);
    const double l0 = biaffine::tree_crf_loss<double>(view_of(s, n), good[0],
                                                      biaffine::score_view<double>{g0.data(), n, 1, 4},
                                                      tree_kind::projective, 2.0);
    CHECK(out.first == l0);
    REQUIRE(out.second.size() == 2);
    for (std::size_t i = 0; i < n * n; ++i) CHECK(out.second[0].data()[i] == g0[i]);
}

TEST_CASE("tree CRF: bad scores", "[tree_crf]")
{
    std::vector<double> s(9, 0.0), mu(9);
    const biaffine::score_view<double> out{mu.data(), 3, 1, 3};
    for (tree_kind kind : crf_kinds) {
        s[5] = std::nan("");
        crf_expect_throw<biaffine::error>([&] { biaffine::tree_marginals(view_of(s, 3), out, kind); }, "NaN at row (dependent) 1, column (head) 2");
        s[5] = std::numeric_limits<double>::infinity();
        crf_expect_throw<biaffine::error>([&] { biaffine::tree_marginals(view_of(s, 3), out, kind); }, "+inf at row (dependent) 1, column (head) 2");
        std::fill(s.begin(), s.end(), -std::numeric_limits<double>::infinity());
        crf_expect_throw<std::domain_error>([&] { biaffine::tree_log_partition(view_of(s, 3), kind); }, "tree has a finite score");
        std::fill(s.begin(), s.end(), 0.0);
        CHECK_THROWS_AS(biaffine::tree_marginals(view_of(s, 3), biaffine::score_view<double>{mu.data(), 2, 1, 3}, kind),
                        biaffine::shape_error);
        CHECK_THROWS_AS(biaffine::tree_log_partition(biaffine::score_view<const double>{s.data(), 3, 1, 2}, kind),
                        biaffine::shape_error);
    }
    // -inf masks: only the allowed arcs carry mass.
    std::vector<double> m(9, -std::numeric_limits<double>::infinity());
    m[0] = 0.0;         // token 0 root
    m[3 + 0] = 1.0;     // 1 <- 0
    m[6 + 1] = 2.0;     // 2 <- 1
    m[6 + 0] = 2.0;     // 2 <- 0
    for (tree_kind kind : crf_kinds) check_against_brute(m, 3, kind, run_crf(m, 3, kind), 1e-12, 1e-10);
}

TEST_CASE("mbr_heads: maximises the summed marginals, differs from MST on raw scores", "[tree_crf]")
{
    // Seeded random matrices: MBR's tree must maximise the summed marginals
    // (brute force) and differ from the raw-score tree somewhere.
    int differ = 0;
    std::mt19937 rng(41);
    for (tree_kind kind : crf_kinds) {
        for (int r = 0; r < biaffine_test::scaled(300); ++r) {
            const std::size_t n = 3 + static_cast<std::size_t>(r % 4);
            const auto s = random_scores(n, rng, -2, 2);
            const auto mbr = biaffine::mbr_heads(view_of(s, n), kind);
            const auto raw = kind == tree_kind::projective ? biaffine::eisner_heads(s.data(), n, n)
                                                           : biaffine::mst_heads(s.data(), n, n);
            const brute_result b = brute_force(s, n, kind);
            long double best = -1, got = 0;
            for (const auto& t : all_trees(n, kind)) {
                long double v = 0;
                for (std::size_t m = 0; m < n; ++m) v += b.mu[m * n + t[m]];
                best = std::max(best, v);
            }
            for (std::size_t m = 0; m < n; ++m) got += b.mu[m * n + mbr[m]];
            CHECK(std::fabs(static_cast<double>(best - got)) <= 1e-12);
            CHECK(biaffine::is_tree(mbr));
            differ += mbr != raw;
        }
    }
    CHECK(differ > 0);
}

TEST_CASE("tree CRF: the projective solver's linear and log-domain paths agree", "[tree_crf]")
{
    // The linear path serves most splits; the log domain the ones out of its
    // range. On scores both accept, they must give the same numbers.
    std::mt19937 rng(43);
    for (std::size_t n : {1u, 2u, 5u, 17u, 40u}) {
        const auto s = random_scores(n, rng, -8, 8);
        std::vector<double> a(n * n), b(n * n);
        double lin = 0;
        REQUIRE(biaffine::detail::inside_outside_linear(n, s.data(), a.data(), lin));
        const double in_log = biaffine::detail::inside_outside_log(n, s.data(), b.data());
        CHECK(std::fabs(lin - in_log) <= 1e-12 * std::max(1.0, std::fabs(in_log)));
        for (std::size_t i = 0; i < n * n; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-12);
    }
    // Out of the linear range (a root arc 1e4 below the rest): refused there,
    // and the log domain still matches brute force.
    auto s = random_scores(4, rng, -1, 1);
    for (std::size_t m = 0; m < 4; ++m) s[m * 4 + m] = -1e4;
    std::vector<double> a(16);
    double lin = 0;
    CHECK_FALSE(biaffine::detail::inside_outside_linear(4, s.data(), a.data(), lin));
    check_against_brute(s, 4, tree_kind::projective, run_crf(s, 4, tree_kind::projective), 1e-12, 1e-10);
}
