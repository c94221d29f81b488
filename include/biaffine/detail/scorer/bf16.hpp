// biaffine/detail/scorer/bf16.hpp - a float scorer's inference in bf16
// (scorer_config::precision = compute_precision::bf16): predict_into's other
// path, for every output kind, and what it costs.
//
// The weights are rounded and packed once per parameter version into the
// scorer's bf16_weights_cache (made with the scorer; an immutable pack per
// version, replaced when parameter_version() has moved, so concurrent calls
// never read a pack being written: packing per call took a few milliseconds
// a batch at 50 labels, a third of a batch's time under a 16 MiB budget); the
// splits then go a group at a time through the projections, U W' and their
// per-split products (bf16_forward::run).
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/compute/bf16_forward.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/workspace.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

}  // namespace detail

template <class T, class Backend, class Out>
const char* biaffine_scorer<T, Backend, Out>::bf16_arithmetic() noexcept
{
    if constexpr (std::is_same<T, float>::value) {
        return detail::scorer_bf16_forward::math_name();
    } else {
        return "none (compute_precision::bf16 needs a float scorer)";
    }
}

template <class T, class Backend, class Out>
template <class Kind, class Items, class Heads, class Dest, class Done>
void biaffine_scorer<T, Backend, Out>::predict_into_bf16(const Items& X, const Heads& H, Dest&& dest, Done&& done) const
{
    if constexpr (!std::is_same<T, float>::value) {
        (void)X, (void)H, (void)dest, (void)done;
        throw error("biaffine_scorer: compute_precision::bf16 needs a float scorer");  // the constructor says so first
    } else {
        using F = detail::scorer_bf16_forward;
        using D = typename F::D;
        const detail::scorer_dims d = dims();
        std::size_t max_n = 0;
        std::uint64_t N = 0;
        for (std::size_t k = 0; k < X.size(); ++k) {
            max_n = std::max(max_n, X[k].rows);
            N += X[k].rows;
        }
        const std::size_t G = F::capacity(d, N, max_n);
        // Held for the whole call: a newer pack published meanwhile (another
        // call saw a version change) never changes the one this call reads.
        const auto pack = bf16_.acquire(parameter_version(), d, weights());
        const auto& w = pack->w;
        scratch<unsigned char> s(detail::to_index_size(F::scratch_bytes(d, G, max_n), "bf16 scratch"));
        scratch<std::size_t> heads(Kind::gathers_rows ? max_n : 0);
        F::run(
            w, [&](std::size_t k) { return detail::read_only(X[k]); }, X.size(), s.data(), G,
            [&](std::size_t k, const D* vb, const D* tb, float* packed) {
                const std::size_t n = X[k].rows;
                auto y = dest(k, n);
                Kind::template bf16_product<F>(d, vb, tb, H, k, heads.data(), packed, y);
                done(k, y);
            });
    }
}

// Eval in bf16: the group scratch and (labels at heads) one split's head
// list; the caller adds outputs and the stream buffer. The packed weights
// are the scorer's own, like its parameters (bf16_weights_cache), not a
// batch's.
template <class T, class Backend, class Out>
template <class Kind>
batch_cost biaffine_scorer<T, Backend, Out>::kind_cost_bf16(std::size_t count, std::size_t max_len) const
{
    using F = detail::scorer_bf16_forward;
    const char* what = "batch cost";
    const std::size_t G = F::capacity(dims(), detail::checked_mul(count, max_len, what), max_len);
    batch_cost c;
    c.scratch = detail::checked_add(detail::scratch_bytes<unsigned char>(F::scratch_bytes(dims(), G, max_len)),
                                    detail::scratch_bytes<std::size_t>(Kind::gathers_rows ? max_len : 0), what);
    return c;
}

BIAFFINE_NAMESPACE_END
