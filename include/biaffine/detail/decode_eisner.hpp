// biaffine/detail/decode_eisner.hpp - Eisner's projective decoder.
//
// First-order, single root, O(n^3) time and O(n^2) memory. The chart covers
// the n tokens only; the root's single arc is added at the end, to the token
// r maximising score(r, r) + (complete span 0..r headed by r, leftward) +
// (complete span r..n-1 headed by r, rightward), which is exactly the set of
// projective trees with one root. Every chart table is stored in both
// orientations so each inner maximum reads two contiguous rows.
#pragma once

#include "biaffine/abi.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "biaffine/detail/eigen.hpp"

#include "biaffine/detail/decode_common.hpp"

BIAFFINE_NAMESPACE_BEGIN
namespace detail {

template <class W>
struct eisner_scratch {
    decode_buffer<W> cells;               // 7 chart tables and the weights, [n, n] each
    decode_buffer<std::uint32_t> splits;  // 3 back-pointer tables of [n, n]

    static eisner_scratch& local()
    {
        thread_local eisner_scratch s;
        return s;
    }
    void trim()
    {
        cells.trim(decode_keep_cells);
        splits.trim(decode_keep_cells);
    }
};

/// First r in [0, len) maximising a[r] + b[r]; the maximum goes to `best`.
inline std::size_t eisner_argmax_sum(const double* a, const double* b, std::size_t len, double& best)
{
    using map = Eigen::Map<const Eigen::ArrayXd>;
    const auto L = static_cast<Eigen::Index>(len);
    best = (map(a, L) + map(b, L)).maxCoeff();  // vectorised
    // First index reaching it: the same sums recomputed, a minimum over the
    // matching indices (a loop the compiler vectorises; no early exit).
    const auto end = static_cast<std::int64_t>(len);
    std::int64_t first = end;
    for (std::int64_t r = 0; r < end; ++r) {
        const std::int64_t c = a[r] + b[r] == best ? r : end;
        first = c < first ? c : first;
    }
    return first == end ? 0 : static_cast<std::size_t>(first);  // end only if a sum overflowed
}

inline std::size_t eisner_argmax_sum(const tiered_weight* a, const tiered_weight* b, std::size_t len,
                                     tiered_weight& best)
{
    std::size_t r = 0;
    best = weight_add(a[0], b[0]);
    for (std::size_t k = 1; k < len; ++k) {
        const tiered_weight v = weight_add(a[k], b[k]);
        if (weight_less(best, v)) {
            best = v;
            r = k;
        }
    }
    return r;
}

/// Eisner on loaded arc weights `S` ([n, n], S[d * n + h]: head h for
/// dependent d, diagonal the root arcs), n >= 2. Returns heads `[n]`.
template <class W>
std::vector<std::size_t> eisner_solve(std::size_t n, const W* S, eisner_scratch<W>& ws)
{
    const std::size_t nn = n * n;
    W* base = ws.cells.get(8 * nn);  // 7 tables, then S (loaded by the caller)
    // cr[s][t]: complete, head s, tokens s..t; cl[s][t]: complete, head t;
    // ir / il: incomplete with the arc s -> t / t -> s. The *_t tables hold
    // the same values transposed ([t][s]).
    W* cr = base;
    W* cl = base + nn;
    W* ir = base + 2 * nn;
    W* il = base + 3 * nn;
    W* cr_t = base + 4 * nn;
    W* cl_t = base + 5 * nn;
    W* il_t = base + 6 * nn;
    std::uint32_t* bp_i = ws.splits.get(3 * nn);  // shared split of ir and il
    std::uint32_t* bp_cr = bp_i + nn;
    std::uint32_t* bp_cl = bp_i + 2 * nn;

    const W zero = weight_zero(W{});
    for (std::size_t s = 0; s < n; ++s) {
        cr[s * n + s] = zero;
        cl[s * n + s] = zero;
        cr_t[s * n + s] = zero;
        cl_t[s * n + s] = zero;
    }
    for (std::size_t width = 1; width < n; ++width) {
        for (std::size_t s = 0; s + width < n; ++s) {
            const std::size_t t = s + width;
            // Incomplete: max over s <= r < t of cr[s][r] + cl[r+1][t].
            W best;
            const std::size_t r = s + eisner_argmax_sum(cr + s * n + s, cl_t + t * n + s + 1, width, best);
            bp_i[s * n + t] = static_cast<std::uint32_t>(r);
            ir[s * n + t] = weight_add(best, S[t * n + s]);  // arc s -> t
            const W l = weight_add(best, S[s * n + t]);      // arc t -> s
            il[s * n + t] = l;
            il_t[t * n + s] = l;
        }
        for (std::size_t s = 0; s + width < n; ++s) {
            const std::size_t t = s + width;
            // Right complete: max over s < r <= t of ir[s][r] + cr[r][t].
            W best;
            const std::size_t r = s + 1 + eisner_argmax_sum(ir + s * n + s + 1, cr_t + t * n + s + 1, width, best);
            bp_cr[s * n + t] = static_cast<std::uint32_t>(r);
            cr[s * n + t] = best;
            cr_t[t * n + s] = best;
            // Left complete: max over s <= r < t of cl[s][r] + il[r][t].
            const std::size_t r2 = s + eisner_argmax_sum(cl + s * n + s, il_t + t * n + s, width, best);
            bp_cl[s * n + t] = static_cast<std::uint32_t>(r2);
            cl[s * n + t] = best;
            cl_t[t * n + s] = best;
        }
    }

    // The root's single arc: first r on ties.
    std::size_t root = 0;
    W best = weight_add(weight_add(S[0], cl[0]), cr[n - 1]);
    for (std::size_t r = 1; r < n; ++r) {
        const W v = weight_add(weight_add(S[r * n + r], cl[r]), cr[r * n + n - 1]);
        if (weight_less(best, v)) {
            best = v;
            root = r;
        }
    }

    // Back-trace with an explicit stack of (kind, s, t).
    enum kind : unsigned char { k_cr, k_cl, k_ir, k_il };
    struct item {
        kind k;
        std::size_t s, t;
    };
    std::vector<std::size_t> heads(n, 0);
    heads[root] = root;
    std::vector<item> stack{{k_cl, 0, root}, {k_cr, root, n - 1}};
    while (!stack.empty()) {
        const item it = stack.back();
        stack.pop_back();
        if (it.s == it.t) continue;
        const std::size_t s = it.s, t = it.t;
        switch (it.k) {
        case k_cr: {
            const std::size_t r = bp_cr[s * n + t];
            stack.push_back({k_ir, s, r});
            stack.push_back({k_cr, r, t});
            break;
        }
        case k_cl: {
            const std::size_t r = bp_cl[s * n + t];
            stack.push_back({k_cl, s, r});
            stack.push_back({k_il, r, t});
            break;
        }
        case k_ir:
        case k_il: {
            if (it.k == k_ir) heads[t] = s;
            else heads[s] = t;
            const std::size_t r = bp_i[s * n + t];
            stack.push_back({k_cr, s, r});
            stack.push_back({k_cl, r + 1, t});
            break;
        }
        }
    }
    return heads;
}

/// eisner_heads on `[n, n]` scores whose row m is `row(m, buf)`.
template <class V, class Row>
std::vector<std::size_t> eisner_heads_rows(std::size_t n, const Row& row, V* buf)
{
    constexpr const char* where = "eisner_heads";
    if (n == 0) return {};
    if (n >= std::numeric_limits<std::uint32_t>::max()) {
        throw length_error(msg(where, ": n = ", n, " is too large"));
    }
    const std::size_t nn =
        to_index_size(checked_product("eisner_heads: chart", n, n, 8, sizeof(tiered_weight)), where) /
        (8 * sizeof(tiered_weight));
    // One pass decides the weight type: NaN throws (row-major order, as
    // argmax_heads), an infinity switches to (tier, sum) weights.
    // Sums of up to 2n scores must not overflow on the double path: larger
    // magnitudes take the tiered path too, whose scalar maxima stay in range.
    const double limit = std::numeric_limits<double>::max() / (4.0 * static_cast<double>(n));
    bool finite = true;
    for (std::size_t m = 0; m < n; ++m) {
        const V* r = row(m, buf);
        for (std::size_t l = 0; l < n; ++l) {
            check_not_nan(r[l], m, l, where);
            finite &= std::fabs(static_cast<double>(r[l])) <= limit;
        }
    }
    if (n == 1) return {0};
    const auto run = [&](auto tag) {
        using W = decltype(tag);
        auto& ws = eisner_scratch<W>::local();
        W* S = ws.cells.get(8 * nn) + 7 * nn;
        for (std::size_t m = 0; m < n; ++m) {
            const V* r = row(m, buf);
            for (std::size_t l = 0; l < n; ++l) S[m * n + l] = to_weight<W>(r[l]);
        }
        auto heads = eisner_solve<W>(n, S, ws);
        ws.trim();
        return heads;
    };
    return finite ? run(double{}) : run(tiered_weight{});
}

}  // namespace detail
BIAFFINE_NAMESPACE_END
