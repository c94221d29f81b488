// Tests for biaffine/detail/softmax.hpp: softmax_span and softmax_group
// against a double-precision softmax, at every length around the packet
// edges, with large magnitudes, -inf entries and a guard past the group.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "biaffine/detail/softmax.hpp"

namespace {

// Max over the group of |got - want| / want, want in double, in units of
// a bound of eps * (8 + 2 |x - max| + len): rounding x - max moves the
// exponential by |x - max| units, and the sum adds up to len. Where want is
// below 1e-30 (float) or 1e-290 (double) the error counts against that
// floor (near the smallest normal T the packet exp loses bits, as Eigen's
// array exp does); -inf inputs give at most that floor (the packet exp
// clamps its argument, so not exactly 0). Values past `len` (a sentinel)
// must be untouched.
template <class T, class F>
double worst_error(F&& softmax, const std::vector<T>& in, std::size_t len)
{
    const T sentinel = T(-12345);
    std::vector<T> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(len));
    x.push_back(sentinel);
    softmax(x.data(), len);
    REQUIRE(x[len] == sentinel);
    double top = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < len; ++i) top = std::max(top, static_cast<double>(in[i]));
    double sum = 0.0;
    for (std::size_t i = 0; i < len; ++i) sum += std::exp(static_cast<double>(in[i]) - top);
    const double eps = std::numeric_limits<T>::epsilon(), floor = sizeof(T) == 4 ? 1e-30 : 1e-290;
    double worst = 0.0;
    for (std::size_t i = 0; i < len; ++i) {
        if (std::isinf(in[i])) {
            REQUIRE(x[i] >= T(0));
            REQUIRE(static_cast<double>(x[i]) <= floor);
            continue;
        }
        const double gap = top - static_cast<double>(in[i]);
        const double want = std::exp(-gap) / sum;
        const double bound = eps * (8.0 + 2.0 * gap + static_cast<double>(len));
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) - want) / std::max(want, floor) / bound);
    }
    return worst;
}

template <class T>
void check_softmax()
{
    std::mt19937 gen(3);
    for (double spread : {1.0, 30.0}) {
        std::normal_distribution<double> d(0.0, spread);
        for (std::size_t len = 0; len <= 70; ++len) {
            INFO("length " << len << ", spread " << spread);
            std::vector<T> in(len + 1);
            for (T& v : in) v = static_cast<T>(d(gen));
            // Masked-out scores (-inf) give (nearly) 0 and leave the rest a softmax.
            if (len >= 3) in[len / 2] = -std::numeric_limits<T>::infinity();
            CHECK(worst_error<T>([](T* x, std::size_t n) { biaffine::detail::softmax_span(x, n); }, in, len) <= 1.0);
            CHECK(worst_error<T>([](T* x, std::size_t n) { biaffine::detail::softmax_group(x, n); }, in, len) <= 1.0);
        }
    }
}

}  // namespace

TEST_CASE("softmax_span and softmax_group equal a double softmax at every length", "[softmax]")
{
    check_softmax<float>();
    check_softmax<double>();
}

TEST_CASE("softmax_span keeps a group whose scores are all equal uniform", "[softmax]")
{
    for (std::size_t len : {std::size_t(1), std::size_t(7), std::size_t(16), std::size_t(33)}) {
        std::vector<float> x(len, 80.0f);  // exp(80) alone would overflow float
        biaffine::detail::softmax_span(x.data(), len);
        for (float v : x) REQUIRE(std::abs(v - 1.0f / static_cast<float>(len)) <= 1e-6f);
    }
}
