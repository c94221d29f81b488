// biaffine/detail/softmax.hpp - the softmax of one contiguous group of
// scores (a split's row of heads, or one head's labels), in SIMD packets.
//
// Groups are short (a split's length, or the label count: tens of scores),
// so Eigen's array expression spent most of a group on its edges: std::exp
// element by element for the scores past the last whole packet, and the
// reductions. softmax_span takes the partial packet through a buffer padded
// with -inf, so every exponential is a packet one. One core of an AMD EPYC
// Zen 5 (AVX-512, float), ns a score, Eigen's expression against
// softmax_span: 13 scores 2.72 / 1.65, 20 scores 2.02 / 1.08, 50 scores
// 1.12 / 0.49, 100 scores 0.59 / 0.35; but 5 scores 3.17 / 4.12 and 6
// scores 3.05 / 3.45 (the buffer's round trip), so softmax_group leaves
// groups of fewer than BIAFFINE_SOFTMAX_SPAN_MIN scores to Eigen.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <limits>

#include "biaffine/config.hpp"
#include "biaffine/detail/eigen.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

/// x [len] = exp(x - max x) / sum, in place. Like Eigen's packet exp, a
/// score far below the max (by more than about 88 in float) comes out as a
/// tiny denormal rather than exactly 0.
template <class T>
void softmax_span(T* x, std::size_t len)
{
    using namespace Eigen::internal;
    using P = typename packet_traits<T>::type;
    constexpr std::size_t w = static_cast<std::size_t>(packet_traits<T>::size);
    if (len == 0) return;
    const std::size_t full = len / w * w, rest = len - full;
    alignas(64) T tail[w];
    for (std::size_t i = 0; i < w; ++i) tail[i] = i < rest ? x[full + i] : -std::numeric_limits<T>::infinity();
    P top = ploadu<P>(tail);
    for (std::size_t i = 0; i < full; i += w) top = pmax(top, ploadu<P>(x + i));
    const P max = pset1<P>(predux_max(top));
    P sum = pzero(top);
    for (std::size_t i = 0; i < full; i += w) {
        const P e = pexp(psub(ploadu<P>(x + i), max));
        pstoreu(x + i, e);
        sum = padd(sum, e);
    }
    // The padding's exponentials are zeroed: Eigen's pexp clamps -inf to a
    // tiny power rather than 0.
    pstoreu(tail, pexp(psub(ploadu<P>(tail), max)));
    for (std::size_t i = rest; i < w; ++i) tail[i] = T(0);
    sum = padd(sum, ploadu<P>(tail));
    const T total = predux(sum);
    const P div = pset1<P>(total);
    for (std::size_t i = 0; i < full; i += w) pstoreu(x + i, pdiv(ploadu<P>(x + i), div));
    for (std::size_t i = 0; i < rest; ++i) x[full + i] = tail[i] / total;
}

/// softmax_span from BIAFFINE_SOFTMAX_SPAN_MIN scores on, else Eigen's
/// array expression.
template <class T>
void softmax_group(T* x, std::size_t len)
{
    if (len >= BIAFFINE_SOFTMAX_SPAN_MIN) {
        softmax_span(x, len);
        return;
    }
    if (len == 0) return;
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(x, static_cast<Eigen::Index>(len));
    a = (a - a.maxCoeff()).exp();
    a /= a.sum();
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
