// fuzz/fuzz_mst.cpp - head decoding on arbitrary score matrices.
//
// mst_heads: the output is a tree with exactly one root (checked here
// independently of is_tree), and for n <= 5 its score is the best over every
// single-root tree (brute force; integer scores, so sums are exact; infinite
// scores rank by tier: +inf count minus -inf count, then the finite sum). For
// larger n it is at least as good as every star and chain tree. eisner_heads:
// a projective tree with one root (checked independently), for n <= 5 the best
// over every projective single-root tree (brute force, same tier order), for
// larger n at least as good as every chain (chains are projective) and never
// better than mst_heads. argmax_heads: each head is the row's first maximum. A
// NaN anywhere throws biaffine::error from all three; the pointer (any row
// stride), xtensor and Eigen overloads agree.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "biaffine/detail/eigen.hpp"  // Eigen, without GCC 12's AVX-512 false positives
#include <xtensor/xtensor.hpp>

#include "biaffine/decode.hpp"
#include "fuzz_input.hpp"

using namespace biaffine;

namespace {

/// An independent tree check: heads in range, one root, no cycle.
bool tree(const std::vector<std::size_t>& h)
{
    const std::size_t n = h.size();
    std::size_t roots = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (h[i] >= n) return false;
        if (h[i] == i) ++roots;
    }
    if (n == 0) return true;
    if (roots != 1) return false;
    for (std::size_t i = 0; i < n; ++i) {  // n steps from anywhere reach the root
        std::size_t v = i;
        for (std::size_t s = 0; s < n; ++s) v = h[v];
        if (h[v] != v) return false;
    }
    return true;
}

/// Independent projectivity check (h a tree): for every arc h -> d, each token
/// strictly between them descends from h.
bool projective(const std::vector<std::size_t>& h)
{
    const std::size_t n = h.size();
    for (std::size_t d = 0; d < n; ++d) {
        if (h[d] == d) continue;
        const std::size_t lo = std::min(d, h[d]), hi = std::max(d, h[d]);
        for (std::size_t k = lo + 1; k < hi; ++k) {
            std::size_t v = k;
            for (std::size_t s = 0; s < n && v != h[d] && h[v] != v; ++s) v = h[v];
            if (v != h[d]) return false;
        }
    }
    return true;
}

/// (tier, finite sum) of a head assignment: compared lexicographically.
template <class T>
std::pair<long, double> weight(const std::vector<T>& s, std::size_t stride, const std::vector<std::size_t>& h)
{
    long tier = 0;
    double sum = 0;
    for (std::size_t m = 0; m < h.size(); ++m) {
        const double v = static_cast<double>(s[m * stride + h[m]]);
        if (std::isinf(v)) tier += v > 0 ? 1 : -1;
        else sum += v;
    }
    return {tier, sum};
}

