// reference/reference_mst.hpp - the dense Chu-Liu/Edmonds that biaffine::mst_heads
// used up to issue 18, kept verbatim as a reference: every score becomes a
// 24-byte lexicographic weight (root count, infinity count, finite sum) before
// the algorithm starts. test_decode checks the new mst_heads against it (same
// tree, since the new one follows the same search order), and bench_decode
// times both so the speedup shows in one run. reference/ holds what tests
// and benches both use (the CMake target biaffine_reference puts it on their
// include path); neither includes the other's files.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "biaffine/decode.hpp"

namespace biaffine_reference {

using biaffine::detail::check_not_nan;
using biaffine::detail::checked_product;
using biaffine::detail::msg;
using biaffine::detail::to_index_size;
using biaffine::length_error;

/// An arc weight in the ordered group Z x Z x R (compared lexicographically).
/// `root` is -1 per root arc, so any tree with one root beats any with more;
/// `inf` is +-1 per infinite score; `s` sums the finite scores.
struct mst_weight {
    double s;
    std::int32_t root;
    std::int32_t inf;
};

inline bool operator<(const mst_weight& a, const mst_weight& b)
{
    if (a.root != b.root) return a.root < b.root;
    if (a.inf != b.inf) return a.inf < b.inf;
    return a.s < b.s;
}

inline mst_weight operator-(const mst_weight& a, const mst_weight& b)
{
    return {a.s - b.s, a.root - b.root, a.inf - b.inf};
}

/// Best known (reduced) arc into one super-node from another, plus the
/// original arc src -> dst (nodes of the graph with the artificial root 0).
struct mst_entry {
    mst_weight w;
    std::uint32_t src;
    std::uint32_t dst;
};

template <class Get>
std::vector<std::size_t> reference_mst_impl(std::size_t n, const Get& get)
{
    constexpr const char* where = "mst_heads";
    if (n == 0) return {};
    if (n == 1) {
        check_not_nan(get(0, 0), 0, 0, where);
        return {0};
    }
    if (n >= std::numeric_limits<std::uint32_t>::max()) {
        throw length_error(msg(where, ": n = ", n, " is too large"));
    }
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    const std::size_t N = n + 1;  // node 0 is the artificial root, token m is node m + 1
    const std::size_t cells = to_index_size(
        checked_product("mst_heads: score graph", N, N, sizeof(mst_entry)), where) / sizeof(mst_entry);

    // in[x * N + y]: best arc from super-node slot y into slot x. Row 0 (into
    // the root) is never used.
    std::vector<mst_entry> in(cells);
    for (std::size_t v = 1; v < N; ++v) {
        const std::size_t m = v - 1;
        for (std::size_t u = 0; u < N; ++u) {
            if (u == v) continue;
            const std::size_t l = (u == 0) ? m : u - 1;
            const auto raw = get(m, l);
            check_not_nan(raw, m, l, where);
            const double d = static_cast<double>(raw);
            mst_weight w{d, u == 0 ? -1 : 0, 0};
            if (std::isinf(d)) {
                w.s = 0.0;
                w.inf = d > 0 ? 1 : -1;
            }
            in[v * N + u] = {w, static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(v)};
        }
    }

    // Contraction forest: nodes 0..N-1 are the original nodes, later ones the
    // contracted cycles. edge[t] is the arc entering t (a cycle arc for cycle
    // members, the final arc for outermost nodes).
    std::vector<std::size_t> tparent(N, none);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> edge(N, {0, 0});
    tparent.reserve(2 * N);
    edge.reserve(2 * N);

    std::vector<std::size_t> node_of(N);  // slot -> forest node
    for (std::size_t i = 0; i < N; ++i) node_of[i] = i;
    std::vector<mst_weight> enter_w(N);          // weight of each slot's chosen arc
    std::vector<unsigned char> status(N, 0);     // 0 unseen, 1 on path, 2 attached to root
    std::vector<unsigned char> dead(N, 0);
    std::vector<unsigned char> in_cycle(N, 0);
    std::vector<std::size_t> alive(N);
    for (std::size_t i = 0; i < N; ++i) alive[i] = i;
    status[0] = 2;

    std::vector<std::size_t> path, cycle;
    std::vector<mst_entry> merged;
    for (std::size_t start = 1; start < N; ++start) {
        if (status[start] != 0) continue;
        path.assign(1, start);
        status[start] = 1;
        while (!path.empty()) {
            const std::size_t x = path.back();
            const mst_entry* row = &in[x * N];
            std::size_t best = none;
            for (std::size_t y : alive) {
                if (y == x) continue;
                if (best == none || row[best].w < row[y].w) best = y;  // ties: first alive slot
            }
            enter_w[x] = row[best].w;
            edge[node_of[x]] = {row[best].src, row[best].dst};

            if (status[best] == 2) {  // the whole path now hangs off the root's tree
                for (std::size_t p : path) status[p] = 2;
                path.clear();
                break;
            }
            if (status[best] == 0) {
                status[best] = 1;
                path.push_back(best);
                continue;
            }

            // best is on the path: path[pos..] is a cycle; contract it into slot c.
            std::size_t pos = path.size() - 1;
            while (path[pos] != best) --pos;
            cycle.assign(path.begin() + static_cast<std::ptrdiff_t>(pos), path.end());
            path.resize(pos);
            const std::size_t c = best;
            const std::size_t t = tparent.size();
            tparent.push_back(none);
            edge.push_back({0, 0});
            for (std::size_t x2 : cycle) {
                tparent[node_of[x2]] = t;
                in_cycle[x2] = 1;
            }

            // Arcs into the cycle, reduced by the cycle arc they would replace.
            merged.assign(N, mst_entry{});
            for (std::size_t y : alive) {
                if (in_cycle[y]) continue;
                bool have = false;
                for (std::size_t x2 : cycle) {
                    const mst_entry& e = in[x2 * N + y];
                    const mst_weight r = e.w - enter_w[x2];
                    if (!have || merged[y].w < r) {
                        merged[y] = {r, e.src, e.dst};
                        have = true;
                    }
                }
            }
            for (std::size_t y : alive) {
                if (!in_cycle[y]) in[c * N + y] = merged[y];
            }
            // Arcs out of the cycle into nodes that may still choose (not done, not root).
            for (std::size_t y : alive) {
                if (in_cycle[y] || status[y] == 2) continue;
                mst_entry* ry = &in[y * N];
                std::size_t b = cycle.front();
                for (std::size_t x2 : cycle) {
                    if (ry[b].w < ry[x2].w) b = x2;
                }
                ry[c] = ry[b];
            }

            for (std::size_t x2 : cycle) {
                in_cycle[x2] = 0;
                if (x2 != c) dead[x2] = 1;
            }
            std::size_t k = 0;
            for (std::size_t y : alive) {
                if (!dead[y]) alive[k++] = y;
            }
            alive.resize(k);
            node_of[c] = t;
            status[c] = 1;
            path.push_back(c);
        }
    }

    // Expansion, outermost first (a contracted node has a larger id than its
    // members): the member containing the entering arc's target takes that arc
    // instead of its cycle arc; every other member keeps its cycle arc.
    for (std::size_t t = tparent.size(); t-- > N;) {
        std::size_t w = edge[t].second;
        while (tparent[w] != t) w = tparent[w];
        edge[w] = edge[t];
    }

    std::vector<std::size_t> heads(n);
    for (std::size_t v = 1; v < N; ++v) {
        const std::size_t src = edge[v].first;
        heads[v - 1] = (src == 0) ? v - 1 : src - 1;
    }
    return heads;
}


/// Reference MST of the `[n, n]` scores at `data[m * row_stride + l]`.
template <class T>
std::vector<std::size_t> reference_mst(const T* data, std::size_t n, std::size_t row_stride)
{
    return reference_mst_impl(
        n, [data, row_stride](std::size_t m, std::size_t l) { return data[m * row_stride + l]; });
}

}  // namespace biaffine_reference
