// Tests for biaffine/lazy_split.hpp: the spec vectors, NaN/tie rules, a naive
// recursive reference on random inputs, cap_split_lengths, and the 1M-token
// degenerate-depth documents.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "biaffine/lazy_split.hpp"

using biaffine::cap_split_lengths;
using biaffine::lazy_split;
using sizes = std::vector<std::size_t>;

namespace {

// Timing is reported (INFO), never asserted: speed is the benches' job.

// Independent reference: literal recursion with a linear scan per piece.
template <class T>
bool ref_less(T a, T b)
{
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
    return a < b;
}

template <class T>
void ref_split(const std::vector<T>& s, std::size_t b, std::size_t e, std::size_t max_len,
               sizes& out)
{
    if (e - b <= max_len) {
        if (e > b) out.push_back(e - b);
        return;
    }
    std::size_t k = b + 1;
    for (std::size_t i = b + 2; i < e; ++i) {
        if (ref_less(s[k], s[i])) k = i;
    }
    ref_split(s, b, k, max_len, out);
    ref_split(s, k, e, max_len, out);
}

template <class T>
sizes ref_lazy(const std::vector<T>& s, std::size_t max_len)
{
    sizes out;
    ref_split(s, 0, s.size(), max_len, out);
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEMPLATE_TEST_CASE("lazy_split: spec vectors", "[lazy_split]", float, double)
{
    using T = TestType;
    CHECK(lazy_split(std::vector<T>{0, 1, 2, 3, 4}, 2) == sizes{2, 1, 1, 1});
    CHECK(lazy_split(std::vector<T>{5, 4, 3, 2, 1}, 2) == sizes{1, 1, 1, 2});
    CHECK(lazy_split(std::vector<T>{0, 1, 0, 1, 0}, 2) == sizes{1, 2, 2});
    CHECK(lazy_split(std::vector<T>{1, 0, 1, 0, 1}, 2) == sizes{2, 2, 1});

    const std::vector<T> v{0, 1, 2, 3, 4};
    CHECK(lazy_split(v.data(), v.size(), 2) == sizes{2, 1, 1, 1});
    CHECK(lazy_split(v.data(), v.size(), 5) == sizes{5});
    CHECK(lazy_split(v.data(), v.size(), 100) == sizes{5});
    CHECK(lazy_split(v.data(), v.size(), 1) == sizes{1, 1, 1, 1, 1});
}

TEST_CASE("lazy_split: edge cases and errors", "[lazy_split]")
{
    const std::vector<double> empty;
    CHECK(lazy_split(empty, 3).empty());
    CHECK(lazy_split(static_cast<const double*>(nullptr), 0, 3).empty());
    CHECK(lazy_split(std::vector<double>{0.5}, 1) == sizes{1});

    CHECK_THROWS_AS(lazy_split(std::vector<double>{1, 2}, 0), biaffine::length_error);
    CHECK_THROWS_AS(lazy_split(empty, 0), biaffine::length_error);
    CHECK_THROWS_AS(lazy_split(static_cast<const float*>(nullptr), 3, 2), biaffine::error);
    CHECK_THROWS_AS(cap_split_lengths(sizes{1, 2}, 0), biaffine::length_error);
}

TEST_CASE("lazy_split: ties go to the earliest token, never the piece's first", "[lazy_split]")
{
    // All equal: every cut is right after the piece's first token.
    CHECK(lazy_split(std::vector<double>(5, 0.0), 2) == sizes{1, 1, 1, 2});
    // The first token's huge score is ignored inside its own piece.
    CHECK(lazy_split(std::vector<double>{100, 0, 0, 5, 0, 0}, 3) == sizes{3, 3});
    // Two equal maxima: the earlier one.
    CHECK(lazy_split(std::vector<double>{0, 0, 7, 0, 7, 0}, 4) == sizes{2, 4});
}

TEST_CASE("lazy_split: -inf and inf are ordered as numbers", "[lazy_split]")
{
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(lazy_split(std::vector<double>(5, -inf), 2) == sizes{1, 1, 1, 2});
    CHECK(lazy_split(std::vector<double>{0, -inf, 1, -inf, 0}, 2) == sizes{2, 2, 1});
    CHECK(lazy_split(std::vector<double>{0, inf, 1, 2}, 2) == sizes{1, 2, 1});
}

// NaN sentence-start scores are refused, as the decoders refuse NaN scores:
// all-NaN once split as if every score were equal.
TEST_CASE("lazy_split and cap_split_lengths: a NaN score throws, naming its token", "[lazy_split]")
{
    using Catch::Matchers::Contains;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(lazy_split(std::vector<double>(5, nan), 2), biaffine::error);
    CHECK_THROWS_WITH(lazy_split(std::vector<double>(5, nan), 2), "lazy_split: sentence-start score is NaN at token 0");
    CHECK_THROWS_WITH(lazy_split(std::vector<double>{0, 1, 2, nan}, 2), Contains("NaN at token 3"));
    // Also where no cut is needed (the document fits): bad input either way.
    CHECK_THROWS_WITH(lazy_split(std::vector<double>{0, nan}, 8), Contains("NaN at token 1"));
    const float nanf = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> f{0, 1, nanf, 1};
    CHECK_THROWS_AS(lazy_split(f.data(), f.size(), 3), biaffine::error);
    // cap_split_lengths names the token in the document, in any sentence.
    CHECK_THROWS_WITH(cap_split_lengths(sizes{2, 3}, 2, std::vector<float>{0, 1, 0, 1, nanf}),
                      "cap_split_lengths: sentence-start score is NaN at token 4");
    CHECK_THROWS_WITH(cap_split_lengths(sizes{2, 3}, 2, std::vector<float>{nanf, 1, 0, 1, 0}),
                      Contains("NaN at token 0"));
    // Without NaN the same inputs split.
    CHECK(cap_split_lengths(sizes{2, 3}, 2, std::vector<float>{0, 1, 0, 1, 0}) == sizes{2, 1, 2});
}

TEMPLATE_TEST_CASE("lazy_split: matches the naive recursion on random input", "[lazy_split]",
                   float, double)
{
    using T = TestType;
    std::mt19937 rng(12345);
    std::uniform_int_distribution<std::size_t> len_d(0, 300);
    std::uniform_int_distribution<std::size_t> max_d(1, 25);
    std::uniform_int_distribution<int> small_d(0, 3);  // many ties
    std::uniform_real_distribution<T> real_d(0, 1);
    std::uniform_int_distribution<int> pct(0, 99);

    for (int iter = 0; iter < 600; ++iter) {
        const std::size_t n = len_d(rng);
        const std::size_t max_len = max_d(rng);
        const int kind = iter % 3;
        std::vector<T> s(n);
        for (auto& x : s) {
            if (kind == 0) x = real_d(rng);
            else if (kind == 1) x = static_cast<T>(small_d(rng));
            else x = pct(rng) < 20 ? -std::numeric_limits<T>::infinity() : real_d(rng);
        }
        const sizes got = lazy_split(s, max_len);
        INFO("iter " << iter << " n " << n << " max " << max_len);
        REQUIRE(got == ref_lazy(s, max_len));

        // Properties that do not lean on the reference.
        CHECK(std::accumulate(got.begin(), got.end(), std::size_t{0}) == n);
        for (std::size_t len : got) {
            CHECK(len >= 1);
            CHECK(len <= max_len);
        }
        if (n > max_len) {
            // The document-level cut (earliest best of tokens 1..n-1) starts a piece.
            std::size_t k = 1;
            for (std::size_t i = 2; i < n; ++i) {
                if (ref_less(s[k], s[i])) k = i;
            }
            sizes starts;
            std::size_t at = 0;
            for (std::size_t len : got) {
                starts.push_back(at);
                at += len;
            }
            CHECK(std::find(starts.begin(), starts.end(), k) != starts.end());
        } else {
            CHECK(got == (n == 0 ? sizes{} : sizes{n}));
        }
    }
}

TEST_CASE("lazy_split: container overloads", "[lazy_split]")
{
    const std::array<double, 5> arr{0, 1, 2, 3, 4};
    CHECK(lazy_split(arr, 2) == sizes{2, 1, 1, 1});

    xt::xtensor<double, 1> xt1 = {5, 4, 3, 2, 1};
    CHECK(lazy_split(xt1, 2) == sizes{1, 1, 1, 2});

    // A strided view: elements 0, 2, 4, 6, 8 of the base are {1, 0, 1, 0, 1}.
    xt::xtensor<float, 1> base = {1, 9, 0, 9, 1, 9, 0, 9, 1};
    auto strided = xt::view(base, xt::range(0, 9, 2));
    CHECK(lazy_split(strided, 2) == sizes{2, 2, 1});

    xt::xarray<double> two_d = xt::zeros<double>({2, 3});
    CHECK_THROWS_AS(lazy_split(two_d, 2), biaffine::shape_error);
}

TEST_CASE("lazy_split: 1M-token monotone documents do not recurse", "[lazy_split][slow]")
{
    const std::size_t n = 1000000;
    std::vector<double> up(n);
    std::iota(up.begin(), up.end(), 0.0);
    std::vector<double> down(up.rbegin(), up.rend());

    const auto t0 = std::chrono::steady_clock::now();
    const sizes a = lazy_split(up, 100);
    const sizes b = lazy_split(down, 100);
    const double dt = seconds_since(t0);
    INFO("two 1M-token splits took " << dt << " s");

    // Increasing: each cut peels the last token; decreasing: the second token.
    REQUIRE(a.size() == n - 99);
    CHECK(a.front() == 100);
    CHECK(std::all_of(a.begin() + 1, a.end(), [](std::size_t x) { return x == 1; }));
    REQUIRE(b.size() == n - 99);
    CHECK(b.back() == 100);
    CHECK(std::all_of(b.begin(), b.end() - 1, [](std::size_t x) { return x == 1; }));

    std::mt19937 rng(7);
    std::uniform_real_distribution<double> d(0, 1);
    std::vector<double> r(n);
    for (auto& x : r) x = d(rng);
    const auto t1 = std::chrono::steady_clock::now();
    const sizes c = lazy_split(r, 100);
    const double dt1 = seconds_since(t1);
    INFO("random 1M-token split took " << dt1 << " s");
    CHECK(std::accumulate(c.begin(), c.end(), std::size_t{0}) == n);
    CHECK(std::all_of(c.begin(), c.end(), [](std::size_t x) { return x >= 1 && x <= 100; }));
}

TEST_CASE("cap_split_lengths: without scores, fewest and most equal pieces", "[cap_split]")
{
    CHECK(cap_split_lengths(sizes{3, 0, 7, 2}, 3) == sizes{3, 0, 3, 2, 2, 2});
    CHECK(cap_split_lengths(sizes{10}, 3) == sizes{3, 3, 2, 2});
    CHECK(cap_split_lengths(sizes{6}, 3) == sizes{3, 3});
    CHECK(cap_split_lengths(sizes{5}, 1) == sizes{1, 1, 1, 1, 1});
    CHECK(cap_split_lengths(sizes{}, 4).empty());
    CHECK(cap_split_lengths(sizes{0, 0}, 4) == sizes{0, 0});
    CHECK(cap_split_lengths(sizes{9, 4}, 4, nullptr) == sizes{3, 3, 3, 4});
}

TEST_CASE("cap_split_lengths: with scores, lazy within each sentence", "[cap_split]")
{
    // Sentences [0,1,2,3,4] | [] | [9,9] | [1,0,1,0,1]; the 9s are never cut
    // (they fit) and the cuts never cross a sentence boundary.
    const std::vector<double> s{0, 1, 2, 3, 4, 9, 9, 1, 0, 1, 0, 1};
    const sizes lengths{5, 0, 2, 5};
    const sizes expect{2, 1, 1, 1, 0, 2, 2, 2, 1};
    CHECK(cap_split_lengths(lengths, 2, s.data()) == expect);
    CHECK(cap_split_lengths(lengths, 2, s) == expect);

    CHECK_THROWS_AS(cap_split_lengths(lengths, 2, std::vector<double>(11)),
                    biaffine::shape_error);
    CHECK_THROWS_AS(cap_split_lengths(lengths, 0, s), biaffine::length_error);

    std::mt19937 rng(99);
    std::uniform_int_distribution<std::size_t> len_d(0, 40);
    std::uniform_real_distribution<float> val(0, 1);
    for (int iter = 0; iter < 200; ++iter) {
        sizes lens(1 + iter % 7);
        for (auto& l : lens) l = len_d(rng);
        const std::size_t total = std::accumulate(lens.begin(), lens.end(), std::size_t{0});
        std::vector<float> sc(total);
        for (auto& x : sc) x = val(rng);
        const std::size_t max_len = 1 + static_cast<std::size_t>(iter % 12);

        sizes expect_r;
        std::size_t off = 0;
        for (std::size_t l : lens) {
            if (l == 0) {
                expect_r.push_back(0);
                continue;
            }
            const std::vector<float> piece(sc.begin() + static_cast<std::ptrdiff_t>(off),
                                           sc.begin() + static_cast<std::ptrdiff_t>(off + l));
            const sizes sub = ref_lazy(piece, max_len);
            expect_r.insert(expect_r.end(), sub.begin(), sub.end());
            off += l;
        }
        INFO("iter " << iter);
        CHECK(cap_split_lengths(lens, max_len, sc) == expect_r);

        const sizes flat = cap_split_lengths(lens, max_len);
        CHECK(std::accumulate(flat.begin(), flat.end(), std::size_t{0}) == total);
        for (std::size_t x : flat) CHECK(x <= max_len);
    }
}