template <class T>
void run(fuzz::input& in)
{
    const std::size_t n = in.u8() % 4 == 0 ? in.small(0, 40) : in.small(0, 7);
    const std::size_t stride = n + in.small(0, 3);
    std::vector<T> s(stride * n + 1, T(0));
    bool has_nan = false;
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            const std::uint8_t b = in.u8();
            T v = static_cast<T>(static_cast<int>(b % 32) - 16);
            if (b >= 250 && std::is_floating_point_v<T>) {
                if (b == 255 && in.u8() < 64) {
                    v = std::numeric_limits<T>::quiet_NaN();
                    has_nan = true;
                } else {
                    v = (b % 2 ? 1 : -1) * std::numeric_limits<T>::infinity();
                }
            }
            s[m * stride + l] = v;
        }
    }
    if (has_nan) {
        int threw = 0;
        try {
            mst_heads(s.data(), n, stride);
        } catch (const error&) {
            ++threw;
        }
        try {
            argmax_heads(s.data(), n, stride);
        } catch (const error&) {
            ++threw;
        }
        try {
            eisner_heads(s.data(), n, stride);
        } catch (const error&) {
            ++threw;
        }
        FUZZ_CHECK(threw == 3);
        return;
    }
    const std::vector<std::size_t> heads = mst_heads(s.data(), n, stride);
    FUZZ_CHECK(heads.size() == n);
    FUZZ_CHECK(tree(heads));
    FUZZ_CHECK(is_tree(heads));
    const auto w = weight(s, stride, heads);
    const std::vector<std::size_t> proj = eisner_heads(s.data(), n, stride);
    FUZZ_CHECK(proj.size() == n);
    FUZZ_CHECK(tree(proj));
    FUZZ_CHECK(projective(proj));
    const auto wp = weight(s, stride, proj);
    FUZZ_CHECK(!(w < wp));  // the projective optimum never beats the MST
    if (n <= 5) {
        std::vector<std::size_t> h(n, 0);
        std::pair<long, double> best{std::numeric_limits<long>::min(), 0};
        std::pair<long, double> best_proj = best;
        for (;;) {
            if (tree(h)) {
                const auto wh = weight(s, stride, h);
                best = std::max(best, wh);
                if (projective(h)) best_proj = std::max(best_proj, wh);
            }
            std::size_t i = 0;
            while (i < n && ++h[i] == n) h[i++] = 0;
            if (i == n) break;
        }
        if (n > 0) FUZZ_CHECK(w == best);
        if (n > 0) FUZZ_CHECK(wp == best_proj);
    }
    if (n > 5) {
        for (std::size_t r = 0; r < n; ++r) {  // the star and a chain rooted at r
            std::vector<std::size_t> star(n, r), chain(n), order{r};
            for (std::size_t i = 0; i < n; ++i)
                if (i != r) order.push_back(i);
            chain[r] = r;
            for (std::size_t i = 1; i < n; ++i) chain[order[i]] = order[i - 1];
            FUZZ_CHECK(tree(star) && tree(chain));
            FUZZ_CHECK(!(w < weight(s, stride, star)));
            FUZZ_CHECK(!(w < weight(s, stride, chain)));
            // Projective: the star, and the chain r -> r-1 -> ... -> 0 plus
            // r -> r+1 -> ... -> n-1.
            std::vector<std::size_t> pchain(n);
            for (std::size_t i = 0; i < n; ++i) pchain[i] = i < r ? i + 1 : (i > r ? i - 1 : r);
            FUZZ_CHECK(projective(star) && projective(pchain));
            FUZZ_CHECK(!(wp < weight(s, stride, star)));
            FUZZ_CHECK(!(wp < weight(s, stride, pchain)));
        }
    }
    // Greedy heads: the first maximum of each row.
    const std::vector<std::size_t> greedy = argmax_heads(s.data(), n, stride);
    FUZZ_CHECK(greedy.size() == n);
    for (std::size_t m = 0; m < n; ++m) {
        std::size_t best = 0;
        for (std::size_t l = 1; l < n; ++l) {
            if (s[m * stride + l] > s[m * stride + best]) best = l;
        }
        FUZZ_CHECK(greedy[m] == best);
    }
    // Dense overloads agree with the strided pointer.
    xt::xtensor<T, 2> x = xt::xtensor<T, 2>::from_shape({n, n});
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> e(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(n));
    for (std::size_t m = 0; m < n; ++m) {
        for (std::size_t l = 0; l < n; ++l) {
            x(m, l) = s[m * stride + l];
            e(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(l)) = s[m * stride + l];
        }
    }
    FUZZ_CHECK(mst_heads(x) == heads);
    FUZZ_CHECK(mst_heads(e) == heads);
    FUZZ_CHECK(argmax_heads(x) == greedy);
    FUZZ_CHECK(eisner_heads(x) == proj);
    FUZZ_CHECK(eisner_heads(e) == proj);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    switch (in.u8() % 3) {
    case 0: run<double>(in); break;
    case 1: run<float>(in); break;
    default: run<int>(in); break;
    }
    return 0;
}
